//! The input rules at the gate: stricter than the RW1 parser on purpose. A model reading a forwarded line must not
//! be fooled by what it cannot see, so before a value is parsed it must be UTF-8 within the route's limit, one
//! line of printable characters (no control, format, separator but the ASCII space, surrogate, private-use or
//! unassigned one: what Python's `str.isprintable` refuses), and its head (everything before ` // `) printable
//! ASCII with single spaces between tokens. After parsing, every date and time slot names a real instant.
//!
//! Positions are counted in characters, and categories named, as Python counts and names them (the tables are
//! Python 3.11's: `rw1::pytext`).

use std::borrow::Cow;

use rw1::pytext::{decode, digit, repr, unprintable_category};
use rw1::{Grammar, Problem, Twin, Value};

const TIER: &str = "input";

fn problem(code: &'static str, message: &str) -> Problem {
    Problem::new(
        code,
        TIER,
        format!("input: {message}").into_bytes(),
        None,
        None,
        None,
    )
}

/// The first character `text` (generalised UTF-8) may not hold: its position in characters, its code point and
/// its general category.
pub fn first_refused(text: &[u8]) -> Option<(usize, u32, &'static str)> {
    if text.iter().all(|&b| (0x20..0x7F).contains(&b)) {
        return None; // printable ASCII (the common case): nothing to look up
    }
    let mut i = 0;
    let mut pos = 0;
    while i < text.len() {
        let (c, n) = decode(text, i);
        if let Some(category) = unprintable_category(c) {
            return Some((pos, c, category));
        }
        i += n;
        pos += 1;
    }
    None
}

/// The input rules for a conversation id (the record key, or the route's conversation header): a character the
/// gate refuses in a line makes it no conversation id at all (it would forge a log line or reorder a terminal
/// where the id is shown).
pub fn conversation_problem(conversation: &[u8]) -> Option<Problem> {
    let (pos, c, category) = first_refused(conversation)?;
    Some(problem(
        "conversation-invalid",
        &format!(
            "the conversation id (the record key) has U+{c:04X} ({category}) at {pos}: a conversation id follows \
             the input rules of a line"
        ),
    ))
}

/// Why Python's strict UTF-8 decoder refuses `raw` at `start` (its `UnicodeDecodeError.reason`).
fn utf8_reason(raw: &[u8], start: usize, error_len: Option<usize>) -> &'static str {
    match (error_len, raw.get(start)) {
        (None, _) => "unexpected end of data",
        (Some(_), Some(&b)) if (0x80..=0xC1).contains(&b) || b >= 0xF5 => "invalid start byte",
        (Some(_), _) => "invalid continuation byte",
    }
}

/// A line before its tail (the tail's separator ` // `, or a bare ` //` at the end, and what follows it left out).
fn head_of(raw: &[u8]) -> &[u8] {
    match rw1::parse::tail_separator(raw) {
        Some(at) => &raw[..at],
        None => raw.strip_suffix(b" //").unwrap_or(raw),
    }
}

/// A space at either end, or two in a row: looked for at the spaces (a line has a few dozen), not at every byte.
fn badly_spaced(head: &[u8]) -> bool {
    head.first() == Some(&b' ')
        || head.last() == Some(&b' ')
        || memchr::memchr_iter(b' ', head).any(|at| head.get(at + 1) == Some(&b' '))
}

