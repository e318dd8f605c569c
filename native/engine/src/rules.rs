//! Small rules of the verdict table: the message ids the gatekeeper keeps for its own lines, and the shapes an
//! answer to a question must have.

use rw1::pytext::{chars, digit, strip};
use rw1::Problem;

/// The gatekeeper writes its own lines (expiry cancels) with message numbers in this range; agents may not use it.
pub const RESERVED_ID_MIN: u64 = 900_000_000;
pub const RESERVED_ID_MAX: u64 = 999_999_999;
const ID_DIGITS: usize = 9; // the digits of RESERVED_ID_MAX

/// The number of a message id `<sender>-<n>`, for comparing with the reserved range; None when the part after the
/// last `-` is not ASCII digits. A number longer than the range's own numbers (leading zeros aside) is above every
/// range the gatekeeper keeps: `RESERVED_ID_MAX + 1`, without converting thousands of digits.
pub fn id_number(id: &[u8]) -> Option<u64> {
    let number = id.rsplit(|&b| b == b'-').next().unwrap_or(id);
    if number.is_empty() || !number.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let first = number
        .iter()
        .position(|&b| b != b'0')
        .unwrap_or(number.len());
    let significant = &number[first..];
    if significant.len() > ID_DIGITS {
        return Some(RESERVED_ID_MAX + 1);
    }
    Some(
        significant
            .iter()
            .fold(0, |n, &b| n * 10 + u64::from(b - b'0')),
    )
}

/// Whether an id's number is in the range the gatekeeper keeps for its own lines.
pub fn is_reserved_id(id: &[u8]) -> bool {
    id_number(id).is_some_and(|n| (RESERVED_ID_MIN..=RESERVED_ID_MAX).contains(&n))
}

fn is_digit(c: u32) -> bool {
    digit(c).is_some()
}

/// `re.fullmatch(r"-?\d+(\.\d+)?", text)` (Python's `\d`: any decimal digit).
pub fn is_number(text: &[u8]) -> bool {
    let cs: Vec<u32> = chars(text).collect();
    let body = cs.strip_prefix(&[u32::from(b'-')]).unwrap_or(&cs);
    let (whole, fraction) = match body.iter().position(|&c| c == u32::from(b'.')) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    !whole.is_empty()
        && whole.iter().all(|&c| is_digit(c))
        && fraction.is_none_or(|f| !f.is_empty() && f.iter().all(|&c| is_digit(c)))
}

/// Whether `YYYYMMDD` names no day of the calendar, as `time.strptime(text, "%Y%m%d")` decides it: four of
/// Python's decimal digits for the year, then an ASCII month and day as its format's patterns take them (a
/// one-digit month or day leaves the rest unconverted), a year from 1, a day the month has.
pub fn impossible_date(text: &[u8]) -> bool {
    let cs: Vec<u32> = chars(text).collect();
    let at = |i: usize| cs.get(i).copied().unwrap_or(0);
    let ascii = |i: usize| u8::try_from(at(i)).ok().filter(u8::is_ascii_digit);
    if cs.len() < 4 || !cs[..4].iter().all(|&c| is_digit(c)) {
        return true;
    }
    let year = cs[..4]
        .iter()
        .fold(0u32, |n, &c| n * 10 + u32::from(digit(c).unwrap_or(0)));
    // %m: 1[0-2] | 0[1-9] | [1-9], then %d: 3[01] | [12]\d | 0[1-9] | [1-9] | " "[1-9]: the first pair that
    // matches, in the regular expression's order (a month of two digits whose day does not match is tried as one)
    let months = [
        match (ascii(4), ascii(5)) {
            (Some(b'1'), Some(b @ b'0'..=b'2')) => Some((10 + u32::from(b - b'0'), 6)),
            (Some(b'0'), Some(b @ b'1'..=b'9')) => Some((u32::from(b - b'0'), 6)),
            _ => None,
        },
        match ascii(4) {
            Some(b @ b'1'..=b'9') => Some((u32::from(b - b'0'), 5)),
            _ => None,
        },
    ];
    let day_at = |next: usize| match (at(next), at(next + 1)) {
        (0x33, c @ (0x30 | 0x31)) => Some((30 + c - 0x30, next + 2)),
        (c @ (0x31 | 0x32), d) if is_digit(d) => {
            Some(((c - 0x30) * 10 + u32::from(digit(d).unwrap_or(0)), next + 2))
        }
        (0x30, c @ 0x31..=0x39) => Some((c - 0x30, next + 2)),
        (c @ 0x31..=0x39, _) => Some((c - 0x30, next + 1)),
        (0x20, c @ 0x31..=0x39) => Some((c - 0x30, next + 2)),
        _ => None,
    };
    let Some((month, (day, end))) = months
        .into_iter()
        .flatten()
        .find_map(|(month, next)| day_at(next).map(|d| (month, d)))
    else {
        return true;
    };
    end != cs.len() || year == 0 || day > crate::gate::days_in_month(year, month)
}

