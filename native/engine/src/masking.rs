//! Masking sensitive slot values wherever the gatekeeper writes text of its own (headers, alerts, logs): a value
//! is shown as `****` and its last characters, enough to tell two accounts apart and no more.
//!
//! ```text
//! 40-12-88/61102938  ->  ****2938        (12 characters or more: the last 4)
//! GB29NWBK           ->  ****WBK         (7 to 11: the last 3)
//! 12345              ->  ****45          (5 or 6: the last 2)
//! 1234               ->  ****            (4 or fewer: nothing)
//! ```
//!
//! A line's `key=value` tokens of a sensitive slot are masked where they stand, and every other occurrence of a
//! value learnt that way (from a line, or from a problem's expected and got) is masked wherever it occurs. Text is
//! Python's, as bytes (generalised UTF-8, `rw1::pytext`); lengths are counted in characters as Python counts them.
//! `gatekeeper.masking` is the Python face of this module.

use std::collections::BTreeSet;

use rw1::pytext::{char_len, decode, is_space};

use crate::decide::Finding;

/// Masked under every profile; a profile's `sensitive` adds to these.
pub const DEFAULT_SENSITIVE: [&str; 3] = ["acct", "prev", "addr"];
pub const MASK: &[u8] = b"****";
/// Values shorter than this (in characters) are not learnt: masking every `12` in a text would hide more than it
/// protects.
const LEARNT_MIN: usize = 4;

/// `40-12-88/61102938` -> `****2938`: the mask and the last 2-4 characters (none for short values).
pub fn mask_value(value: &[u8]) -> Vec<u8> {
    let n = char_len(value);
    let keep = match n {
        12.. => 4,
        7..=11 => 3,
        5..=6 => 2,
        _ => 0,
    };
    let mut out = MASK.to_vec();
    if keep > 0 {
        // the byte offset of the last `keep` characters: skip `n - keep` characters
        let mut i = 0;
        for _ in 0..n - keep {
            i += decode(value, i).1;
        }
        out.extend_from_slice(&value[i..]);
    }
    out
}

/// A value of a sensitive slot, a `+` list element by element.
pub fn mask_list(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 8);
    for (n, part) in value.split(|&b| b == b'+').enumerate() {
        if n > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(&mask_value(part));
    }
    out
}

fn is_word(c: u32) -> bool {
    c == u32::from(b'_') || char::from_u32(c).is_some_and(|c| c.is_ascii_alphanumeric())
}

fn is_name(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'
}

/// A `key=value` token: the byte ranges of its key (`start..eq`) and its value (`eq + 1..end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub start: usize,
    pub eq: usize,
    pub end: usize,
}

/// The `key=value` tokens of `text`, left to right, not overlapping: a key is a lowercase ASCII letter and then
/// lowercase letters, digits and `_`, not preceded by an ASCII letter, digit or `_`; its value is everything up to
/// the next whitespace (at least one character). The regex `(?<![A-Za-z0-9_])([a-z][a-z0-9_]*)=(\S+)` as Python
/// matches it, scanned by hand (the regex crate has no look-behind) from each `=` (memchr): a key is the run of
/// name characters before it, which must open with a letter and follow no word character (any later start in the
/// run follows a name character); an `=` inside the last token's value starts nothing. Each character of a line
/// was decoded before, which a dead letter's log line paid for every character of its line.
pub fn tokens(text: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut from = 0; // where the last token ended: an `=` before it is inside that token
    for eq in memchr::memchr_iter(b'=', text) {
        if eq < from {
            continue;
        }
        let mut start = eq;
        while start > from && is_name(text[start - 1]) {
            start -= 1;
        }
        if start == eq || !text[start].is_ascii_lowercase() {
            continue;
        }
        if start > 0 && is_word(u32::from(text[start - 1])) {
            continue; // a byte of a character past ASCII is no word character, whichever byte of it this is
        }
        let mut end = eq + 1;
        while end < text.len() {
            let (c, n) = decode(text, end);
            if is_space(c) {
                break;
            }
            end += n;
        }
        if end > eq + 1 {
            out.push(Token { start, eq, end });
            from = end;
        }
    }
    out
}

/// What of a sensitive value is learnt: the value and the parts of a `+` list, each of at least four characters.
pub fn learnable(v: &[u8]) -> Vec<&[u8]> {
    if char_len(v) < LEARNT_MIN {
        return Vec::new();
    }
    let mut out = vec![v];
    if v.contains(&b'+') {
        out.extend(
            v.split(|&b| b == b'+')
                .filter(|p| char_len(p) >= LEARNT_MIN),
        );
    }
    out
}

