//! Python's text semantics, over the bytes of a Python string.
//!
//! A Python `str` may hold a lone surrogate, which UTF-8 cannot carry; the bindings hand rw1 such a string encoded
//! as Python's `surrogatepass` encodes it (generalised UTF-8, "WTF-8": a surrogate is three bytes like any other
//! code point of the Basic Multilingual Plane), and every other string as its UTF-8. So rw1 works on `&[u8]`, and
//! the few places that look at characters decode them here.
//!
//! The classes are Python's, from tables written by `tools/pytext_tables.py` out of the Python the reference runs
//! on: decimal digits (regex `\d`, `str.isdecimal`, `int()`), whitespace (`str.strip`) and printable characters
//! (what `repr` leaves unescaped).

use crate::pytext_tables::{DIGIT_ZEROS, LOWER, SPACES, UNPRINTABLE};

/// The code point at `s[i..]` and its length in bytes. `s` is well-formed generalised UTF-8 (the bindings make
/// it); a byte that does not start a sequence is taken as a code point of its own, so no input panics.
pub fn decode(s: &[u8], i: usize) -> (u32, usize) {
    let b0 = u32::from(s[i]);
    let (len, init) = match b0 {
        0x00..=0x7F => return (b0, 1),
        0xC0..=0xDF => (2, b0 & 0x1F),
        0xE0..=0xEF => (3, b0 & 0x0F),
        0xF0..=0xF7 => (4, b0 & 0x07),
        _ => return (b0, 1),
    };
    let mut cp = init;
    for k in 1..len {
        match s.get(i + k) {
            Some(&b) if b & 0xC0 == 0x80 => cp = (cp << 6) | u32::from(b & 0x3F),
            _ => return (b0, 1),
        }
    }
    (cp, len)
}

/// The code points of `s`, in order.
pub fn chars(s: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= s.len() {
            return None;
        }
        let (c, n) = decode(s, i);
        i += n;
        Some(c)
    })
}

/// The number of characters in `s` (Python's `len`).
pub fn char_len(s: &[u8]) -> usize {
    s.iter().filter(|&&b| b & 0xC0 != 0x80).count()
}

/// `c.isspace()`: for ASCII (nearly every character asked about) without the table's search.
pub fn is_space(c: u32) -> bool {
    if c < 0x80 {
        return matches!(c, 0x09..=0x0D | 0x1C..=0x20);
    }
    SPACES.binary_search(&c).is_ok()
}

/// The decimal value of `c` when `c.isdecimal()` (regex `\d`), else None.
pub fn digit(c: u32) -> Option<u8> {
    if (0x30..=0x39).contains(&c) {
        return u8::try_from(c - 0x30).ok();
    }
    let at = DIGIT_ZEROS.partition_point(|&z| z <= c);
    let zero = *DIGIT_ZEROS.get(at.checked_sub(1)?)?;
    u8::try_from(c - zero).ok().filter(|&d| d < 10)
}

/// `c.isprintable()`.
pub fn is_printable(c: u32) -> bool {
    unprintable_category(c).is_none()
}

/// The general category (`unicodedata.category`) of a character `str.isprintable` refuses: an Other (`Cc`, `Cf`,
/// `Cs`, `Co`, `Cn`) or a Separator (`Zl`, `Zp`, `Zs` but the ASCII space); None for a printable one.
pub fn unprintable_category(c: u32) -> Option<&'static str> {
    if c < 0x80 {
        // ASCII: only the controls (the common case, without the table's search)
        return (c < 0x20 || c == 0x7F).then_some("Cc");
    }
    let at = UNPRINTABLE.partition_point(|&(lo, _, _)| lo <= c);
    match at.checked_sub(1).and_then(|i| UNPRINTABLE.get(i)) {
        Some(&(_, hi, cat)) if c <= hi => Some(cat),
        _ => None,
    }
}

/// `s.strip()`: `s` without Python whitespace at either end.
pub fn strip(s: &[u8]) -> &[u8] {
    let mut start = 0;
    while start < s.len() {
        let (c, n) = decode(s, start);
        if !is_space(c) {
            break;
        }
        start += n;
    }
    let mut end = s.len();
    while end > start {
        let mut i = end - 1;
        while i > start && s[i] & 0xC0 == 0x80 {
            i -= 1;
        }
        if !is_space(decode(s, i).0) {
            break;
        }
        end = i;
    }
    &s[start..end]
}

/// `s.isdecimal()`: not empty, every character a decimal digit.
pub fn is_decimal(s: &[u8]) -> bool {
    !s.is_empty() && chars(s).all(|c| digit(c).is_some())
}

