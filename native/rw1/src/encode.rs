//! The writer: a twin's values, already text, to its line, tokens in the reference's order: the envelope, the
//! profile's slot order, then any other slot as given; the tail after ` // `, its newlines made spaces.
//!
//! What a value's text is (a list joined with `+`, a boolean `Y` or `N`, which values are left out) is the
//! caller's: it depends on the values' types, which are the host language's. The writer does not check the line:
//! the parser does ([`crate::parse`]).

use crate::grammar::Grammar;
use crate::parse::VERSION;

/// The line of a message of type `typ` and id `id`: `envelope` holds `re`, `from`, `to` and `item` (None: left
/// out), `slots` the other `(key, value)` pairs to write, in the twin's order.
pub fn line(
    typ: &[u8],
    id: &[u8],
    envelope: [Option<&[u8]>; 4],
    slots: &[(&[u8], &[u8])],
    tail: Option<&[u8]>,
    g: &Grammar,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        64 + slots
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>(),
    );
    out.extend_from_slice(VERSION);
    out.push(b' ');
    out.extend_from_slice(typ);
    out.push(b' ');
    out.extend_from_slice(id);
    let mut token = |k: &[u8], v: &[u8]| {
        out.push(b' ');
        out.extend_from_slice(k);
        out.push(b'=');
        out.extend_from_slice(v);
    };
    for (k, v) in crate::grammar::ENVELOPE.iter().zip(envelope) {
        if let Some(v) = v {
            token(k, v);
        }
    }
    let mut known: Vec<(usize, &[u8], &[u8])> = Vec::with_capacity(slots.len());
    let mut others: Vec<(&[u8], &[u8])> = Vec::new();
    for &(k, v) in slots {
        match g.encode_rank.get(k) {
            Some(&rank) => known.push((rank, k, v)),
            None => others.push((k, v)),
        }
    }
    known.sort_by_key(|&(rank, _, _)| rank);
    for (_, k, v) in known {
        token(k, v);
    }
    for (k, v) in others {
        token(k, v);
    }
    if let Some(tail) = tail {
        out.extend_from_slice(b" // ");
        out.extend(tail.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Vocabulary;

    fn grammar() -> Grammar {
        let b = |s: &str| -> Box<[u8]> { s.as_bytes().into() };
        let slots = ["re", "from", "to", "item", "ask", "amt", "cur"];
        Grammar::new(Vocabulary {
            declared: None,
            types: vec![],
            slots: slots.iter().map(|k| (b(k), b("token"))).collect(),
            enums: vec![],
            agents: None,
            tail_max: 300,
            int_max_digits: 4300,
            ..Vocabulary::default()
        })
        .unwrap_or_else(|e| panic!("{}", String::from_utf8_lossy(&e)))
    }

    #[test]
    fn tokens_come_in_the_profiles_order_then_as_given() {
        let g = grammar();
        let slots: &[(&[u8], &[u8])] = &[
            (b"x_b", b"2"),
            (b"cur", b"GBP"),
            (b"from", b"z"),
            (b"ask", b"PAY"),
        ];
        let env = [None, Some(&b"a"[..]), Some(&b"b"[..]), None];
        let got = line(b"HO", b"a-1", env, slots, Some(b"two\nlines"), &g);
        assert_eq!(
            got,
            b"RW1 HO a-1 from=a to=b ask=PAY cur=GBP x_b=2 from=z // two lines".to_vec()
        );
        assert_eq!(
            line(b"HO", b"a-1", [None; 4], &[], None, &g),
            b"RW1 HO a-1".to_vec()
        );
    }
}