/// Masks text against a set of sensitive slots and the sensitive values learnt so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masker {
    pub slots: BTreeSet<Vec<u8>>,
    pub values: BTreeSet<Vec<u8>>,
}

impl Masker {
    /// The default sensitive slots and `extra`.
    pub fn for_slots<'a>(extra: impl IntoIterator<Item = &'a [u8]>) -> Masker {
        let mut slots: BTreeSet<Vec<u8>> = DEFAULT_SENSITIVE
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        slots.extend(extra.into_iter().map(<[u8]>::to_vec));
        Masker {
            slots,
            values: BTreeSet::new(),
        }
    }

    /// A masker that knows the sensitive values of `line` (its tokens of a sensitive slot) and of `problems` (the
    /// expected and got of a problem about a sensitive slot).
    pub fn knowing(mut self, line: Option<&[u8]>, problems: &[Finding]) -> Masker {
        if let Some(line) = line {
            let found: Vec<Vec<u8>> = self.line_values(line);
            self.learn(found.iter().map(Vec::as_slice));
        }
        let found = self.problem_values(problems);
        self.learn(found.iter().map(Vec::as_slice));
        self
    }

    /// The expected and got values of the problems about a sensitive slot.
    pub fn problem_values(&self, problems: &[Finding]) -> Vec<Vec<u8>> {
        let mut found = Vec::new();
        for p in problems {
            if p.slot.as_ref().is_some_and(|s| self.slots.contains(s)) {
                found.extend(p.expected.clone());
                found.extend(p.got.clone());
            }
        }
        found
    }

    /// The values of `text`'s tokens of a sensitive slot.
    pub fn line_values(&self, text: &[u8]) -> Vec<Vec<u8>> {
        tokens(text)
            .into_iter()
            .filter(|t| self.slots.contains(&text[t.start..t.eq]))
            .map(|t| text[t.eq + 1..t.end].to_vec())
            .collect()
    }

    /// Learn `values` (`learnable`).
    pub fn learn<'a>(&mut self, values: impl IntoIterator<Item = &'a [u8]>) {
        for v in values {
            self.values
                .extend(learnable(v).into_iter().map(<[u8]>::to_vec));
        }
    }

    /// `text` with its sensitive tokens masked, then every learnt value wherever it occurs (the longest first).
    pub fn text(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        let mut at = 0;
        for t in tokens(text) {
            let key = &text[t.start..t.eq];
            if self.slots.contains(key) {
                out.extend_from_slice(&text[at..=t.eq]);
                out.extend_from_slice(&mask_list(&text[t.eq + 1..t.end]));
                at = t.end;
            }
        }
        out.extend_from_slice(&text[at..]);
        let mut learnt: Vec<&Vec<u8>> = self.values.iter().collect();
        learnt.sort_by_key(|v| std::cmp::Reverse(char_len(v))); // stable: equal lengths in byte order
        for v in learnt {
            if let Some(replaced) = replace(&out, v, &mask_value(v)) {
                out = replaced;
            }
        }
        out
    }

    /// A value of a problem about `slot`: masked whole when the slot is sensitive, else as text.
    pub fn value(&self, slot: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
        if slot.is_some_and(|s| self.slots.contains(s)) {
            mask_list(value)
        } else {
            self.text(value)
        }
    }

    /// `p` with its message, expected and got masked.
    pub fn problem(&self, p: &Finding) -> Finding {
        let slot = p.slot.as_deref();
        Finding {
            code: p.code.clone(),
            tier: p.tier.clone(),
            message: self.text(&p.message),
            slot: p.slot.clone(),
            expected: p.expected.as_deref().map(|v| self.value(slot, v)),
            got: p.got.as_deref().map(|v| self.value(slot, v)),
        }
    }
}