/// `s.lower()`.
pub fn lower(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b.is_ascii() {
            out.push(b.to_ascii_lowercase());
            i += 1;
            continue;
        }
        let (c, n) = decode(s, i);
        match LOWER.binary_search_by_key(&c, |&(k, _)| k) {
            Ok(at) => out.extend_from_slice(LOWER[at].1.as_bytes()),
            Err(_) => out.extend_from_slice(&s[i..i + n]),
        }
        i += n;
    }
    out
}

/// `repr(s)` appended to `out`, as CPython writes it.
pub fn repr(s: &[u8], out: &mut Vec<u8>) {
    let quote = if s.contains(&b'\'') && !s.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    out.push(quote);
    let mut i = 0;
    while i < s.len() {
        let (c, n) = decode(s, i);
        match c {
            _ if c == u32::from(quote) || c == u32::from(b'\\') => {
                out.push(b'\\');
                out.push(s[i]);
            }
            0x09 => out.extend_from_slice(b"\\t"),
            0x0A => out.extend_from_slice(b"\\n"),
            0x0D => out.extend_from_slice(b"\\r"),
            0x00..=0x1F | 0x7F => hex_escape(out, b'x', c, 2),
            0x20..=0x7E => out.push(s[i]),
            _ if is_printable(c) => out.extend_from_slice(&s[i..i + n]),
            0x80..=0xFF => hex_escape(out, b'x', c, 2),
            0x100..=0xFFFF => hex_escape(out, b'u', c, 4),
            _ => hex_escape(out, b'U', c, 8),
        }
        i += n;
    }
    out.push(quote);
}

fn hex_escape(out: &mut Vec<u8>, kind: u8, c: u32, width: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'\\');
    out.push(kind);
    for k in (0..width).rev() {
        out.push(HEX[((c >> (4 * k)) & 0xF) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn repr_of(s: &str) -> String {
        let mut out = Vec::new();
        repr(s.as_bytes(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn an_ascii_space_is_the_tables() {
        for c in 0..0x80 {
            assert_eq!(is_space(c), SPACES.binary_search(&c).is_ok(), "{c:#x}");
        }
    }

    #[test]
    fn repr_is_pythons() {
        assert_eq!(repr_of("abc"), "'abc'");
        assert_eq!(repr_of("it's"), "\"it's\"");
        assert_eq!(repr_of("'\""), "'\\'\"'");
        assert_eq!(repr_of("a\nb\t\r\\"), "'a\\nb\\t\\r\\\\'");
        assert_eq!(
            repr_of("\u{0}\u{7f}\u{85}é\u{2028}\u{e000}\u{f0000}"),
            "'\\x00\\x7f\\x85é\\u2028\\ue000\\U000f0000'"
        );
        // a lone surrogate, as surrogatepass encodes it
        let mut out = Vec::new();
        repr(b"\xed\xa0\x80", &mut out);
        assert_eq!(out, b"'\\ud800'");
    }

    #[test]
    fn classes_are_pythons() {
        assert_eq!(digit(u32::from('7')), Some(7));
        assert_eq!(digit(0x0663), Some(3)); // ٣ ARABIC-INDIC DIGIT THREE
        assert_eq!(digit(0x00B2), None); // ² is a digit but not decimal
        assert_eq!(digit(0x11F50), None); // Kawi digit zero: Unicode 15, after Python 3.11's 14.0
        assert!(is_space(0x1C) && is_space(0x85) && is_space(0x3000) && !is_space(0x200B));
        assert_eq!(strip(" \u{3000}a b\u{1c}\n".as_bytes()), b"a b");
        assert_eq!(strip(" \t ".as_bytes()), b"");
        assert_eq!(char_len("aé١".as_bytes()), 3);
        assert!(is_decimal("12١".as_bytes()) && !is_decimal(b"") && !is_decimal(b"1a"));
        assert_eq!(lower("AbÉİ\u{212A}".as_bytes()), "abéi\u{307}k".as_bytes());
        assert_eq!(lower(b"\xed\xa0\x80X"), b"\xed\xa0\x80x");
    }

    proptest! {
        #[test]
        fn decoding_any_string_gives_its_chars(s in "\\PC*") {
            let got: Vec<u32> = chars(s.as_bytes()).collect();
            let want: Vec<u32> = s.chars().map(u32::from).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(char_len(s.as_bytes()), s.chars().count());
        }

        #[test]
        fn any_bytes_decode_without_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let n = chars(&b).count();
            prop_assert!(n <= b.len());
            let mut out = Vec::new();
            repr(&b, &mut out);
            let _ = strip(&b);
        }
    }
}
