//! JSON made inert before it is shown: what an agent wrote inside a document (a masked line, an item, a problem's
//! message) cannot act on whoever reads it. Every character a line may not hold (`gate`: a control, format,
//! line or paragraph separator, surrogate, private-use or unassigned character) becomes a JSON `\uXXXX` escape
//! (a surrogate pair past the Basic Multilingual Plane), so the document parses to the same values and nothing raw
//! reaches a terminal or a viewer. `gatekeeper.inert.json_inert` is the Python face of [`json_inert`].

use rw1::pytext::{decode, unprintable_category};

/// A character escaped: one `str.isprintable` refuses, but a space (`Zs`), which shows as what it is, and JSON's
/// own whitespace between tokens (a tab, a newline, a carriage return: inside a string they are escapes already).
fn escaped(c: u32) -> bool {
    !matches!(c, 0x09 | 0x0A | 0x0D) && unprintable_category(c).is_some_and(|cat| cat != "Zs")
}

fn escape(out: &mut Vec<u8>, unit: u32) {
    out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
}

/// `doc` (JSON text, its strings with only `"`, `\` and the C0 controls escaped, as `json::string` and orjson
/// write them) with every escaped character written as a JSON escape. Outside strings JSON has no such character,
/// so only strings change; a backslash is never one (it starts the escapes already there). An indented document
/// keeps its lines.
pub fn json_inert(doc: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc.len() + 8);
    let mut i = 0;
    while i < doc.len() {
        let (c, n) = decode(doc, i);
        if c != u32::from(b'\\') && escaped(c) {
            if c <= 0xFFFF {
                escape(&mut out, c);
            } else {
                let c = c - 0x10000;
                escape(&mut out, 0xD800 + (c >> 10));
                escape(&mut out, 0xDC00 + (c & 0x3FF));
            }
        } else {
            out.extend_from_slice(&doc[i..i + n]);
        }
        i += n;
    }
    out
}

/// `s` as an inert JSON string.
pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    let mut plain = Vec::with_capacity(s.len() + 2);
    crate::json::string(&mut plain, s);
    if plain.iter().all(|&b| (0x20..0x7F).contains(&b)) {
        out.extend_from_slice(&plain); // printable ASCII (the common case): nothing to escape
    } else {
        out.extend_from_slice(&json_inert(&plain));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn what_acts_on_a_reader_is_escaped() {
        assert_eq!(json_inert(b"\"a\x7fb\""), b"\"a\\u007fb\"");
        assert_eq!(
            json_inert("\"\u{202e}x\u{2028}\u{a0}\"".as_bytes()),
            "\"\\u202ex\\u2028\u{a0}\"".as_bytes()
        );
        assert_eq!(
            json_inert("\"\u{e0001}\"".as_bytes()),
            b"\"\\udb40\\udc01\""
        );
        let mut out = Vec::new();
        string(&mut out, "a\n\u{85}\\".as_bytes());
        assert_eq!(out, b"\"a\\n\\u0085\\\\\"");
    }

    proptest! {
        #[test]
        fn an_inert_string_reads_back_as_the_text(s in any::<String>()) {
            let mut out = Vec::new();
            string(&mut out, s.as_bytes());
            prop_assert!(out.iter().all(|&b| b >= 0x20 && b != 0x7F));
            let back: String = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(back, s);
        }
    }
}