/// The gate's input rules on a record value: `Ok` with its text, or the problems that make the line `invalid`.
pub fn screen(raw: &[u8], max_bytes: u64) -> Result<&str, Vec<Problem>> {
    let size = raw.len() as u64;
    if size > max_bytes {
        let message = format!("the value is {size} bytes; the limit is {max_bytes}");
        return Err(vec![problem("input-too-long", &message)]);
    }
    if raw.is_empty() {
        return Err(vec![problem("input-empty", "the value is empty")]);
    }
    let text = match std::str::from_utf8(raw) {
        Ok(text) => text,
        Err(e) => {
            let start = e.valid_up_to();
            let reason = utf8_reason(raw, start, e.error_len());
            let message = format!("the value is not UTF-8 (byte {start}: {reason})");
            return Err(vec![problem("input-not-utf8", &message)]);
        }
    };
    let mut problems = Vec::new();
    if let Some((pos, c, category)) = first_refused(raw) {
        if c == u32::from(b'\r') || c == u32::from(b'\n') {
            let message = format!("a line break at character {pos}: one line per message");
            problems.push(problem("input-multiline", &message));
        } else {
            let message =
                format!("character U+{c:04X} ({category}) at {pos} is not allowed in a line");
            problems.push(problem("input-control-character", &message));
        }
    }
    let head = head_of(raw);
    if let Some(at) = head.iter().position(|b| !b.is_ascii()) {
        // every character before it is ASCII: its byte offset is its position in characters
        let (_, n) = decode(head, at);
        let mut quoted = Vec::new();
        repr(&head[at..at + n], &mut quoted);
        let message = format!(
            "non-ASCII character {} at {at}: ids, names, codes are ASCII",
            String::from_utf8_lossy(&quoted)
        );
        problems.push(problem("input-non-ascii", &message));
    }
    if badly_spaced(head) {
        problems.push(problem(
            "input-spacing",
            "tokens are separated by single spaces, with none at either end",
        ));
    }
    if problems.is_empty() {
        Ok(text)
    } else {
        Err(problems)
    }
}

/// The decimal value of `digits` (Python's `\d` characters, each a digit: checked by the caller).
fn number(digits: &[u32]) -> u32 {
    digits
        .iter()
        .fold(0, |n, &c| n * 10 + u32::from(digit(c).unwrap_or(0)))
}

/// The days of a month of the proleptic Gregorian calendar (Python's `calendar.monthrange`).
pub fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Whether a date (`YYYYMMDD`) or a time (`YYYYMMDDTHHMMZ`, UTC) names a real instant of the calendar: a year
/// 0001-9999, a month 01-12, a day the month has, an hour 00-23 and a minute 00-59. A value not of the shape (any
/// of Python's decimal digits where `\d` is) is not this rule's: true.
pub fn real_instant(value: &[u8], time: bool) -> bool {
    let chars: Vec<u32> = rw1::pytext::chars(value).collect();
    let d = |range: std::ops::Range<usize>| chars[range].iter().all(|&c| digit(c).is_some());
    let shaped = if time {
        chars.len() == 14
            && d(0..8)
            && chars[8] == u32::from(b'T')
            && d(9..13)
            && chars[13] == u32::from(b'Z')
    } else {
        chars.len() == 8 && d(0..8)
    };
    if !shaped {
        return true;
    }
    let (year, month, day) = (
        number(&chars[0..4]),
        number(&chars[4..6]),
        number(&chars[6..8]),
    );
    if !((1..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day))
    {
        return false;
    }
    !time || (number(&chars[9..11]) <= 23 && number(&chars[11..13]) <= 59)
}

/// The date and time slots of a parsed line that name no real instant, in the profile's slot order. `text(key)`
/// is the slot's value when it is text (a list or a number is not this rule's).
pub fn impossible_dates<'v>(
    grammar: &Grammar,
    text: impl Fn(&[u8]) -> Option<Cow<'v, [u8]>>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (key, time) in &grammar.calendar {
        let Some(value) = text(key) else {
            continue;
        };
        if real_instant(&value, *time) {
            continue;
        }
        let (kind, what): (&[u8], &[u8]) = if *time {
            (b"time", b"time (YYYYMMDDTHHMMZ, UTC)")
        } else {
            (b"date", b"date (YYYYMMDD)")
        };
        let message = [
            &b"input: "[..],
            key,
            b"=",
            &value,
            b" is not a real calendar ",
            what,
        ]
        .concat();
        let expected = [&b"a real "[..], kind].concat();
        problems.push(Problem::new(
            "input-impossible-date",
            TIER,
            message,
            Some(key),
            Some(&expected),
            Some(&value),
        ));
    }
    problems
}

