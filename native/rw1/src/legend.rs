//! The legend: the text another model needs in its prompt to read and write lines under a profile, word for word
//! as the reference writes it.
//!
//! `lean` drops the comprehension-readback keys, the profile's described slots from the per-type lists and the core
//! asks the profile does not use, for teams that use envelope echo only; when that drops `UNDO`, the sentence that
//! tells agents to reverse a done report with `ask=UNDO` goes too (the one place a legend differs from the
//! reference's).

use crate::parse::VERSION;

type Bytes = Vec<u8>;

/// A message type as the legend lists it.
#[derive(Debug, Default, Clone)]
pub struct TypeText {
    pub code: Bytes,
    pub name: Bytes,
    pub required: Vec<Bytes>,
    pub optional: Vec<Bytes>,
}

/// What a legend is written from: a compiled profile's words, in the profile's orders.
#[derive(Debug, Default, Clone)]
pub struct Source {
    pub types: Vec<TypeText>,
    /// (slot, description) of the profile's described slots
    pub slot_desc: Vec<(Bytes, Bytes)>,
    /// (slot, declared type) of every slot
    pub slot_types: Vec<(Bytes, Bytes)>,
    /// (enum, [(code, description)])
    pub enums: Vec<(Bytes, Vec<(Bytes, Bytes)>)>,
    pub core_asks: Vec<Bytes>,
    pub asks_used: Vec<Bytes>,
    /// the core's constraint keys and their meanings
    pub constraint_keys: Vec<(Bytes, Bytes)>,
    /// (ask, its execution slots)
    pub exec_map: Vec<(Bytes, Vec<Bytes>)>,
    pub declared: Option<Bytes>,
    pub agents: Vec<Bytes>,
    pub ans: bool,
    pub item_kinds: Vec<(Bytes, Bytes)>,
    pub item_examples: Vec<Bytes>,
}

const ACC_SLOTS: [&[u8]; 5] = [b"acc", b"keys", b"do", b"not", b"asm"];
const RB_LEAN: &str = "RB echoes the HO's item, ask and due as decoded, plus any slots the HO names in rb= (rb=all: \
every slot). Code-side receivers add h=<digest of the HO>. Unknown code: reply UN why=UNK. Every reply carries re=.";
const RB_FULL: &str = "RB must echo the HO's item, ask and due as decoded (plus any slots the HO names in rb=; rb=all \
means every slot). If the HO says rb=acc or rb=plan, the RB must also carry acc=<criteria you derived from the brief, \
as key:value tokens joined by +>, and for rb=plan do=<what you will produce>; optional not=<what you exclude> \
asm=<assumptions>; tail = the task in your own words. Code-side receivers add h=<digest of the HO>. Unknown code: \
reply UN why=UNK. Every reply carries re=.";
const CLOSE: &str = "Every HO closes exactly once: DN, UN or FL from the receiver, or CX from the sender. On a CX, \
abandon anything prepared and answer AN val=Y; if the act already ran, send its DN instead. exp=YYYYMMDDTHHMMZ (UTC) \
is the latest moment to act or confirm: never act on an HO, and never confirm a statement, past its exp.";
const CLOSE_UNDO: &str =
    " A DN that does not match the plan is reversed with a new HO ask=UNDO ctx=<that DN id>.";
const IDS: &str = "Message ids are <yourname>-<n>, unique in the conversation. Readback level is set per handoff by \
the sender: rb=exec before an irreversible act (a payment release, a payee change, anything external) where the \
profile names execution slots, rb=all where it does not; the default envelope echo otherwise.";
const EXEC_HEAD: &str =
    "rb=exec: the RB carries the execution slots for the ask with the values you will actually \
use, resolved from your own records where the HO does not give them (";
const EXEC_TAIL: &str = "). The sender checks them against its record and only an AN val=Y clears the act. After the \
act, the DN carries the same slots with the values as executed, taken from the tool's result, not from your \
intention; the sender checks that too.";

fn joined(items: &[Bytes], sep: &[u8]) -> Bytes {
    items.join(sep)
}

fn pairs(items: &[(Bytes, Bytes)], eq: &[u8], sep: &[u8]) -> Bytes {
    let shown: Vec<Bytes> = items
        .iter()
        .map(|(k, v)| [&k[..], eq, v].concat())
        .collect();
    shown.join(sep)
}

