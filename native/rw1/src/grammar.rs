//! A profile's grammar, compiled: what the parser needs to know of the core merged with one profile.
//!
//! rwcore (Python) reads and merges the profile files, as the reference does, and hands the merged vocabulary here
//! once per profile: the message types with their required and allowed slots, every slot's declared type, the
//! enums, the agents, the tail's limit. Each slot type becomes a [`Check`]: the decode-and-check the reference does
//! on a value, with everything it looks up resolved once.
//!
//! Strings are bytes (see [`crate::pytext`]): a profile is read from JSON, which can spell any Python string.

use std::cmp::Ordering;

use rustc_hash::FxHashMap as HashMap;

use crate::acc::AccTables;
use crate::keys::{KeyMap, KeySet};
use crate::pytext;

/// Owned bytes of a Python string.
pub type Bytes = Box<[u8]>;

/// A name and its names: an enum and its codes, an ask and its execution slots, a value and its aliases.
pub type Group = (Bytes, Vec<Bytes>);

/// The four envelope slots, kept outside `slots` in the JSON twin, in the order a line writes them.
pub const ENVELOPE: [&[u8]; 4] = [b"re", b"from", b"to", b"item"];

/// One message type under a profile.
#[derive(Debug)]
pub struct TypeDef {
    pub code: Bytes,
    /// the slots every line of this type carries, in the order their absence is reported
    pub required: Vec<Bytes>,
    /// where each of `required` is in the grammar's slots ([`Slot::index`]), in the same order; None for a
    /// required slot the grammar does not declare (a line can still carry it, as a key it does not know)
    pub required_at: Vec<Option<usize>>,
    /// every declared slot the type takes without a warning (`p` included; an RB also takes the HO's)
    pub allowed: SlotSet,
}

/// A set of the grammar's slots by their [`Slot::index`]: a bit each. The parser asks per token whether the type
/// allows the slot and whether the line already had it, and per required slot whether the line has it: a hash of
/// the key and a scan of the line's keys each were a fifth of a line's parse.
#[derive(Debug, Clone, Default)]
pub struct SlotSet(Vec<u64>);

impl SlotSet {
    /// An empty set for a grammar of `n` slots.
    pub fn of_size(n: usize) -> SlotSet {
        SlotSet(vec![0; n.div_ceil(64)])
    }

    /// Add slot `i` (one of the grammar's: below the size the set was made for).
    pub fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub fn contains(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

/// A non-negative or negative whole number as written, compared without a size limit (Python's `int`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whole {
    pub negative: bool,
    /// ASCII digits, no leading zero (zero is "0")
    pub digits: String,
}

impl Whole {
    /// The number `\d+` spells (decimal digits of any script, as `int()` reads them), or None for other text.
    pub fn from_digits(negative: bool, s: &[u8]) -> Option<Whole> {
        let mut digits = String::with_capacity(s.len());
        for c in pytext::chars(s) {
            let d = pytext::digit(c)?;
            if !(digits.is_empty() && d == 0) {
                digits.push(char::from(b'0' + d));
            }
        }
        if digits.is_empty() {
            digits.push('0');
        }
        Some(Whole {
            negative: negative && digits != "0",
            digits,
        })
    }

