//! A handoff's time (issue 33): when its `exp=`, `due=` and the route's readback timeout make it overdue, when a
//! question's `by=` does, and its place in the lifecycle indexes the store keeps (`gatekeeper.policy.lifecycle`
//! documents the rules and acts on them; these are the computations it and the batch share).

use rw1::pytext;

use crate::gate::days_in_month;
use crate::state::State;

/// Past the calendar's end: never overdue in practice, and sorted last.
const INF: f64 = f64::INFINITY;

/// A deadline's kind, in the order two at the same time are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Exp,
    Due,
    Readback,
}

impl Kind {
    pub fn code(self) -> &'static str {
        match self {
            Kind::Exp => "exp",
            Kind::Due => "due",
            Kind::Readback => "readback",
        }
    }
}

/// One deadline of one handoff: overdue from `at` on; `value` as written (`exp=`, `due=`; empty for the readback
/// timeout, which the caller shows as its configuration wrote it).
#[derive(Debug, Clone, PartialEq)]
pub struct Deadline {
    pub kind: Kind,
    pub at: f64,
    pub value: Vec<u8>,
}

/// One handoff's (or question's) place in the indexes: open (by when it opened), its earliest pending deadline,
/// when the gatekeeper acted on its time running out.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexEntry {
    pub open: bool,
    pub opened_at: Option<f64>,
    pub due_at: Option<f64>,
    pub lapsed_at: Option<f64>,
}

/// The digits of `s` matched by `^\d{n}` (Unicode decimals, as Python's `re` reads `\d`), and the rest.
fn digits(s: &[u8], n: usize) -> Option<(u32, &[u8])> {
    let mut value = 0u32;
    let mut at = 0;
    for _ in 0..n {
        if at >= s.len() {
            return None;
        }
        let (c, len) = pytext::decode(s, at);
        value = value * 10 + u32::from(pytext::digit(c)?);
        at += len;
    }
    Some((value, &s[at..]))
}

/// `$`: the end, or before a final newline.
fn at_end(s: &[u8]) -> bool {
    s.is_empty() || s == b"\n"
}