/// The legend of a profile (see the module docs).
pub fn legend(s: &Source, lean: bool) -> Vec<u8> {
    let mut out: Vec<Bytes> = Vec::new();
    out.push(
        format!(
            "rogerwilco {}. One line per message: RW1 <TYPE> <id> [re=<id>] from=<agent> to=<agent> [item=<ref>] \
             key=value ... [// tail]. No spaces in values; lists join with +; dates YYYYMMDD; tail is free text, \
             300 chars max.",
            String::from_utf8_lossy(VERSION)
        )
        .into_bytes(),
    );
    let described = |k: &[u8]| s.slot_desc.iter().any(|(d, _)| d == k);
    for t in &s.types {
        let optional: Vec<Bytes> = t
            .optional
            .iter()
            .filter(|k| !(lean && (described(k) || ACC_SLOTS.contains(&&k[..]))))
            .cloned()
            .collect();
        let mut line = [
            &t.code[..],
            b" ",
            &t.name,
            b": requires ",
            &joined(&t.required, b" "),
        ]
        .concat();
        if !optional.is_empty() {
            line.extend_from_slice(b"; optional ");
            line.extend_from_slice(&joined(&optional, b" "));
        }
        out.push(line);
    }
    if lean && !s.slot_desc.is_empty() {
        out.push(b"Profile slots may appear on any type where they carry a fact.".to_vec());
    }
    out.push(if lean { RB_LEAN } else { RB_FULL }.as_bytes().to_vec());
    let hide: Vec<&Bytes> = if lean && !s.asks_used.is_empty() {
        s.core_asks
            .iter()
            .filter(|a| !s.asks_used.contains(a))
            .collect()
    } else {
        Vec::new()
    };
    for (name, vals) in &s.enums {
        let shown: Vec<(Bytes, Bytes)> = vals
            .iter()
            .filter(|(k, _)| !(name == b"ask" && hide.contains(&k)))
            .cloned()
            .collect();
        out.push([&name[..], b": ", &pairs(&shown, b"=", b", ")].concat());
    }
    if !lean {
        out.push(
            [
                &b"acc= constraint keys (closed set): "[..],
                &pairs(&s.constraint_keys, b"=", b"; "),
                b". Values: no spaces, lowercase, e.g. len:120w lang:uk must:monday-problem no:em-dash.",
            ]
            .concat(),
        );
    }
    let undo_hidden = hide.iter().any(|a| &a[..] == b"UNDO");
    out.push(
        [CLOSE, if undo_hidden { "" } else { CLOSE_UNDO }]
            .concat()
            .into_bytes(),
    );
    out.push(IDS.as_bytes().to_vec());
    if !s.exec_map.is_empty() {
        let asks: Vec<Bytes> = s
            .exec_map
            .iter()
            .map(|(k, v)| [&k[..], b": ", &joined(v, b" ")].concat())
            .collect();
        out.push(
            [
                EXEC_HEAD.as_bytes(),
                &asks.join(&b"; "[..]),
                EXEC_TAIL.as_bytes(),
            ]
            .concat(),
        );
    }
    if let Some(name) = &s.declared {
        let mut line = [&b"Profile "[..], name, b": messages carry p=", name, b"."].concat();
        if !s.agents.is_empty() {
            let mut agents = s.agents.clone();
            agents.sort();
            line.extend_from_slice(&[&b" Agents: "[..], &joined(&agents, b", "), b"."].concat());
        }
        if s.ans {
            line.extend_from_slice(
                b" AQ opts and AN val must come from ans; do not invent options.",
            );
        }
        if !s.slot_desc.is_empty() {
            let descs: Vec<Bytes> = s
                .slot_desc
                .iter()
                .map(|(k, v)| {
                    let typ = s
                        .slot_types
                        .iter()
                        .find(|(key, _)| key == k)
                        .map_or(&b""[..], |(_, t)| t);
                    [&k[..], b"=", v, b" (", typ, b")"].concat()
                })
                .collect();
            line.extend_from_slice(
                &[&b" Profile slots: "[..], &descs.join(&b"; "[..]), b"."].concat(),
            );
        }
        let has_type = |t: &[u8]| s.slot_types.iter().any(|(_, typ)| typ == t);
        if has_type(b"money") {
            line.extend_from_slice(b" money = digits with two decimals, no separators (5400.00).");
        }
        if has_type(b"num") {
            line.extend_from_slice(
                b" num = a number as written, or two numbers with a slash (7.2, 148/88); units go in their own slot.",
            );
        }
        if !s.item_kinds.is_empty() {
            line.extend_from_slice(b" item is <kind>:<concept>; kinds: ");
            line.extend_from_slice(&pairs(&s.item_kinds, b"=", b", "));
            line.push(b'.');
        }
        if !s.item_examples.is_empty() {
            line.extend_from_slice(
                &[
                    &b" item examples: "[..],
                    &joined(&s.item_examples, b", "),
                    b".",
                ]
                .concat(),
            );
        }
        out.push(line);
    }
    out.join(&b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        s.as_bytes().to_vec()
    }

    #[test]
    fn lean_hides_the_asks_not_used_and_undo_with_them() {
        let s = Source {
            types: vec![TypeText {
                code: b("HO"),
                name: b("handoff"),
                required: vec![b("from"), b("to")],
                optional: vec![b("acc"), b("amt")],
            }],
            enums: vec![(b("ask"), vec![(b("PAY"), b("pay")), (b("UNDO"), b("undo"))])],
            core_asks: vec![b("UNDO")],
            asks_used: vec![b("PAY")],
            ..Source::default()
        };
        let full = String::from_utf8(legend(&s, false)).unwrap();
        let lean = String::from_utf8(legend(&s, true)).unwrap();
        assert!(
            full.contains("HO handoff: requires from to; optional acc amt")
                && full.contains("ask=UNDO ctx=")
        );
        assert!(
            lean.contains("HO handoff: requires from to; optional amt") && !lean.contains("UNDO")
        );
    }
}