/// What an answer to a question must be, by the question's `need=`: None when `val` (as the line shows it) has
/// that shape, else what it should have been. `allowed` are the question's `opts=`; `tail` the answer's tail.
pub fn answer_wants(
    need: &[u8],
    val: &[u8],
    allowed: &[&[u8]],
    tail: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let (ok, wants): (bool, &[u8]) = match need {
        b"ENUM" => (allowed.contains(&val), b""),
        b"YESNO" => (val == b"Y" || val == b"N", b"Y or N"),
        b"NUM" => (is_number(val), b"a number"),
        b"DATE" => {
            let eight = chars(val).count() == 8 && chars(val).all(is_digit);
            (eight && !impossible_date(val), b"a date YYYYMMDD")
        }
        b"TEXT" => (
            val == b"tail" && !strip(tail.unwrap_or(b"")).is_empty(),
            b"val=tail and the answer in the tail",
        ),
        _ => (true, b""),
    };
    if ok {
        return None;
    }
    if need == b"ENUM" {
        return Some([&b"one of "[..], &allowed.join(&b'+')].concat());
    }
    Some(wants.to_vec())
}

/// The problem of an answer `an_id` to the question `aq_id` whose `val` is not of the shape its `need=` asks.
pub fn answer_problem(
    an_id: &[u8],
    aq_id: &[u8],
    need: &[u8],
    val: &[u8],
    wants: &[u8],
) -> Problem {
    let message = [
        &b"AN "[..],
        an_id,
        b": question ",
        aq_id,
        b" asks need=",
        need,
        b", ",
        wants,
        b"; got val=",
        val,
    ]
    .concat();
    Problem::new(
        "answer-out-of-need",
        "thread",
        message,
        Some(b"val"),
        Some(wants),
        Some(val),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids() {
        assert_eq!(id_number(b"payer-17"), Some(17));
        assert_eq!(id_number(b"payer-"), None);
        assert_eq!(id_number(b"payer-1x"), None);
        assert_eq!(id_number(b"17"), Some(17));
        assert_eq!(id_number(b"a-000000000900000000"), Some(900_000_000));
        assert_eq!(id_number(b"a-1234567890"), Some(RESERVED_ID_MAX + 1));
        assert!(is_reserved_id(b"gatekeeper-900000001"));
        assert!(!is_reserved_id(b"a-899999999"));
    }

    #[test]
    fn numbers_and_dates() {
        assert!(
            is_number(b"-12.5")
                && is_number("٣".as_bytes())
                && !is_number(b"1.")
                && !is_number(b"-")
        );
        assert!(
            !impossible_date(b"20270228")
                && impossible_date(b"20270229")
                && impossible_date(b"20271301")
        );
        assert!(
            impossible_date(b"20270001")
                && impossible_date(b"00000101")
                && impossible_date(b"20270100")
        );
        assert!(!impossible_date("٢٠٢٧0101".as_bytes()) && impossible_date("2027٠١01".as_bytes()));
        assert!(impossible_date(b"20272101")); // month 2, then "101": unconverted data remains
        assert!(!impossible_date("849٠12٣".as_bytes())); // month 12 has no day "٣": month 1, day "2٣"
    }

    #[test]
    fn answers() {
        assert_eq!(
            answer_wants(b"ENUM", b"C", &[b"A", b"B"], None),
            Some(b"one of A+B".to_vec())
        );
        assert_eq!(answer_wants(b"ENUM", b"A", &[b"A", b"B"], None), None);
        assert_eq!(
            answer_wants(b"TEXT", b"tail", &[], Some(b" \t")),
            Some(b"val=tail and the answer in the tail".to_vec())
        );
        assert_eq!(answer_wants(b"OTHER", b"x", &[], None), None);
    }

    proptest! {
        #[test]
        fn any_text_without_panic(s in ".{0,16}") {
            let _ = impossible_date(s.as_bytes());
            let _ = is_number(s.as_bytes());
            let _ = id_number(s.as_bytes());
        }
    }
}