    /// The value as an i64 when it fits.
    pub fn to_i64(&self) -> Option<i64> {
        let v: i64 = self.digits.parse().ok()?;
        Some(if self.negative { -v } else { v })
    }
}

impl Ord for Whole {
    fn cmp(&self, other: &Whole) -> Ordering {
        let magnitude = |a: &Whole, b: &Whole| {
            a.digits
                .len()
                .cmp(&b.digits.len())
                .then_with(|| a.digits.cmp(&b.digits))
        };
        match (self.negative, other.negative) {
            (false, false) => magnitude(self, other),
            (true, true) => magnitude(other, self),
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
        }
    }
}

impl PartialOrd for Whole {
    fn partial_cmp(&self, other: &Whole) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How a slot's value is decoded and checked: one per declared slot type.
#[derive(Debug)]
pub enum Check {
    /// `ref`, `token`: taken as written
    Text,
    /// `list:<type>`: split at `+`, empty parts dropped, each part checked as its type (`inner.typ` is that type)
    List(Box<Validator>),
    /// `enum:<name>`: one of the enum's codes (an enum the profile lacks has none)
    Enum { name: Bytes, codes: KeySet },
    /// `int:<lo>-<hi>`: an integer in the range, bounds kept as written for the wording
    Int {
        lo: Whole,
        hi: Whole,
        lo_text: Bytes,
        hi_text: Bytes,
    },
    /// `date`: YYYYMMDD
    Date,
    /// `time`: YYYYMMDDTHHMMZ
    Time,
    /// `money`: digits with exactly two decimals
    Money,
    /// `num`: a number as written, perhaps a ratio
    Num,
    /// `days`: a number of days, `14` or `14d`
    Days,
    /// `bool`: Y or N
    Bool,
    /// `msgid`, and `agent` (then, when the profile lists agents, one of them)
    Id { agents: Option<KeySet> },
    /// a type rwcore does not know: every value is a finding
    Unknown,
}

/// A slot's check with the names its findings quote.
#[derive(Debug)]
pub struct Validator {
    pub key: Bytes,
    /// the declared type, as written (a finding's `expected`)
    pub typ: Bytes,
    pub check: Check,
}

/// One of the four envelope slots (kept outside `slots` in the twin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    Re,
    From,
    To,
    Item,
}

/// One slot of the profile.
#[derive(Debug)]
pub struct Slot {
    pub validator: Validator,
    /// which envelope slot it is, if it is one
    pub envelope: Option<Envelope>,
    /// its place among the grammar's slots (0 to `slots.len() - 1`): its bit in a [`SlotSet`]
    pub index: usize,
}

/// The core merged with one profile, compiled for the parser. Immutable.
#[derive(Debug)]
pub struct Grammar {
    /// the profile's name (what `p=` carries); None for the bare core, where `p=` switches profile
    pub declared: Option<Bytes>,
    pub types: Vec<TypeDef>,
    pub slots: KeyMap<Slot>,
    /// the place of each slot outside the envelope in the order a line writes them (the profile's slot order)
    pub encode_rank: KeyMap<usize>,
    /// the answer vocabulary (the `ans` enum) when the profile has one, and its codes joined by `/`
    pub ans: Option<(KeySet, Vec<u8>)>,
    /// the tail's limit, in characters
    pub tail_max: usize,
    /// the most digits Python's `int()` converts (`sys.get_int_max_str_digits()`; 0: no limit)
    pub int_max_digits: usize,
    /// the execution slots of each ask that names any (`exec` in a profile)
    pub exec_map: KeyMap<Vec<Bytes>>,
    /// tier 4's tables: constraint keys, set-valued keys, value aliases
    pub acc: AccTables,
    /// the slots declared `date` (false) or `time` (true), in the profile's order: the gate's calendar rule
    pub calendar: Vec<(Bytes, bool)>,
}

/// What makes a [`Grammar`]: the merged vocabulary, as rwcore's Python holds it.
#[derive(Default)]
pub struct Vocabulary {
    pub declared: Option<Bytes>,
    /// (code, required slots, allowed slots), in the profile's order
    pub types: Vec<(Bytes, Vec<Bytes>, Vec<Bytes>)>,
    /// (key, declared type)
    pub slots: Vec<(Bytes, Bytes)>,
    /// (name, codes in order)
    pub enums: Vec<Group>,
    pub agents: Option<Vec<Bytes>>,
    pub tail_max: usize,
    pub int_max_digits: usize,
    /// (ask, its execution slots)
    pub exec: Vec<Group>,
    /// the constraint keys, the set-valued ones, and the alias groups (canonical value, its aliases)
    pub constraint_keys: Vec<Bytes>,
    pub constraint_set_keys: Vec<Bytes>,
    pub value_aliases: Vec<Group>,
}

impl Grammar {
    /// Compile a vocabulary; the error is the reference's wording for a slot type it cannot read.
    pub fn new(v: Vocabulary) -> Result<Grammar, Vec<u8>> {
        let enums: HashMap<&[u8], &Vec<Bytes>> = v.enums.iter().map(|(n, c)| (&n[..], c)).collect();
        let agents: Option<KeySet> = v
            .agents
            .filter(|a| !a.is_empty())
            .map(|a| a.into_iter().collect());
        let mut slots: KeyMap<Slot> = KeyMap::default();
        for (key, typ) in &v.slots {
            let validator = validator(key, typ, &enums, agents.as_ref())?;
            let index = slots.get(key).map_or(slots.len(), |s| s.index); // a key given twice: the last type
            let envelope = match &key[..] {
                b"re" => Some(Envelope::Re),
                b"from" => Some(Envelope::From),
                b"to" => Some(Envelope::To),
                b"item" => Some(Envelope::Item),
                _ => None,
            };
            slots.insert(
                key,
                Slot {
                    validator,
                    envelope,
                    index,
                },
            );
        }
        let ans = enums
            .get(&b"ans"[..])
            .filter(|codes| !codes.is_empty())
            .map(|codes| (codes.iter().collect(), codes.join(&b'/')));
        let encode_rank = v
            .slots
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !ENVELOPE.contains(&&k[..]))
            .enumerate()
            .map(|(i, k)| (k.clone(), i))
            .collect();
        let calendar = v
            .slots
            .iter()
            .filter_map(|(k, t)| match &t[..] {
                b"date" => Some((k.clone(), false)),
                b"time" => Some((k.clone(), true)),
                _ => None,
            })
            .collect();
        let types = v
            .types
            .into_iter()
            .map(|(code, required, allowed)| {
                let mut set = SlotSet::of_size(slots.len());
                for k in &allowed {
                    if let Some(s) = slots.get(k) {
                        set.insert(s.index);
                    }
                }
                TypeDef {
                    required_at: required
                        .iter()
                        .map(|k| slots.get(k).map(|s| s.index))
                        .collect(),
                    code,
                    required,
                    allowed: set,
                }
            })
            .collect();
        Ok(Grammar {
            declared: v.declared,
            types,
            slots,
            encode_rank,
            ans,
            tail_max: v.tail_max,
            int_max_digits: v.int_max_digits,
            exec_map: v.exec.into_iter().collect(),
            acc: AccTables::new(v.constraint_keys, v.constraint_set_keys, v.value_aliases),
            calendar,
        })
    }

