//! Every handoff closes (spec 5.4), as an incremental state machine: [`Tracker`] is fed a conversation one decoded
//! line at a time, in the order it was sent, and keeps only what the closing rule needs (one record per HO, and the
//! indexes that let each reply find its handoff by id). A line costs O(1) amortised; `report(now)` renders the
//! whole thread's verdict as the reference's `check_thread` does, in its order and words.
//!
//! The rules (rwcore's `_thread.py` states them in full): a DN, UN or FL from an HO's receiver naming it closes it
//! (twice is a problem); a CX naming an HO cancels it (from anyone but its sender to its receiver: a problem), and
//! an `AN val=Y` to that CX from the receiver acknowledges it, which closes the HO; a DN after the first cancel with
//! `out` other than NOOP reports an act done after the cancel; an HO still open past its `exp=` (or its `due=` day)
//! is orphaned, else open (a note); a CX whose `re=` names no HO in the thread, and a line that does not parse, are
//! problems.

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::parse::{is_time, Twin};
use crate::problem::{cat, Problem};
use crate::value::Value;

const TIER: &str = "thread";

/// A cancel not from the HO's sender to its receiver: (line, CX id, from, to).
pub type WrongCancel = (i64, Vec<u8>, Vec<u8>, Vec<u8>);
/// A cancel as the thread saw it: (line, CX id, the id its `re=` names).
pub type Cancel = (i64, Vec<u8>, Option<Vec<u8>>);

/// The tracker's record of one HO.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handoff {
    pub line_no: i64,
    pub id: Vec<u8>,
    pub sender: Vec<u8>,
    pub receiver: Vec<u8>,
    pub item: Option<Vec<u8>>,
    pub exp: Option<Vec<u8>>,
    pub due: Option<Vec<u8>>,
    /// (type, id) of each DN, UN or FL from the receiver, in order
    pub closes: Vec<(Vec<u8>, Vec<u8>)>,
    /// ids of each CX naming it, in order
    pub cancels: Vec<Vec<u8>>,
    /// (line, CX id, from, to) of each CX not from the sender to the receiver
    pub wrong: Vec<WrongCancel>,
    /// a cancel was acknowledged with AN val=Y from the receiver
    pub acked: bool,
    /// (DN id, out) of the first DN after the first CX with out other than NOOP
    pub ran: Option<(Vec<u8>, Vec<u8>)>,
}

impl Handoff {
    /// Closed by the receiver, or a cancel acknowledged.
    pub fn closed(&self) -> bool {
        !self.closes.is_empty() || self.acked
    }
}

/// The closing rule over one conversation, fed a line at a time.
#[derive(Debug, Default, Clone)]
pub struct Tracker {
    /// every HO, in line order
    hos: Vec<Handoff>,
    /// HO id -> the indexes of the HOs with that id (usually one)
    by_id: HashMap<Vec<u8>, Vec<usize>>,
    /// the indexes of the HOs not closed yet (in line order, as the indexes are)
    open: BTreeSet<usize>,
    /// CX id -> the HOs it cancels that no AN val=Y acknowledged yet
    cx_wait: HashMap<Vec<u8>, Vec<usize>>,
    /// every CX: (line, id, re), for the no-HO check
    cxs: Vec<Cancel>,
    /// HO ids whose latest valid line is not an HO
    shadowed: HashSet<Vec<u8>>,
    /// (line, problem message) of each line that did not parse
    invalid: Vec<(i64, Vec<u8>)>,
    /// the last line number fed
    last: i64,
}

/// A value as the reference formats it when it is there (`f"{v}"`), or None when it treats it as absent.
fn opt_str(v: Option<&Value<'_>>) -> Option<Vec<u8>> {
    v.filter(|v| v.truthy()).map(|v| v.py_str().into_owned())
}

fn text(v: Option<&Value<'_>>) -> Vec<u8> {
    v.map_or_else(|| b"None".to_vec(), |v| v.py_str().into_owned())
}

fn p(
    code: &'static str,
    message: Vec<u8>,
    slot: Option<&[u8]>,
    expected: Option<&[u8]>,
    got: Option<&[u8]>,
) -> Problem {
    Problem::new(code, TIER, message, slot, expected, got)
}