/// [`impossible_dates`] of a parsed line's twin.
pub fn impossible_twin_dates(twin: &Twin<'_>, grammar: &Grammar) -> Vec<Problem> {
    impossible_dates(grammar, |key| match twin.slot(key) {
        Some(Value::Text(t)) => Some(Cow::Borrowed(&t[..])),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn codes(raw: &[u8]) -> Vec<&'static str> {
        match screen(raw, 8192) {
            Ok(_) => vec![],
            Err(ps) => ps.iter().map(|p| p.code).collect(),
        }
    }

    #[test]
    fn clean_lines_pass() {
        assert_eq!(
            screen(b"RW1 HO a-1 from=a to=b // caf\xc3\xa9 tail", 8192),
            Ok("RW1 HO a-1 from=a to=b // caf\u{e9} tail")
        );
        assert!(codes(b"RW1 ST a-1 from=a to=b //").is_empty());
    }

    #[test]
    fn each_rule_refuses() {
        assert_eq!(codes(b""), ["input-empty"]);
        assert_eq!(codes(b"RW1\nHO"), ["input-multiline"]);
        assert_eq!(
            codes(b"RW1 HO\xe2\x80\x8b a"),
            ["input-control-character", "input-non-ascii"]
        );
        assert_eq!(codes(b"RW1  HO"), ["input-spacing"]);
        assert_eq!(codes(b" RW1"), ["input-spacing"]);
        assert_eq!(codes(b"RW1 \xff"), ["input-not-utf8"]);
        assert_eq!(
            screen(b"abc", 2).unwrap_err()[0].message,
            b"input: the value is 3 bytes; the limit is 2"
        );
    }

    #[test]
    fn utf8_errors_in_pythons_words() {
        let msg = |raw: &[u8]| {
            String::from_utf8(screen(raw, 99).unwrap_err()[0].message.clone()).unwrap()
        };
        assert_eq!(
            msg(b"ab\xe2\x82"),
            "input: the value is not UTF-8 (byte 2: unexpected end of data)"
        );
        assert_eq!(
            msg(b"a\xc0\x80"),
            "input: the value is not UTF-8 (byte 1: invalid start byte)"
        );
        assert_eq!(
            msg(b"\xed\xa0\x80"),
            "input: the value is not UTF-8 (byte 0: invalid continuation byte)"
        );
        assert_eq!(
            msg(b"\xf0\x9fA"),
            "input: the value is not UTF-8 (byte 0: invalid continuation byte)"
        );
    }

    #[test]
    fn calendar() {
        assert!(real_instant(b"20280229", false));
        assert!(!real_instant(b"20270229", false));
        assert!(!real_instant(b"21000229", false));
        assert!(real_instant(b"20000229", false));
        assert!(!real_instant(b"00000101", false));
        assert!(!real_instant(b"20271301", false));
        assert!(real_instant(b"20271231T2359Z", true));
        assert!(!real_instant(b"20271231T2400Z", true));
        assert!(!real_instant(b"20271231T2360Z", true));
        assert!(real_instant(b"2027123", false)); // not of the shape: the parser's
        assert!(!real_instant("٢٠٢٧٠٢٣٠".as_bytes(), false)); // Arabic-Indic digits are \d: Feb 30
    }

    proptest! {
        #[test]
        fn the_head_and_its_spacing_are_found_as_a_byte_by_byte_scan_finds_them(
            raw in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'/'), Just(b'a')], 0..40),
        ) {
            let by_windows = match raw.windows(4).position(|w| w == b" // ") {
                Some(at) => &raw[..at],
                None => raw.strip_suffix(b" //").unwrap_or(&raw),
            };
            prop_assert_eq!(head_of(&raw), by_windows);
            let spaced = by_windows.first() == Some(&b' ')
                || by_windows.last() == Some(&b' ')
                || by_windows.windows(2).any(|w| w == b"  ");
            prop_assert_eq!(badly_spaced(by_windows), spaced);
        }

        #[test]
        fn any_bytes_screen_without_panic(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = screen(&raw, 32);
            let _ = conversation_problem(&raw);
            let _ = real_instant(&raw, false);
            let _ = real_instant(&raw, true);
        }
    }
}