    /// The message type `code`, if the profile has it.
    pub fn typedef(&self, code: &[u8]) -> Option<&TypeDef> {
        self.types.iter().find(|t| &t.code[..] == code)
    }
}

fn validator(
    key: &[u8],
    typ: &[u8],
    enums: &HashMap<&[u8], &Vec<Bytes>>,
    agents: Option<&KeySet>,
) -> Result<Validator, Vec<u8>> {
    let check = if let Some(inner) = typ.strip_prefix(b"list:") {
        Check::List(Box::new(validator(key, inner, enums, agents)?))
    } else if let Some(name) = typ.strip_prefix(b"enum:") {
        let codes = enums
            .get(name)
            .map(|c| c.iter().collect())
            .unwrap_or_default();
        Check::Enum {
            name: name.into(),
            codes,
        }
    } else if let Some(range) = typ.strip_prefix(b"int:") {
        int_range(range).ok_or_else(|| {
            let mut msg = b"slot ".to_vec();
            msg.extend_from_slice(key);
            msg.extend_from_slice(b": int type ");
            pytext::repr(typ, &mut msg);
            msg.extend_from_slice(b" is not int:<lo>-<hi> with non-negative bounds");
            msg
        })?
    } else {
        match typ {
            b"ref" | b"token" => Check::Text,
            b"date" => Check::Date,
            b"time" => Check::Time,
            b"money" => Check::Money,
            b"num" => Check::Num,
            b"days" => Check::Days,
            b"bool" => Check::Bool,
            b"msgid" => Check::Id { agents: None },
            b"agent" => Check::Id {
                agents: agents.cloned(),
            },
            _ => Check::Unknown,
        }
    };
    Ok(Validator {
        key: key.into(),
        typ: typ.into(),
        check,
    })
}

/// `(\d+)-(\d+)`, the whole text: an int type's bounds.
fn int_range(range: &[u8]) -> Option<Check> {
    // the first '-' splits: neither bound holds one
    let at = range.iter().position(|&b| b == b'-')?;
    let (lo_text, hi_text) = (&range[..at], &range[at + 1..]);
    if !pytext::is_decimal(lo_text) || !pytext::is_decimal(hi_text) {
        return None;
    }
    Some(Check::Int {
        lo: Whole::from_digits(false, lo_text)?,
        hi: Whole::from_digits(false, hi_text)?,
        lo_text: lo_text.into(),
        hi_text: hi_text.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wholes_compare_as_numbers() {
        let w = |neg, s: &str| {
            Whole::from_digits(neg, s.as_bytes()).unwrap_or(Whole {
                negative: false,
                digits: "x".into(),
            })
        };
        assert!(w(false, "10") > w(false, "9"));
        assert!(w(true, "10") < w(true, "9"));
        assert!(w(true, "0") == w(false, "000"));
        assert!(w(false, "٣") == w(false, "3"));
        assert!(w(false, "123456789012345678901234567890") > w(false, "99"));
        assert_eq!(w(true, "42").to_i64(), Some(-42));
        assert_eq!(w(false, "123456789012345678901234567890").to_i64(), None);
    }

    #[test]
    fn a_bad_int_type_is_refused_in_the_references_words() {
        let v = Vocabulary {
            declared: None,
            types: vec![],
            slots: vec![(b"n".as_slice().into(), b"int:1-x".as_slice().into())],
            enums: vec![],
            agents: None,
            tail_max: 300,
            int_max_digits: 4300,
            exec: vec![],
            constraint_keys: vec![],
            constraint_set_keys: vec![],
            value_aliases: vec![],
        };
        let err = Grammar::new(v).err().unwrap_or_default();
        assert_eq!(
            err,
            b"slot n: int type 'int:1-x' is not int:<lo>-<hi> with non-negative bounds"
        );
    }
}