fn p_wrong_agent(h: &Handoff, line: i64, cx_id: &[u8], cx_from: &[u8], cx_to: &[u8]) -> Problem {
    let msg = cat(&[
        b"line ",
        line.to_string().as_bytes(),
        b": CX ",
        cx_id,
        b" must come from ",
        &h.sender,
        b" to ",
        &h.receiver,
        b", the HO's sender and receiver",
    ]);
    let expected = cat(&[&h.sender, b"->", &h.receiver]);
    let got = cat(&[cx_from, b"->", cx_to]);
    p(
        "thread-cancel-wrong-agent",
        msg,
        Some(b"from"),
        Some(&expected),
        Some(&got),
    )
}

fn p_closed_twice(h: &Handoff) -> Problem {
    let listed: Vec<Vec<u8>> = h.closes.iter().map(|(t, i)| cat(&[t, b" ", i])).collect();
    let n = h.closes.len().to_string();
    let msg = cat(&[
        &h.id,
        b": closed ",
        n.as_bytes(),
        b" times (",
        &listed.join(&b", "[..]),
        b"); a handoff closes once",
    ]);
    p(
        "thread-closed-twice",
        msg,
        None,
        Some(b"1"),
        Some(n.as_bytes()),
    )
}

fn p_done_after_cancel(h: &Handoff, dn_id: &[u8], out: &[u8]) -> Problem {
    let first = h.cancels.first().map_or(&b""[..], |c| &c[..]);
    let msg = cat(&[
        &h.id,
        b": ",
        dn_id,
        b" reports the act done after CX ",
        first,
        b" cancelled it; decide whether to UNDO it",
    ]);
    p(
        "thread-done-after-cancel",
        msg,
        Some(b"out"),
        Some(b"NOOP"),
        Some(out),
    )
}