/// `text` with every occurrence of `from` (not empty), left to right and not overlapping, replaced by `to`; None
/// when there is none.
fn replace(text: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut at = 0;
    let mut i = 0;
    while i + from.len() <= text.len() {
        if text[i..].starts_with(from) {
            let o = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
            o.extend_from_slice(&text[at..i]);
            o.extend_from_slice(to);
            i += from.len();
            at = i;
        } else {
            i += 1;
        }
    }
    if let Some(o) = out.as_mut() {
        o.extend_from_slice(&text[at..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m() -> Masker {
        Masker::for_slots([])
    }

    #[test]
    fn values_keep_what_tells_them_apart() {
        assert_eq!(mask_value(b"40-12-88/61102938"), b"****2938");
        assert_eq!(mask_value(b"GB29NWBK"), b"****WBK");
        assert_eq!(mask_value(b"12345"), b"****45");
        assert_eq!(mask_value(b"1234"), b"****");
        assert_eq!(mask_value("é€12345".as_bytes()), b"****345");
        assert_eq!(
            mask_value("€€€€€€€€€€€€é".as_bytes()),
            "****€€€é".as_bytes()
        );
        assert_eq!(mask_list(b"12345+x+"), b"****45+****+****");
    }

    /// `tokens` as it was written before, character by character: the property test's oracle.
    fn tokens_by_character(text: &[u8]) -> Vec<Token> {
        let mut out = Vec::new();
        let mut prev: Option<u32> = None;
        let mut i = 0;
        while i < text.len() {
            let (c, n) = decode(text, i);
            if text[i].is_ascii_lowercase() && !prev.is_some_and(is_word) {
                let mut eq = i + 1;
                while eq < text.len() && is_name(text[eq]) {
                    eq += 1;
                }
                if text.get(eq) == Some(&b'=') {
                    let mut end = eq + 1;
                    let mut last = None;
                    while end < text.len() {
                        let (c2, n2) = decode(text, end);
                        if is_space(c2) {
                            break;
                        }
                        last = Some(c2);
                        end += n2;
                    }
                    if last.is_some() {
                        out.push(Token { start: i, eq, end });
                        prev = last;
                        i = end;
                        continue;
                    }
                }
            }
            prev = Some(c);
            i += n;
        }
        out
    }

    proptest! {
        /// The tokens found from each `=` are those found character by character, for any text made of what tokens
        /// are made of and what could confuse a scanner.
        #[test]
        fn tokens_from_each_equals_sign_are_the_character_scans(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "c", "x", "z", "_", "1", "9", "A", "Z", "=", "+", " ", "\t", "\n", "-", "/", "é", "€",
                    "\u{2003}", "\u{a0}", "\u{1f600}", "\u{202e}", "\u{1c}", "acct=", "=x", "a=b=c",
                ]),
                0..60,
            ),
            raw in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let text = parts.concat();
            prop_assert_eq!(tokens(text.as_bytes()), tokens_by_character(text.as_bytes()));
            prop_assert_eq!(tokens(&raw), tokens_by_character(&raw));
        }
    }

    #[test]
    fn tokens_follow_the_regex() {
        let t = b"RW1 HO a1 acct=GB29NWBK1234 xacct=1 _b=2 Ab=3 c= d=\xc3\xa9x e=f";
        let got: Vec<&[u8]> = tokens(t).iter().map(|k| &t[k.start..k.end]).collect();
        assert_eq!(
            got,
            vec![
                &b"acct=GB29NWBK1234"[..],
                b"xacct=1",
                "d=éx".as_bytes(),
                b"e=f"
            ]
        );
        // a token right after another's value is preceded by a value character
        assert_eq!(tokens(b"a=b=c").len(), 1);
        assert_eq!(tokens(b"a=x\xe2\x80\x83b=c").len(), 2); // U+2003 is whitespace
    }

    #[test]
    fn a_line_and_what_quotes_it_are_masked() {
        let line = b"RW1 HO h1 acct=40-12-88/61102938 amt=5 // pay 40-12-88/61102938 now";
        let masker = m().knowing(Some(line), &[]);
        assert_eq!(
            masker.text(line),
            b"RW1 HO h1 acct=****2938 amt=5 // pay ****2938 now".to_vec()
        );
    }

    proptest! {
        #[test]
        fn any_text_masks_without_panicking(text in proptest::collection::vec(any::<u8>(), 0..80), slot in "[a-z]{1,5}") {
            let masker = Masker::for_slots([slot.as_bytes()]).knowing(Some(&text), &[]);
            let out = masker.text(&text);
            for v in &masker.values {
                prop_assert!(char_len(v) >= LEARNT_MIN);
            }
            // nothing learnt is left in the masked text
            for t in tokens(&out) {
                if masker.slots.contains(&out[t.start..t.eq]) {
                    prop_assert!(out[t.eq + 1..t.end].starts_with(MASK));
                }
            }
        }
    }
}