/// Days from 1970-01-01 to this date (proleptic Gregorian).
fn days(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The first real day whose `YYYYMMDD` sorts at or after these fields, and whether it is exactly them; None past
/// the calendar's range (years 1 to 9999).
fn first_day(y: u32, mo: u32, d: u32) -> Option<((u32, u32, u32), bool)> {
    let day = if mo == 0 {
        ((y, 1, 1), false)
    } else if mo > 12 {
        ((y + 1, 1, 1), false)
    } else if d == 0 {
        ((y, mo, 1), false)
    } else if d > days_in_month(y, mo) {
        (
            if mo == 12 {
                (y + 1, 1, 1)
            } else {
                (y, mo + 1, 1)
            },
            false,
        )
    } else {
        ((y, mo, d), true)
    };
    (1..=9999).contains(&day.0 .0).then_some(day)
}

/// Seconds from the epoch to the start of this day plus `seconds`; None past 9999-12-31.
fn epoch(day: (u32, u32, u32), seconds: i64) -> Option<f64> {
    let start = days(i64::from(day.0), day.1, day.2) * 86_400;
    let last = days(9999, 12, 31) * 86_400 + 86_399;
    let at = start + seconds;
    (at <= last).then_some(at as f64)
}

/// Past the calendar's end (year 9999) or before its start: saturate, as the Python did.
fn saturate(y: u32) -> f64 {
    if y >= 9999 {
        INF
    } else {
        0.0
    }
}

/// When a handoff with this `exp=` becomes overdue: the first minute whose `YYYYMMDDTHHMMZ` sorts at or after it
/// (the value itself when it is a real minute). None when the value is not a time (it never expires).
pub fn exp_deadline(exp: &[u8]) -> Option<f64> {
    let (y, rest) = digits(exp, 4)?;
    let (mo, rest) = digits(rest, 2)?;
    let (d, rest) = digits(rest, 2)?;
    let rest = rest.strip_prefix(b"T")?;
    let (h, rest) = digits(rest, 2)?;
    let (mi, rest) = digits(rest, 2)?;
    let rest = rest.strip_prefix(b"Z")?;
    if !at_end(rest) {
        return None;
    }
    let Some((day, exact)) = first_day(y, mo, d) else {
        return Some(saturate(y));
    };
    let seconds = if !exact {
        0
    } else if h > 23 {
        86_400
    } else if mi > 59 {
        i64::from(h + 1) * 3_600
    } else {
        i64::from(h) * 3_600 + i64::from(mi) * 60
    };
    Some(epoch(day, seconds).unwrap_or_else(|| saturate(y)))
}

/// When a handoff with this `due=` becomes overdue: the start (UTC) of the first day whose `YYYYMMDD` sorts after
/// it, i.e. the day after a real date. None when the value is not a date.
pub fn due_deadline(due: &[u8]) -> Option<f64> {
    let (y, rest) = digits(due, 4)?;
    let (mo, rest) = digits(rest, 2)?;
    let (d, rest) = digits(rest, 2)?;
    if !at_end(rest) {
        return None;
    }
    let Some((day, exact)) = first_day(y, mo, d) else {
        return Some(saturate(y));
    };
    Some(epoch(day, if exact { 86_400 } else { 0 }).unwrap_or_else(|| saturate(y)))
}

/// When a question with this `by=` is overdue: a time as `exp=`, a date as `due=`.
pub fn by_deadline(by: &[u8]) -> Option<f64> {
    if by.contains(&b'T') {
        exp_deadline(by)
    } else {
        due_deadline(by)
    }
}

/// The `by=` of a kept question's line, as written (from its slots, before the tail): `(?:^| )by=(\S+)`.
pub fn by_of(text: &[u8]) -> Option<&[u8]> {
    let head = text
        .windows(4)
        .position(|w| w == b" // ")
        .map_or(text, |i| &text[..i]);
    let mut from = 0;
    while let Some(i) = head[from..].windows(3).position(|w| w == b"by=") {
        let at = from + i;
        if at == 0 || head[at - 1] == b' ' {
            let value = &head[at + 3..];
            let mut end = 0;
            while end < value.len() {
                let (c, len) = pytext::decode(value, end);
                if pytext::is_space(c) {
                    break;
                }
                end += len;
            }
            if end > 0 {
                return Some(&value[..end]);
            }
        }
        from = at + 1;
    }
    None
}

impl State {
    /// When the gatekeeper forwarded the handoff (the time of its first decision).
    pub fn opened_at(&self, ho: &[u8]) -> Option<f64> {
        self.lines.get(ho).map(|l| l.at)
    }

    /// When the gatekeeper first acted on the handoff's time running out (a cancel or an alert), if it did.
    pub fn lapsed_at(&self, ho: &[u8]) -> Option<f64> {
        let h = self.handoffs.get(ho)?;
        match (h.gk_cancel_at, h.overdue_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the handoff is forwarded and open (not closed, not acknowledged-cancelled, not superseded).
    fn live(&self, ho: &[u8]) -> bool {
        self.handoffs
            .get(ho)
            .is_some_and(|h| h.superseded_by.is_none())
            && self.tracker.handoff(ho).is_some_and(|v| !v.closed())
    }

    /// The handoff's deadlines, earliest first: only those still pending (not acted on: no overdue alert for
    /// `exp=`/`due=`, no passing or cleared readback and no cancel for the readback timeout), or all it had. None
    /// when the state has no forwarded handoff of that id.
    pub fn deadlines(
        &self,
        ho: &[u8],
        readback_timeout: Option<f64>,
        pending_only: bool,
    ) -> Option<Vec<Deadline>> {
        let entry = self.handoffs.get(ho)?;
        let view = self.tracker.handoff(ho)?;
        let mut out = Vec::new();
        if entry.overdue.is_none() || !pending_only {
            if let Some(exp) = &view.exp {
                if let Some(at) = exp_deadline(exp) {
                    out.push(Deadline {
                        kind: Kind::Exp,
                        at,
                        value: exp.clone(),
                    });
                }
            }
            if let Some(due) = &view.due {
                if let Some(at) = due_deadline(due) {
                    out.push(Deadline {
                        kind: Kind::Due,
                        at,
                        value: due.clone(),
                    });
                }
            }
        }
        if let Some(t) = readback_timeout.filter(|t| *t != 0.0) {
            let waiting =
                entry.passed_rb.is_none() && entry.cleared_by.is_none() && view.cancels.is_empty();
            if let Some(start) = self.opened_at(ho) {
                if waiting || !pending_only {
                    out.push(Deadline {
                        kind: Kind::Readback,
                        at: start + t,
                        value: Vec::new(), // the caller shows its timeout as it wrote it
                    });
                }
            }
        }
        out.sort_by(|a, b| a.at.total_cmp(&b.at).then(a.kind.cmp(&b.kind)));
        Some(out)
    }

    /// A question's pending `by=`: `(at, value)` for a delivered `AQ` with a `by=`, neither answered nor alerted.
    pub fn question_deadline(&self, aq: &[u8]) -> Option<(f64, Vec<u8>)> {
        let line = self.lines.get(aq)?;
        let delivered = line.verdict == b"forward" || line.verdict == b"alert";
        if line.typ != b"AQ"
            || !delivered
            || line.answered.is_some()
            || line.unanswered_at.is_some()
        {
            return None;
        }
        let by = by_of(line.text.as_deref()?)?;
        Some((by_deadline(by)?, by.to_vec()))
    }

    /// The index entry of a handoff (or question) as the state has it now: an open handoff with its next deadline,
    /// a closed one (it leaves the open and deadline indexes), a question in the deadline index while its `by=` is
    /// pending. None for an id that is neither.
    pub fn index_entry(&self, ho: &[u8], readback_timeout: Option<f64>) -> Option<IndexEntry> {
        if !self.handoffs.contains_key(ho) {
            let line = self.lines.get(ho)?;
            if line.typ != b"AQ" {
                return None;
            }
            return Some(IndexEntry {
                open: false,
                opened_at: None,
                due_at: self.question_deadline(ho).map(|q| q.0),
                lapsed_at: None,
            });
        }
        let lapsed_at = self.lapsed_at(ho);
        if !self.live(ho) {
            return Some(IndexEntry {
                open: false,
                opened_at: None,
                due_at: None,
                lapsed_at,
            });
        }
        let pending = self
            .deadlines(ho, readback_timeout, true)
            .unwrap_or_default();
        Some(IndexEntry {
            open: true,
            opened_at: self.opened_at(ho),
            due_at: pending.first().map(|d| d.at),
            lapsed_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_read_the_calendar_as_the_python_did() {
        assert_eq!(exp_deadline(b"20261001T1000Z"), Some(1_790_848_800.0));
        assert_eq!(exp_deadline(b"20261001T2400Z"), Some(1_790_899_200.0)); // past the day: the next day
        assert_eq!(exp_deadline(b"20261001T0960Z"), Some(1_790_848_800.0)); // past the hour: the next hour
        assert_eq!(exp_deadline(b"20260230T0000Z"), Some(1_772_323_200.0)); // no 30 February: 1 March
        assert_eq!(exp_deadline(b"20261001T1000Z\n"), Some(1_790_848_800.0)); // `$` before a final newline
        assert_eq!(exp_deadline(b"99991231T2400Z"), Some(INF));
        assert_eq!(exp_deadline(b"00000101T0000Z"), Some(0.0));
        assert_eq!(exp_deadline(b"2026100T1000Z"), None);
        assert_eq!(due_deadline(b"20261001"), Some(1_790_899_200.0));
        assert_eq!(due_deadline(b"20261300"), Some(1_798_761_600.0)); // month 13: the next year
        assert_eq!(due_deadline("٢٠٢٦١٠٠١".as_bytes()), Some(1_790_899_200.0)); // `\d` reads any decimal digit
        assert_eq!(by_deadline(b"20261001"), due_deadline(b"20261001"));
    }

    #[test]
    fn by_is_read_from_the_head_of_the_line() {
        assert_eq!(by_of(b"RW1 AQ a-1 by=20261001 q=x"), Some(&b"20261001"[..]));
        assert_eq!(by_of(b"RW1 AQ a-1 x=1 // by=20261001"), None);
        assert_eq!(by_of(b"RW1 AQ a-1 nearby=1 by= by=2"), Some(&b"2"[..]));
        assert_eq!(by_of(b"by=x"), Some(&b"x"[..]));
    }
}