fn p_orphaned(h: &Handoff, now: &[u8], by_exp: bool) -> Problem {
    let (slot, value): (&[u8], Option<&[u8]>) = if by_exp {
        (b"exp", h.exp.as_deref())
    } else {
        (b"due", h.due.as_deref())
    };
    let value = value.unwrap_or(b"None");
    let msg = cat(&[
        &h.id,
        b": orphaned, open past ",
        slot,
        b"=",
        value,
        b" with no DN, UN, FL or acknowledged CX; close it or cancel it",
    ]);
    p(
        "thread-orphaned",
        msg,
        Some(slot),
        Some(&cat(&[b"closed by ", value])),
        Some(now),
    )
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    fn line(&mut self, line_no: Option<i64>) -> Result<i64, String> {
        let n = line_no.unwrap_or(self.last + 1);
        if n <= self.last {
            return Err(format!(
                "line numbers must increase: got {n} after {}",
                self.last
            ));
        }
        self.last = n;
        Ok(n)
    }

    /// Take the next valid line: the problems it raises at once (a second close, a DN after a cancel, a cancel
    /// from the wrong agent).
    pub fn feed(&mut self, msg: &Twin<'_>, line_no: Option<i64>) -> Result<Vec<Problem>, String> {
        let n = self.line(line_no)?;
        Ok(self.take(msg, n, true))
    }

    /// What `feed` would return for this line, the tracker left unchanged.
    pub fn probe(&mut self, msg: &Twin<'_>, line_no: Option<i64>) -> Vec<Problem> {
        let n = line_no.unwrap_or(self.last + 1);
        self.take(msg, n, false)
    }

    fn take(&mut self, msg: &Twin<'_>, n: i64, apply: bool) -> Vec<Problem> {
        let mut problems = Vec::new();
        let t: &[u8] = msg.typ.as_deref().unwrap_or_default();
        let id: &[u8] = msg.id.as_deref().unwrap_or_default();
        let re = msg
            .re
            .as_ref()
            .filter(|v| !matches!(v, Value::None))
            .map(|v| v.py_str().into_owned());
        let from = text(msg.from.as_ref());
        let to = text(msg.to.as_ref());
        let targets: Vec<usize> = re
            .as_ref()
            .and_then(|r| self.by_id.get(r))
            .cloned()
            .unwrap_or_default();
        match t {
            b"DN" | b"UN" | b"FL" => {
                for i in targets {
                    if from != self.hos[i].receiver {
                        continue;
                    }
                    let mut probe_copy;
                    let h: &mut Handoff = if apply {
                        &mut self.hos[i]
                    } else {
                        probe_copy = self.hos[i].clone();
                        &mut probe_copy
                    };
                    h.closes.push((t.to_vec(), id.to_vec()));
                    if h.closes.len() > 1 {
                        problems.push(p_closed_twice(h));
                    }
                    if t == b"DN" && !h.cancels.is_empty() && h.ran.is_none() {
                        let out = text(msg.slot(b"out"));
                        if out != b"NOOP" {
                            problems.push(p_done_after_cancel(h, id, &out));
                            if apply {
                                h.ran = Some((id.to_vec(), out));
                            }
                        }
                    }
                    if apply {
                        self.open.remove(&i);
                    }
                }
            }
            b"CX" => {
                if apply {
                    self.cxs.push((n, id.to_vec(), re.clone()));
                }
                for i in targets {
                    let h = &mut self.hos[i];
                    if from != h.sender || to != h.receiver {
                        problems.push(p_wrong_agent(h, n, id, &from, &to));
                        if apply {
                            h.wrong.push((n, id.to_vec(), from.clone(), to.clone()));
                        }
                    }
                    if apply {
                        h.cancels.push(id.to_vec());
                        if !h.acked {
                            self.cx_wait.entry(id.to_vec()).or_default().push(i);
                        }
                    }
                }
            }
            b"AN" if apply && re.is_some() && text(msg.slot(b"val")) == b"Y" => {
                let key = re.clone().unwrap_or_default();
                if let Some(waiting) = self.cx_wait.remove(&key) {
                    let mut keep = Vec::new();
                    for i in waiting {
                        if self.hos[i].acked {
                            continue;
                        }
                        if from == self.hos[i].receiver {
                            self.hos[i].acked = true;
                            self.open.remove(&i);
                        } else {
                            keep.push(i);
                        }
                    }
                    if !keep.is_empty() {
                        self.cx_wait.insert(key, keep);
                    }
                }
            }
            _ => {}
        }
        if !apply {
            return problems;
        }
        if t == b"HO" {
            let h = Handoff {
                line_no: n,
                id: id.to_vec(),
                sender: from,
                receiver: to,
                item: msg
                    .item
                    .as_ref()
                    .filter(|v| !matches!(v, Value::None))
                    .map(|v| v.py_str().into_owned()),
                exp: opt_str(msg.slot(b"exp")),
                due: opt_str(msg.slot(b"due")),
                ..Handoff::default()
            };
            self.add(h);
            self.shadowed.remove(id);
        } else if self.by_id.contains_key(id) {
            self.shadowed.insert(id.to_vec());
        }
        problems
    }

    /// Take a line that failed to parse, with its errors' messages: its one problem.
    pub fn feed_invalid(
        &mut self,
        line_no: Option<i64>,
        errors: &[&[u8]],
    ) -> Result<Problem, String> {
        let n = self.line(line_no)?;
        let msg = cat(&[
            b"line ",
            n.to_string().as_bytes(),
            b": ",
            &errors.join(&b"; "[..]),
        ]);
        self.invalid.push((n, msg.clone()));
        Ok(p("thread-invalid-line", msg, None, None, None))
    }

    /// Count a line that carries no message (blank or `#`).
    pub fn skip(&mut self, line_no: Option<i64>) -> Result<(), String> {
        self.line(line_no).map(|_| ())
    }

    /// The last line number fed (0 before any).
    pub fn last_line(&self) -> i64 {
        self.last
    }

    /// The number of HOs.
    pub fn len(&self) -> usize {
        self.hos.len()
    }

    /// No HO yet.
    pub fn is_empty(&self) -> bool {
        self.hos.is_empty()
    }

    /// The thread's verdict at `now` (`YYYYMMDDTHHMMZ`): (problems, notes).
    pub fn report(&self, now: &[u8]) -> (Vec<Problem>, Vec<Problem>) {
        let mut problems: Vec<Problem> = self
            .invalid
            .iter()
            .map(|(_, m)| p("thread-invalid-line", m.clone(), None, None, None))
            .collect();
        let mut notes = Vec::new();
        let day = &now[..now.len().min(8)];
        for h in &self.hos {
            for (k, cx_id, cx_from, cx_to) in &h.wrong {
                problems.push(p_wrong_agent(h, *k, cx_id, cx_from, cx_to));
            }
            if h.closes.len() > 1 {
                problems.push(p_closed_twice(h));
            }
            if let Some(first) = h.cancels.first() {
                if let Some((dn_id, out)) = &h.ran {
                    problems.push(p_done_after_cancel(h, dn_id, out));
                } else if h.closes.is_empty() && !h.acked {
                    let msg = cat(&[&h.id, b": CX ", first, b" sent, not yet acknowledged; the receiver must abandon any prepared statement and answer AN val=Y"]);
                    notes.push(p("thread-cancel-unacked", msg, None, None, None));
                }
            }
            if h.closed() {
                continue;
            }
            let by_exp = h
                .exp
                .as_deref()
                .is_some_and(|e| !e.is_empty() && is_time(e) && now >= e);
            if by_exp || h.due.as_deref().is_some_and(|d| day > d) {
                problems.push(p_orphaned(h, now, by_exp));
            } else {
                notes.push(p("thread-open", cat(&[&h.id, b": open"]), None, None, None));
            }
        }
        for (k, cx_id, re) in &self.cxs {
            let names_ho = re
                .as_ref()
                .is_some_and(|r| self.by_id.contains_key(r) && !self.shadowed.contains(r));
            if !names_ho {
                let shown: &[u8] = re.as_deref().unwrap_or(b"None");
                let msg = cat(&[
                    b"line ",
                    k.to_string().as_bytes(),
                    b": CX ",
                    cx_id,
                    b" re=",
                    shown,
                    b" does not name an HO in this thread",
                ]);
                problems.push(p(
                    "thread-cancel-no-handoff",
                    msg,
                    Some(b"re"),
                    Some(b"the id of an HO in this thread"),
                    re.as_deref(),
                ));
            }
        }
        (problems, notes)
    }

    /// The HO with this id (the latest, should the id repeat).
    pub fn handoff(&self, id: &[u8]) -> Option<&Handoff> {
        self.by_id
            .get(id)
            .and_then(|v| v.last())
            .map(|&i| &self.hos[i])
    }

    /// Every HO, in line order.
    pub fn handoffs(&self) -> &[Handoff] {
        &self.hos
    }

    /// The HOs not closed yet, in line order.
    pub fn open_handoffs(&self) -> impl Iterator<Item = &Handoff> {
        self.open.iter().map(|&i| &self.hos[i])
    }

    /// Add a handoff's record as it stands (from a state), indexed as `feed` would have left it.
    pub fn add(&mut self, h: Handoff) {
        let i = self.hos.len();
        if !h.closed() {
            self.open.insert(i);
        }
        if !h.acked {
            for cx in &h.cancels {
                self.cx_wait.entry(cx.clone()).or_default().push(i);
            }
        }
        self.by_id.entry(h.id.clone()).or_default().push(i);
        self.hos.push(h);
    }

    /// A tracker holding only some handoffs of a conversation, to be fed on from `last_line` (the store keeps each
    /// handoff's record apart and loads those the next lines name).
    pub fn partial(handoffs: Vec<Handoff>, last_line: i64) -> Tracker {
        let mut t = Tracker {
            last: last_line,
            ..Tracker::default()
        };
        for h in handoffs {
            t.add(h);
        }
        t
    }

    /// The whole tracker's parts (what a state holds): HOs, CXs, invalid lines, shadowed ids (sorted), last line.
    #[allow(clippy::type_complexity)]
    pub fn parts(
        &self,
    ) -> (
        &[Handoff],
        &[(i64, Vec<u8>, Option<Vec<u8>>)],
        &[(i64, Vec<u8>)],
        Vec<&[u8]>,
        i64,
    ) {
        let mut shadowed: Vec<&[u8]> = self.shadowed.iter().map(|s| &s[..]).collect();
        shadowed.sort();
        (&self.hos, &self.cxs, &self.invalid, shadowed, self.last)
    }

    /// A tracker from its parts (the inverse of [`Tracker::parts`]).
    pub fn from_parts(
        handoffs: Vec<Handoff>,
        cxs: Vec<Cancel>,
        invalid: Vec<(i64, Vec<u8>)>,
        shadowed: Vec<Vec<u8>>,
        last: i64,
    ) -> Tracker {
        let mut t = Tracker::partial(handoffs, last);
        t.cxs = cxs;
        t.invalid = invalid;
        t.shadowed = shadowed.into_iter().collect();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{Grammar, Vocabulary};
    use crate::parse::parse;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn grammar() -> Grammar {
        let b = |s: &str| -> Box<[u8]> { s.as_bytes().into() };
        let slots = [
            ("re", "msgid"),
            ("from", "agent"),
            ("to", "agent"),
            ("item", "ref"),
            ("exp", "time"),
            ("due", "date"),
            ("out", "token"),
            ("val", "token"),
        ];
        let all: Vec<Box<[u8]>> = slots.iter().map(|(k, _)| b(k)).collect();
        let types = ["HO", "DN", "UN", "FL", "CX", "AN", "ST"]
            .iter()
            .map(|t| (b(t), vec![], all.clone()))
            .collect();
        Grammar::new(Vocabulary {
            types,
            slots: slots.iter().map(|(k, t)| (b(k), b(t))).collect(),
            tail_max: 300,
            ..Vocabulary::default()
        })
        .unwrap_or_else(|e| panic!("{}", String::from_utf8_lossy(&e)))
    }

    fn feed_all(t: &mut Tracker, g: &Grammar, lines: &[&str]) -> Vec<&'static str> {
        let mut codes = Vec::new();
        for line in lines {
            let p = parse(line.as_bytes(), g, |_| Err::<Arc<Grammar>, _>(Vec::new()));
            let found = t.feed(&p.twin, None).unwrap_or_default();
            codes.extend(found.iter().map(|x| x.code));
        }
        codes
    }

    #[test]
    fn a_thread_closes_and_its_problems_come_as_the_reference_says() {
        let g = grammar();
        let mut t = Tracker::new();
        let codes = feed_all(
            &mut t,
            &g,
            &[
                "RW1 HO a-1 from=a to=b item=i:1 exp=20261012T1000Z",
                "RW1 CX c-1 re=a-1 from=c to=b",
                "RW1 DN b-1 re=a-1 from=b to=a out=OK",
                "RW1 DN b-2 re=a-1 from=b to=a out=OK",
                "RW1 HO a-2 from=a to=b due=20261011",
                "RW1 CX a-3 re=zz from=a to=b",
            ],
        );
        assert_eq!(
            codes,
            [
                "thread-cancel-wrong-agent",
                "thread-done-after-cancel",
                "thread-closed-twice"
            ]
        );
        let (problems, notes) = t.report(b"20261012T0900Z");
        let codes: Vec<&str> = problems.iter().chain(&notes).map(|x| x.code).collect();
        assert_eq!(
            codes,
            [
                "thread-cancel-wrong-agent",
                "thread-closed-twice",
                "thread-done-after-cancel",
                "thread-orphaned",
                "thread-cancel-no-handoff"
            ]
        );
        assert_eq!(problems[3].message, b"a-2: orphaned, open past due=20261011 with no DN, UN, FL or acknowledged CX; close it or cancel it");
        assert!(t.feed_invalid(Some(3), &[b"x"]).is_err());
    }

    proptest! {
        #[test]
        fn probing_changes_nothing_and_parts_rebuild_the_tracker(
            lines in proptest::collection::vec("RW1 (HO|DN|UN|CX|AN) [ab]-[0-3]( re=[ab]-[0-3])?( from=[ab])?( to=[ab])?( out=(OK|NOOP))?( val=Y)?( exp=2026101[0-9]T1000Z)?", 0..24)
        ) {
            let g = grammar();
            let mut t = Tracker::new();
            for line in &lines {
                let p = parse(line.as_bytes(), &g, |_| Err::<Arc<Grammar>, _>(Vec::new()));
                let before = t.report(b"20261015T0000Z");
                let probed = t.probe(&p.twin, None);
                prop_assert_eq!(&t.report(b"20261015T0000Z"), &before);
                let fed = t.feed(&p.twin, None).unwrap_or_default();
                prop_assert_eq!(probed, fed);
            }
            let (hos, cxs, bad, sh, last) = t.parts();
            let back = Tracker::from_parts(hos.to_vec(), cxs.to_vec(), bad.to_vec(), sh.iter().map(|s| s.to_vec()).collect(), last);
            prop_assert_eq!(back.report(b"20261015T0000Z"), t.report(b"20261015T0000Z"));
        }
    }
}
