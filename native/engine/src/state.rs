//! What the gatekeeper remembers of one conversation: the loaded part of its state, as entries (issue 33).
//!
//! A conversation's state is many small entries, each a field of the conversation's Redis hash, each a JSON
//! document (`gatekeeper.policy.state` documents the fields): `h` the header, `l:<id>` a line's first decision,
//! `o:<id>` a forwarded handoff, `r:<id>` a checked readback, `t:<id>` a handoff's thread record. A batch loads only
//! the entries its lines name; [`State`] holds them, parsed once, and the thread tracker of the loaded handoffs.
//! The decision reads it (the [`crate::decide::Env`] of the bindings), its effects change it through the methods
//! below (each marks the fields it changed, which are all a save writes), and [`State::field`] writes an entry back
//! in the exact bytes the gatekeeper has always written ([`crate::json`]).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use indexmap::IndexMap;
use rw1::thread::{Handoff, Tracker};
use rw1::Twin;
use serde_json::{Map, Value as Json};

use crate::decide::{Finding, HandoffInfo, LineInfo, ReadbackInfo};
use crate::json;

/// The state's format version (1 was one JSON document per conversation).
pub const STATE_VERSION: i64 = 2;
/// The header's field.
pub const HEADER: &[u8] = b"h";

/// A line's first decision (`l:<id>`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredLine {
    pub digest: Vec<u8>,
    pub typ: Vec<u8>,
    pub verdict: Vec<u8>,
    pub reason: Option<Vec<u8>>,
    pub at: f64,
    pub re: Option<Vec<u8>>,
    pub problems: Vec<Finding>,
    /// kept for forwarded HOs, checked RBs and questions: later checks read them
    pub text: Option<Vec<u8>>,
    /// a question's: the line that answered it
    pub answered: Option<Vec<u8>>,
    /// a question's: when the gatekeeper raised unanswered-question
    pub unanswered_at: Option<f64>,
}

/// An approved record as a handoff keeps it: the values as the approver wrote them (any JSON), the values the
/// receiver resolves, the withheld criteria. The approver's signature is kept until the entry is first written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredRecord {
    pub item: Vec<u8>,
    pub ask: Vec<u8>,
    pub values: Map<String, Json>,
    pub resolved: Vec<(Vec<u8>, Vec<u8>)>,
    pub expect_acc: Option<Vec<Vec<u8>>>,
    pub signature: Option<Vec<u8>>,
}

/// A forwarded handoff (`o:<id>`) and what the gatekeeper knows of it beyond the thread tracker.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredHandoff {
    pub item: Vec<u8>,
    pub ask: Vec<u8>,
    pub exec_ask: bool,
    /// shared with the decision's effects that opened it (a record's values are a JSON map: copying it was about
    /// sixteen allocations a handoff)
    pub record: Option<Arc<StoredRecord>>,
    pub bound: bool,
    /// the binding's value it holds; None: bound by an earlier release
    pub holder: Option<Vec<u8>>,
    pub superseded_by: Option<Vec<u8>>,
    pub relay_of: Option<Vec<u8>>,
    pub relayed_by: Option<Vec<u8>>,
    pub cleared_by: Option<Vec<u8>>,
    pub passed_rb: Option<Vec<u8>>,
    pub gk_cancel: Option<Vec<u8>>,
    pub gk_cancel_why: Option<Vec<u8>>,
    pub gk_cancel_at: Option<f64>,
    pub overdue: Option<Vec<u8>>,
    pub overdue_at: Option<f64>,
}

/// A checked readback (`r:<id>`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredReadback {
    pub ho: Vec<u8>,
    pub passed: bool,
    pub exp: Option<Vec<u8>>,
    pub refused: bool,
}

/// The loaded part of one conversation's state, or the whole of a new one.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// each shared with the decisions that read it (`decide::LineInfo`), changed copy-on-write
    pub lines: IndexMap<Vec<u8>, Arc<StoredLine>>,
    /// shared with the decisions that read them (copy-on-write: `Arc::make_mut` where an effect changes one)
    pub handoffs: IndexMap<Vec<u8>, Arc<StoredHandoff>>,
    /// shared as the handoffs are
    pub readbacks: IndexMap<Vec<u8>, Arc<StoredReadback>>,
    pub tracker: Tracker,
    /// lines fed to the thread (the whole conversation's count)
    pub seq: i64,
    /// the header's open count as loaded
    pub base_open: i64,
    /// which loaded handoffs were open then
    pub open_at_load: HashSet<Vec<u8>>,
    /// the fields changed since the load: what a save writes
    pub dirty: BTreeSet<Vec<u8>>,
    /// converted from a version-1 document (the store deletes the document once the fields are written)
    pub legacy: bool,
}

// ---------------------------------------------------------------- reading JSON

type Bad = String;
/// Fields as written: (name, value).
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// A conversation's save, as the Redis save script reads it (see [`State::save_args`]).
pub struct SaveArgs {
    pub epoch: Option<i64>,
    pub ttl: i64,
    pub legacy: bool,
    pub collect: i64,
    pub queued: Vec<Vec<u8>>,
    pub fields: Fields,
}

impl SaveArgs {
    /// The arguments as a JSON array of strings, the scores (`now`, `oldest`) given as the text Redis reads and the
    /// integers as their digits (what redis-py sends of the same list to a cluster): what orjson writes for that
    /// list (only `"`, `\` and control characters escaped), one element of the batch save's one JSON argument.
    pub fn json(&self, now: &[u8], oldest: &[u8]) -> Vec<u8> {
        let text = |out: &mut Vec<u8>, s: &[u8]| rw1::canon::string(out, s);
        let mut out = Vec::with_capacity(
            64 + self
                .fields
                .iter()
                .map(|(k, v)| k.len() + v.len() + 8)
                .sum::<usize>(),
        );
        // integers as strings of their digits: the script hands them to Redis as they are, where a Lua number is
        // formatted again by every call it is an argument of
        let number = |out: &mut Vec<u8>, n: i64| {
            out.push(b'"');
            out.extend_from_slice(n.to_string().as_bytes());
            out.push(b'"');
        };
        out.push(b'[');
        match self.epoch {
            Some(e) => number(&mut out, e),
            None => out.extend_from_slice(b"\"\""),
        }
        out.push(b',');
        number(&mut out, self.ttl);
        out.extend_from_slice(if self.legacy { b",\"1\"," } else { b",\"0\"," });
        text(&mut out, now);
        out.push(b',');
        text(&mut out, oldest);
        out.push(b',');
        number(&mut out, self.collect);
        out.push(b',');
        number(&mut out, self.queued.len() as i64);
        for id in &self.queued {
            out.push(b',');
            text(&mut out, id);
        }
        for (k, v) in &self.fields {
            out.push(b',');
            text(&mut out, k);
            out.push(b',');
            text(&mut out, v);
        }
        out.push(b']');
        out
    }
}

fn parse(raw: &[u8], name: &[u8]) -> Result<Json, Bad> {
    serde_json::from_slice(raw)
        .map_err(|e| format!("{}: not JSON: {e}", String::from_utf8_lossy(name)))
}

fn obj<'a>(v: &'a Json, name: &[u8]) -> Result<&'a Map<String, Json>, Bad> {
    v.as_object()
        .ok_or_else(|| format!("{}: not an object", String::from_utf8_lossy(name)))
}

fn need<'a>(m: &'a Map<String, Json>, key: &str) -> Result<&'a Json, Bad> {
    m.get(key).ok_or_else(|| format!("KeyError: '{key}'"))
}

/// A field Python read as it found it (`d.get(key)`): text, or None for null or absent.
fn opt_text(m: &Map<String, Json>, key: &str) -> Option<Vec<u8>> {
    match m.get(key) {
        None | Some(Json::Null) => None,
        Some(v) => Some(json::py_str(v)),
    }
}

fn text(v: &Json) -> Vec<u8> {
    json::py_str(v)
}

fn number(v: &Json, what: &str) -> Result<f64, Bad> {
    match v {
        Json::Number(n) => n.as_f64().ok_or_else(|| format!("{what}: not a number")),
        Json::Bool(b) => Ok(f64::from(u8::from(*b))),
        Json::String(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("ValueError: could not convert string to float: '{s}'")),
        _ => Err(format!("{what}: not a number")),
    }
}

fn opt_number(v: Option<&Json>, what: &str) -> Result<Option<f64>, Bad> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(v) => number(v, what).map(Some),
    }
}

fn truthy(v: Option<&Json>) -> bool {
    match v {
        None | Some(Json::Null) => false,
        Some(Json::Bool(b)) => *b,
        Some(Json::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Json::String(s)) => !s.is_empty(),
        Some(Json::Array(a)) => !a.is_empty(),
        Some(Json::Object(o)) => !o.is_empty(),
    }
}

fn int(v: &Json, what: &str) -> Result<i64, Bad> {
    match v {
        Json::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
            .ok_or_else(|| format!("{what}: not an integer")),
        Json::Bool(b) => Ok(i64::from(*b)),
        Json::String(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("ValueError: invalid literal for int() with base 10: '{s}'")),
        _ => Err(format!("{what}: not an integer")),
    }
}

fn problem_of(v: &Json) -> Result<Finding, Bad> {
    let m = obj(v, b"a problem")?;
    let opt = |k: &str| opt_text(m, k);
    Ok(Finding {
        code: text(need(m, "code")?).into_string_cow(),
        tier: opt("tier").map(IntoCow::into_string_cow),
        message: text(need(m, "message")?),
        slot: opt("slot"),
        expected: opt("expected"),
        got: opt("got"),
    })
}

trait IntoCow {
    fn into_string_cow(self) -> std::borrow::Cow<'static, str>;
}

impl IntoCow for Vec<u8> {
    fn into_string_cow(self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Owned(
            String::from_utf8(self)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()),
        )
    }
}

fn line_of(v: &Json, name: &[u8]) -> Result<StoredLine, Bad> {
    let m = obj(v, name)?;
    let problems = match m.get("p") {
        None => Vec::new(),
        Some(Json::Array(ps)) => ps.iter().map(problem_of).collect::<Result<_, _>>()?,
        Some(_) => return Err("a line's problems: not a list".into()),
    };
    Ok(StoredLine {
        digest: text(need(m, "d")?),
        typ: text(need(m, "t")?),
        verdict: text(need(m, "v")?),
        reason: opt_text(m, "r"),
        at: number(need(m, "at")?, "at")?,
        re: opt_text(m, "re"),
        problems,
        text: opt_text(m, "x"),
        answered: opt_text(m, "ans"),
        unanswered_at: opt_number(m.get("una"), "una")?,
    })
}

/// A record from its stored map, taken whole: its values are moved out, never copied.
fn record_of(mut m: Map<String, Json>) -> StoredRecord {
    let resolved = match m.get("resolved") {
        Some(Json::Object(r)) => r
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), text(v)))
            .collect(),
        _ => Vec::new(),
    };
    let expect_acc = match m.get("expect_acc") {
        None | Some(Json::Null) => None,
        Some(Json::Array(a)) => Some(a.iter().map(text).collect()),
        Some(Json::String(s)) => Some(s.chars().map(|c| c.to_string().into_bytes()).collect()),
        Some(other) => Some(vec![text(other)]),
    };
    StoredRecord {
        item: m.get("item").map(text).unwrap_or_default(),
        ask: m.get("ask").map(text).unwrap_or_default(),
        values: match m.remove("values") {
            Some(Json::Object(v)) => v,
            _ => Map::new(),
        },
        resolved,
        expect_acc,
        signature: match m.get("sig") {
            Some(Json::String(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        },
    }
}

fn pair_of(v: Option<&Json>, what: &str) -> Result<Option<Vec<Json>>, Bad> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Array(a)) if a.is_empty() => Ok(None),
        Some(Json::Array(a)) => Ok(Some(a.clone())),
        Some(_) => Err(format!("{what}: not a list")),
    }
}

/// A handoff from its parsed entry, taken whole: its record's values (the largest part of an entry, any JSON the
/// approver wrote) are moved into the record, never copied.
fn handoff_of(mut v: Json, name: &[u8]) -> Result<StoredHandoff, Bad> {
    let m = obj(&v, name)?;
    let item = text(need(m, "item")?);
    let ask = text(need(m, "ask")?);
    let (item_json, ask_json) = (need(m, "item")?.clone(), need(m, "ask")?.clone());
    let rec = v.as_object_mut().and_then(|m| m.remove("rec"));
    let m = obj(&v, name)?;
    let record = match rec {
        None | Some(Json::Null) => None,
        Some(Json::Object(r)) => {
            let mut full = Map::new();
            full.insert("item".into(), item_json);
            full.insert("ask".into(), ask_json);
            for (k, x) in r {
                full.insert(k, x);
            }
            Some(Arc::new(record_of(full)))
        }
        Some(_) => return Err("a handoff's record: not an object".into()),
    };
    let bound = m.get("bound");
    let gkcx = pair_of(m.get("gkcx"), "gkcx")?;
    let over = pair_of(m.get("over"), "over")?;
    let at = |v: &Option<Vec<Json>>, i: usize| -> Result<Option<f64>, Bad> {
        opt_number(v.as_ref().and_then(|a| a.get(i)), "a time")
    };
    let nth = |v: &Option<Vec<Json>>, i: usize| -> Result<Option<Vec<u8>>, Bad> {
        match v {
            None => Ok(None),
            Some(a) => match a.get(i) {
                None => Err("IndexError: list index out of range".into()),
                Some(Json::Null) => Ok(None),
                Some(x) => Ok(Some(text(x))),
            },
        }
    };
    Ok(StoredHandoff {
        item,
        ask,
        exec_ask: truthy(Some(need(m, "exec")?)),
        record,
        bound: truthy(bound),
        holder: match bound {
            Some(Json::String(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        },
        superseded_by: opt_text(m, "superseded_by"),
        relay_of: opt_text(m, "relay_of"),
        relayed_by: opt_text(m, "relayed_by"),
        cleared_by: opt_text(m, "cleared_by"),
        passed_rb: opt_text(m, "passed_rb"),
        gk_cancel: nth(&gkcx, 0)?,
        gk_cancel_why: nth(&gkcx, 1)?,
        gk_cancel_at: if gkcx.is_some() {
            nth(&gkcx, 2).map(|_| ())?;
            at(&gkcx, 2)?
        } else {
            None
        },
        overdue: nth(&over, 0)?,
        overdue_at: if over.is_some() {
            nth(&over, 1).map(|_| ())?;
            at(&over, 1)?
        } else {
            None
        },
    })
}

fn readback_of(v: &Json, name: &[u8]) -> Result<StoredReadback, Bad> {
    let m = obj(v, name)?;
    Ok(StoredReadback {
        ho: text(need(m, "ho")?),
        passed: truthy(Some(need(m, "ok")?)),
        exp: opt_text(m, "exp"),
        refused: truthy(m.get("refused")),
    })
}

/// A handoff's thread record from its list form: `[line, id, from, to, item, exp, due, closes, cancels, wrong,
/// acked, ran]`, 4 to 12 fields.
pub fn thread_record_of(v: &Json) -> Result<Handoff, Bad> {
    let malformed = |e: String| format!("malformed handoff record: {e}");
    let items = v.as_array().ok_or_else(|| malformed("not a list".into()))?;
    if !(4..=12).contains(&items.len()) {
        return Err(malformed(format!(
            "a handoff record has 4 to 12 fields, not {}",
            items.len()
        )));
    }
    let at = |i: usize| items.get(i).unwrap_or(&Json::Null);
    let list = |i: usize| -> Vec<Json> {
        match at(i) {
            Json::Array(a) => a.clone(),
            _ => Vec::new(),
        }
    };
    let opt = |i: usize| match at(i) {
        Json::Null => None,
        x => Some(text(x)),
    };
    let two = |x: &Json| -> Result<(Vec<u8>, Vec<u8>), Bad> {
        match x.as_array().map(Vec::as_slice) {
            Some([a, b]) => Ok((text(a), text(b))),
            _ => Err(malformed("a pair of two".into())),
        }
    };
    let closes = list(7).iter().map(two).collect::<Result<_, _>>()?;
    let cancels = list(8).iter().map(text).collect();
    let wrong = list(9)
        .iter()
        .map(|w| match w.as_array().map(Vec::as_slice) {
            Some([k, i, f, t]) => Ok((
                int(k, "a line").map_err(malformed)?,
                text(i),
                text(f),
                text(t),
            )),
            _ => Err(malformed("a wrong cancel of four".into())),
        })
        .collect::<Result<_, _>>()?;
    let ran = if truthy(Some(at(11))) {
        Some(two(at(11))?)
    } else {
        None
    };
    Ok(Handoff {
        line_no: int(at(0), "a line").map_err(malformed)?,
        id: text(at(1)),
        sender: text(at(2)),
        receiver: text(at(3)),
        item: opt(4),
        exp: opt(5),
        due: opt(6),
        closes,
        cancels,
        wrong,
        acked: truthy(Some(at(10))),
        ran,
    })
}

// ---------------------------------------------------------------- writing JSON

fn key(out: &mut Vec<u8>, first: &mut bool, k: &str) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    json::string(out, k.as_bytes());
    out.push(b':');
}

fn opt_string(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(s) => json::string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_float(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(f) => json::float(out, f),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_problem(out: &mut Vec<u8>, p: &Finding) {
    out.extend_from_slice(b"{\"code\":");
    json::string(out, p.code.as_bytes());
    out.extend_from_slice(b",\"tier\":");
    opt_string(out, p.tier.as_deref().map(str::as_bytes));
    out.extend_from_slice(b",\"slot\":");
    opt_string(out, p.slot.as_deref());
    out.extend_from_slice(b",\"expected\":");
    opt_string(out, p.expected.as_deref());
    out.extend_from_slice(b",\"got\":");
    opt_string(out, p.got.as_deref());
    out.extend_from_slice(b",\"message\":");
    json::string(out, &p.message);
    out.push(b'}');
}

// The ids an entry points at are written first when it has them (a line's `re`; a handoff's `cleared_by`,
// `passed_rb`; a readback's `ho` always): the Redis load script reads them off the entry's opening instead of decoding
// the entry (`redis_store._LOAD_FN`'s `pointers`).

fn write_line(l: &StoredLine) -> Vec<u8> {
    // sized for what it nearly always holds: grown from empty, it was reallocated four or five times a line
    let text = l.text.as_ref().map_or(0, Vec::len);
    let mut out = Vec::with_capacity(160 + text + l.problems.len() * 160);
    out.push(b'{');
    let mut first = true;
    if let Some(re) = &l.re {
        key(&mut out, &mut first, "re");
        json::string(&mut out, re);
    }
    key(&mut out, &mut first, "d");
    json::string(&mut out, &l.digest);
    key(&mut out, &mut first, "t");
    json::string(&mut out, &l.typ);
    key(&mut out, &mut first, "v");
    json::string(&mut out, &l.verdict);
    key(&mut out, &mut first, "at");
    json::float(&mut out, json::round3(l.at));
    if let Some(r) = &l.reason {
        key(&mut out, &mut first, "r");
        json::string(&mut out, r);
    }
    if !l.problems.is_empty() {
        key(&mut out, &mut first, "p");
        out.push(b'[');
        for (i, p) in l.problems.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_problem(&mut out, p);
        }
        out.push(b']');
    }
    if let Some(x) = &l.text {
        key(&mut out, &mut first, "x");
        json::string(&mut out, x);
    }
    if let Some(a) = &l.answered {
        key(&mut out, &mut first, "ans");
        json::string(&mut out, a);
    }
    if let Some(u) = l.unanswered_at {
        key(&mut out, &mut first, "una");
        json::float(&mut out, json::round3(u));
    }
    out.push(b'}');
    out
}

fn write_handoff(h: &StoredHandoff) -> Vec<u8> {
    let mut out = b"{".to_vec();
    let mut first = true;
    for (k, v) in [("cleared_by", &h.cleared_by), ("passed_rb", &h.passed_rb)] {
        if let Some(v) = v.as_deref().filter(|s| !s.is_empty()) {
            key(&mut out, &mut first, k);
            json::string(&mut out, v);
        }
    }
    key(&mut out, &mut first, "item");
    json::string(&mut out, &h.item);
    key(&mut out, &mut first, "ask");
    json::string(&mut out, &h.ask);
    key(&mut out, &mut first, "exec");
    out.extend_from_slice(if h.exec_ask { b"true" } else { b"false" });
    if let Some(r) = &h.record {
        // checked when the handoff was: the handoff's copy needs no signature; (item, ask) not written twice
        key(&mut out, &mut first, "rec");
        out.push(b'{');
        let mut rf = true;
        if !(r.item == h.item && r.ask == h.ask) {
            key(&mut out, &mut rf, "item");
            json::string(&mut out, &r.item);
            key(&mut out, &mut rf, "ask");
            json::string(&mut out, &r.ask);
        }
        key(&mut out, &mut rf, "values");
        json::object(&mut out, &r.values);
        if !r.resolved.is_empty() {
            key(&mut out, &mut rf, "resolved");
            out.push(b'{');
            for (i, (k, v)) in r.resolved.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::string(&mut out, k);
                out.push(b':');
                json::string(&mut out, v);
            }
            out.push(b'}');
        }
        if let Some(acc) = &r.expect_acc {
            key(&mut out, &mut rf, "expect_acc");
            out.push(b'[');
            for (i, a) in acc.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::string(&mut out, a);
            }
            out.push(b']');
        }
        out.push(b'}');
    }
    if h.bound {
        key(&mut out, &mut first, "bound");
        match h.holder.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => json::string(&mut out, s),
            None => out.extend_from_slice(b"true"),
        }
    }
    for (k, v) in [
        ("superseded_by", &h.superseded_by),
        ("relay_of", &h.relay_of),
        ("relayed_by", &h.relayed_by),
    ] {
        if let Some(v) = v.as_deref().filter(|s| !s.is_empty()) {
            key(&mut out, &mut first, k);
            json::string(&mut out, v);
        }
    }
    if let Some(cx) = &h.gk_cancel {
        key(&mut out, &mut first, "gkcx");
        out.push(b'[');
        json::string(&mut out, cx);
        out.push(b',');
        opt_string(&mut out, h.gk_cancel_why.as_deref());
        out.push(b',');
        opt_float(&mut out, h.gk_cancel_at);
        out.push(b']');
    }
    if let Some(kind) = &h.overdue {
        key(&mut out, &mut first, "over");
        out.push(b'[');
        json::string(&mut out, kind);
        out.push(b',');
        opt_float(&mut out, h.overdue_at);
        out.push(b']');
    }
    out.push(b'}');
    out
}

fn write_readback(r: &StoredReadback) -> Vec<u8> {
    let mut out = b"{\"ho\":".to_vec();
    json::string(&mut out, &r.ho);
    out.extend_from_slice(if r.passed {
        b",\"ok\":true"
    } else {
        b",\"ok\":false"
    });
    if let Some(exp) = r.exp.as_deref().filter(|s| !s.is_empty()) {
        out.extend_from_slice(b",\"exp\":");
        json::string(&mut out, exp);
    }
    if r.refused {
        out.extend_from_slice(b",\"refused\":true");
    }
    out.push(b'}');
    out
}

/// A handoff's thread record in its list form, empty trailing fields after the item dropped.
pub fn write_thread_record(h: &Handoff) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(96);
    out.push(b'[');
    // the record's fields in order, written into one buffer; the trailing ones past the fifth that are empty (null,
    // 0 or []) are left off: `keep` is the length through the last field kept
    let mut keep = 1;
    let list = |out: &mut Vec<u8>, items: &[&[u8]]| {
        out.push(b'[');
        for (i, v) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json::string(out, v);
        }
        out.push(b']');
    };
    for field in 0..12 {
        if field > 0 {
            out.push(b',');
        }
        let at = out.len();
        match field {
            0 => {
                let _ = write!(out, "{}", h.line_no);
            }
            1 => json::string(&mut out, &h.id),
            2 => json::string(&mut out, &h.sender),
            3 => json::string(&mut out, &h.receiver),
            4 => opt_string(&mut out, h.item.as_deref()),
            5 => opt_string(&mut out, h.exp.as_deref()),
            6 => opt_string(&mut out, h.due.as_deref()),
            7 => {
                out.push(b'[');
                for (i, (a, b)) in h.closes.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    list(&mut out, &[a, b]);
                }
                out.push(b']');
            }
            8 => {
                let cancels: Vec<&[u8]> = h.cancels.iter().map(Vec::as_slice).collect();
                list(&mut out, &cancels);
            }
            9 => {
                out.push(b'[');
                for (i, (line, cx, from, to)) in h.wrong.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let _ = write!(out, "[{line},");
                    json::string(&mut out, cx);
                    out.push(b',');
                    json::string(&mut out, from);
                    out.push(b',');
                    json::string(&mut out, to);
                    out.push(b']');
                }
                out.push(b']');
            }
            10 => out.push(if h.acked { b'1' } else { b'0' }),
            _ => match &h.ran {
                Some((a, b)) => list(&mut out, &[a, b]),
                None => out.extend_from_slice(b"null"),
            },
        }
        let written = &out[at..];
        if field < 5 || !(written == b"null" || written == b"0" || written == b"[]") {
            keep = out.len();
        }
    }
    out.truncate(keep);
    out.push(b']');
    out
}

// ---------------------------------------------------------------- the state

fn kind(name: &[u8]) -> (&[u8], &[u8]) {
    if name.len() >= 2 && name[1] == b':' {
        name.split_at(2)
    } else {
        (name, b"")
    }
}

fn field_name(prefix: &[u8], id: &[u8]) -> Vec<u8> {
    let mut n = prefix.to_vec();
    n.extend_from_slice(id);
    n
}

impl State {
    /// A new conversation's state: nothing loaded.
    pub fn new() -> State {
        State::default()
    }

    /// A state from stored fields (all of a conversation's, or the part a batch loaded). No header: a new
    /// conversation. Another version, or an entry that does not read, is an error naming it.
    pub fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<State, Bad> {
        let mut st = State::new();
        let mut threads = Vec::new();
        let mut header = None;
        for (name, raw) in fields {
            if name == HEADER {
                header = Some(parse(raw, name)?);
                continue;
            }
            let (k, id) = kind(name);
            match k {
                b"l:" => {
                    st.lines
                        .insert(id.to_vec(), Arc::new(line_of(&parse(raw, name)?, name)?));
                }
                b"o:" => {
                    st.handoffs
                        .insert(id.to_vec(), Arc::new(handoff_of(parse(raw, name)?, name)?));
                }
                b"r:" => {
                    st.readbacks.insert(
                        id.to_vec(),
                        Arc::new(readback_of(&parse(raw, name)?, name)?),
                    );
                }
                b"t:" => threads.push(thread_record_of(&parse(raw, name)?)?),
                _ => {} // the owner epoch (`e`, the store's fence) and fields of no kind: not the decision's
            }
        }
        if let Some(h) = header {
            let m = obj(&h, HEADER)?;
            let v = m.get("v").unwrap_or(&Json::Null);
            if v.as_f64() != Some(STATE_VERSION as f64) {
                let shown = if let Json::String(s) = v {
                    let mut o = Vec::new();
                    rw1::pytext::repr(s.as_bytes(), &mut o);
                    String::from_utf8_lossy(&o).into_owned()
                } else {
                    String::from_utf8_lossy(&json::py_str(v)).into_owned()
                };
                return Err(format!(
                    "conversation state version {shown} is not {STATE_VERSION}"
                ));
            }
            st.seq = int(need(m, "seq")?, "seq")?;
            st.base_open = int(need(m, "open")?, "open")?;
        }
        threads.sort_by_key(|h| h.line_no); // line order, as the whole tracker keeps them
        st.tracker = Tracker::partial(threads, st.seq);
        st.open_at_load = st
            .handoffs
            .keys()
            .filter(|h| st.is_open(h))
            .cloned()
            .collect();
        Ok(st)
    }

    // ------------------------------------------------------------ open handoffs

    pub fn is_open(&self, ho: &[u8]) -> bool {
        match self.handoffs.get(ho) {
            None => false,
            Some(h) if h.superseded_by.is_some() => false,
            Some(_) => self.tracker.handoff(ho).is_some_and(|t| !t.closed()),
        }
    }

    /// How the open count moved since the load.
    pub fn open_delta(&self) -> i64 {
        let now = self.handoffs.keys().filter(|h| self.is_open(h)).count();
        now as i64 - self.open_at_load.len() as i64
    }

    pub fn open_count(&self) -> i64 {
        self.base_open + self.open_delta()
    }

    // ------------------------------------------------------------ fields

    pub fn mark(&mut self, prefix: &[u8], id: &[u8]) {
        self.dirty.insert(field_name(prefix, id));
    }

    /// The thread records of these handoffs may have changed (those loaded or created).
    pub fn mark_thread(&mut self, ids: &[Option<&[u8]>]) {
        for id in ids.iter().flatten() {
            if self.handoffs.contains_key(*id) {
                self.dirty.insert(field_name(b"t:", id));
            }
        }
        self.dirty.insert(HEADER.to_vec());
    }

    pub fn header(&self) -> Vec<u8> {
        format!(
            "{{\"v\":{STATE_VERSION},\"seq\":{},\"open\":{}}}",
            self.seq,
            self.open_count()
        )
        .into_bytes()
    }

    /// One field's value as stored (None: the entry does not exist; an unknown kind: an error).
    pub fn field(&self, name: &[u8]) -> Result<Option<Vec<u8>>, Bad> {
        if name == HEADER {
            return Ok(Some(self.header()));
        }
        let (k, id) = kind(name);
        Ok(match k {
            b"l:" => self.lines.get(id).map(|l| write_line(l)),
            b"o:" => self.handoffs.get(id).map(|h| write_handoff(h)),
            b"r:" => self.readbacks.get(id).map(|r| write_readback(r)),
            b"t:" => self.tracker.handoff(id).map(write_thread_record),
            _ => {
                let mut shown = Vec::new();
                rw1::pytext::repr(name, &mut shown);
                return Err(format!(
                    "not a state field: {}",
                    String::from_utf8_lossy(&shown)
                ));
            }
        })
    }

    /// What a save writes: every field marked, and the header.
    pub fn changed_fields(&self) -> Result<Fields, Bad> {
        let mut out = vec![(HEADER.to_vec(), self.header())];
        for name in &self.dirty {
            if name == HEADER {
                continue;
            }
            if let Some(v) = self.field(name)? {
                out.push((name.clone(), v));
            }
        }
        Ok(out)
    }

    /// Every field the state holds, the header first.
    pub fn all_fields(&self) -> Fields {
        let mut out = vec![(HEADER.to_vec(), self.header())];
        for id in self.lines.keys() {
            out.push((field_name(b"l:", id), write_line(&self.lines[id])));
        }
        for id in self.handoffs.keys() {
            out.push((field_name(b"o:", id), write_handoff(&self.handoffs[id])));
        }
        for id in self.readbacks.keys() {
            out.push((field_name(b"r:", id), write_readback(&self.readbacks[id])));
        }
        for id in self.handoffs.keys() {
            if let Some(t) = self.tracker.handoff(id) {
                out.push((field_name(b"t:", id), write_thread_record(t)));
            }
        }
        out
    }

    /// The ids a save puts in the collection queue: the lines it decided (not handoffs: those once closed), and the
    /// handoffs closed now among those it changed. Sorted.
    pub fn collection(&self) -> Vec<Vec<u8>> {
        let mut out = BTreeSet::new();
        for name in &self.dirty {
            let (k, id) = kind(name);
            let line = k == b"l:" && !self.handoffs.contains_key(id);
            if line || ((k == b"o:" || k == b"t:") && !self.is_open(id)) {
                out.insert(id.to_vec());
            }
        }
        out.into_iter().collect()
    }

    /// What the Redis save script reads of this conversation after its keys (`RedisStore.save`), in its order:
    /// the writer's epoch (`""`: unfenced), the TTL (`ttl_open` while a handoff is open, else `ttl`), `"1"` for
    /// a state converted from a version-1 document, the scores of now and of the oldest entry kept, how many
    /// entries the collection may take (`collect_per_save` more than twice the ids queued), how many are queued,
    /// the ids queued ([`State::collection`]), then each changed field's name and value
    /// ([`State::changed_fields`]).
    pub fn save_args(
        &self,
        epoch: Option<i64>,
        ttl_open: i64,
        ttl: i64,
        collect_per_save: i64,
    ) -> Result<SaveArgs, Bad> {
        let queued = self.collection();
        Ok(SaveArgs {
            epoch,
            ttl: if self.open_count() > 0 { ttl_open } else { ttl },
            legacy: self.legacy,
            collect: collect_per_save + 2 * queued.len() as i64,
            queued,
            fields: self.changed_fields()?,
        })
    }

    // ------------------------------------------------------------ what the decision reads

    pub fn line_info(&self, id: &[u8]) -> Option<LineInfo> {
        self.lines.get(id).cloned()
    }

    /// A handoff as the decision reads it: its id and the entry, shared.
    pub fn handoff_info(&self, id: &[u8]) -> Option<HandoffInfo> {
        let entry = self.handoffs.get(id)?;
        Some(HandoffInfo {
            id: id.to_vec(),
            entry: Arc::clone(entry),
        })
    }

    /// A readback as the decision reads it: its id and the entry, shared.
    pub fn readback_info(&self, id: &[u8]) -> Option<ReadbackInfo> {
        self.readbacks.get(id).map(|r| ReadbackInfo {
            id: id.to_vec(),
            entry: Arc::clone(r),
        })
    }

    pub fn flags(&self, ho: &[u8]) -> Option<(bool, bool)> {
        self.tracker
            .handoff(ho)
            .map(|h| (h.closed(), !h.cancels.is_empty()))
    }

    // ------------------------------------------------------------ what effects change

    pub fn remember_line(&mut self, id: &[u8], line: StoredLine) {
        self.lines.insert(id.to_vec(), Arc::new(line));
        self.mark(b"l:", id);
    }

    pub fn open_handoff(&mut self, id: &[u8], handoff: StoredHandoff) {
        self.handoffs.insert(id.to_vec(), Arc::new(handoff));
        self.mark(b"o:", id);
    }

    fn handoff_mut(&mut self, ho: &[u8]) -> Result<&mut StoredHandoff, Bad> {
        self.dirty.insert(field_name(b"o:", ho));
        self.handoffs
            .get_mut(ho)
            .map(Arc::make_mut)
            .ok_or_else(|| format!("KeyError: {}", repr(ho)))
    }

    pub fn supersede(&mut self, ho: &[u8], by: &[u8]) -> Result<(), Bad> {
        let h = self.handoff_mut(ho)?;
        h.superseded_by = Some(by.to_vec());
        h.bound = false;
        Ok(())
    }

    pub fn record_readback(&mut self, id: &[u8], rb: StoredReadback) {
        self.readbacks.insert(id.to_vec(), Arc::new(rb));
        self.mark(b"r:", id);
    }

    pub fn pass_readback(&mut self, ho: &[u8], rb: &[u8]) -> Result<(), Bad> {
        self.handoff_mut(ho)?.passed_rb = Some(rb.to_vec());
        Ok(())
    }

    pub fn refuse_readback(&mut self, rb: &[u8]) -> Result<(), Bad> {
        self.dirty.insert(field_name(b"r:", rb));
        Arc::make_mut(
            self.readbacks
                .get_mut(rb)
                .ok_or_else(|| format!("KeyError: {}", repr(rb)))?,
        )
        .refused = true;
        Ok(())
    }

    pub fn clear(&mut self, ho: &[u8], rb: &[u8]) -> Result<(), Bad> {
        self.handoff_mut(ho)?.cleared_by = Some(rb.to_vec());
        Ok(())
    }

    /// Feed the line to the thread, as the conversation's next line.
    pub fn feed(&mut self, msg: &Twin<'_>) -> Result<(), Bad> {
        self.seq += 1;
        self.tracker.feed(msg, Some(self.seq))?;
        // what a line can change in the thread: its own handoff, the one it replies to, and for an answer to a
        // cancel, the handoff the cancel names
        let id = msg.id.as_deref();
        let re = msg.re.as_ref().map(|v| v.py_str().into_owned());
        let target = re
            .as_deref()
            .and_then(|r| self.lines.get(r))
            .and_then(|l| l.re.clone());
        self.mark_thread(&[id, re.as_deref(), target.as_deref()]);
        Ok(())
    }

    /// The handoffs (and questions) whose place in the lifecycle indexes feeding `msg` may have changed: a close or a
    /// cancel names its handoff, an answer to a cancel the handoff the cancel names (read after the feed).
    pub fn fed_touches(&self, msg: &Twin<'_>) -> Option<Vec<u8>> {
        let re = msg.re.as_ref().map(|v| v.py_str().into_owned())?;
        match msg.typ.as_deref() {
            Some(b"DN" | b"UN" | b"FL" | b"CX") => Some(re),
            Some(b"AN") => {
                let target = self.lines.get(&re[..])?;
                if target.typ == b"CX" {
                    target.re.clone()
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// The state's part of a release: the handoff no longer holds the binding.
    pub fn unbind(&mut self, ho: &[u8]) {
        if let Some(h) = self.handoffs.get_mut(ho).map(Arc::make_mut) {
            h.bound = false;
            self.dirty.insert(field_name(b"o:", ho));
        }
    }

    pub fn relay(&mut self, ho: &[u8], by: &[u8]) -> Result<(), Bad> {
        self.handoff_mut(ho)?.relayed_by = Some(by.to_vec());
        Ok(())
    }

    fn line_mut(&mut self, id: &[u8]) -> Result<&mut StoredLine, Bad> {
        self.dirty.insert(field_name(b"l:", id));
        self.lines
            .get_mut(id)
            .map(Arc::make_mut)
            .ok_or_else(|| format!("KeyError: {}", repr(id)))
    }

    pub fn answer_question(&mut self, aq: &[u8], by: &[u8]) -> Result<(), Bad> {
        self.line_mut(aq)?.answered = Some(by.to_vec());
        Ok(())
    }

    pub fn mark_unanswered(&mut self, aq: &[u8], at: f64) -> Result<(), Bad> {
        self.line_mut(aq)?.unanswered_at = Some(at);
        Ok(())
    }

    pub fn gatekeeper_cancel(
        &mut self,
        ho: &[u8],
        cx: &[u8],
        why: &[u8],
        at: f64,
    ) -> Result<(), Bad> {
        let h = self.handoff_mut(ho)?;
        h.gk_cancel = Some(cx.to_vec());
        h.gk_cancel_why = Some(why.to_vec());
        h.gk_cancel_at = Some(at);
        Ok(())
    }

    pub fn mark_overdue(&mut self, ho: &[u8], kind: &[u8], at: f64) -> Result<(), Bad> {
        let h = self.handoff_mut(ho)?;
        h.overdue = Some(kind.to_vec());
        h.overdue_at = Some(at);
        Ok(())
    }
}

fn repr(s: &[u8]) -> String {
    let mut out = Vec::new();
    rw1::pytext::repr(s, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = Vec<u8>> {
        "[a-z0-9:\"\\\\ \u{e9}\u{2028}\t-]{0,12}".prop_map(String::into_bytes)
    }

    fn opt() -> impl Strategy<Value = Option<Vec<u8>>> {
        proptest::option::of(text())
    }

    fn time() -> impl Strategy<Value = f64> {
        prop_oneof![
            0.0..2e9f64,
            Just(1_733_280_000.062_5),
            Just(1e-7),
            Just(1e17)
        ]
    }

    fn finding() -> impl Strategy<Value = Finding> {
        (text(), opt(), text(), opt(), opt(), opt()).prop_map(
            |(code, tier, message, slot, expected, got)| Finding {
                code: String::from_utf8(code).unwrap().into(),
                tier: tier.map(|t| String::from_utf8(t).unwrap().into()),
                message,
                slot,
                expected,
                got,
            },
        )
    }

    fn line() -> impl Strategy<Value = StoredLine> {
        (
            (text(), text(), text(), opt(), time(), opt()),
            (
                proptest::collection::vec(finding(), 0..3),
                opt(),
                opt(),
                proptest::option::of(time()),
            ),
        )
            .prop_map(
                |((digest, typ, verdict, reason, at, re), (problems, text, answered, una))| {
                    StoredLine {
                        digest,
                        typ,
                        verdict,
                        reason,
                        at: json::round3(at),
                        re,
                        problems,
                        text,
                        answered,
                        unanswered_at: una.map(json::round3),
                    }
                },
            )
    }

    fn json_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(Json::from),
            (-1e20..1e20f64)
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)),
            "[a-z \"\u{e9}]{0,6}".prop_map(Json::String),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            proptest::collection::vec(inner, 0..3).prop_map(Json::Array)
        })
    }

    fn record() -> impl Strategy<Value = StoredRecord> {
        (
            text(),
            text(),
            proptest::collection::vec(("[a-z]{1,5}", json_value()), 0..4),
            proptest::collection::vec((text(), text()), 0..3),
            proptest::option::of(proptest::collection::vec(text(), 0..3)),
        )
            .prop_map(|(item, ask, values, resolved, expect_acc)| {
                let mut resolved_map = IndexMap::new();
                for (k, v) in resolved {
                    resolved_map.insert(k, v); // a JSON object: one value per key
                }
                StoredRecord {
                    item,
                    ask,
                    values: values.into_iter().collect(),
                    resolved: resolved_map.into_iter().collect(),
                    expect_acc,
                    signature: None,
                }
            })
    }

    fn handoff() -> impl Strategy<Value = StoredHandoff> {
        (
            (
                text(),
                text(),
                any::<bool>(),
                proptest::option::of(record()),
                any::<bool>(),
                opt(),
            ),
            (opt(), opt(), opt(), opt(), opt()),
            (
                opt(),
                opt(),
                proptest::option::of(time()),
                opt(),
                proptest::option::of(time()),
            ),
        )
            .prop_map(|(a, b, c)| {
                let (item, ask, exec_ask, record, bound, holder) = a;
                let nonempty = |v: Option<Vec<u8>>| v.filter(|s| !s.is_empty());
                let (superseded_by, relay_of, relayed_by, cleared_by, passed_rb) = b;
                let (gk_cancel, gk_cancel_why, gk_cancel_at, overdue, overdue_at) = c;
                StoredHandoff {
                    item,
                    ask,
                    exec_ask,
                    record: record.map(Arc::new),
                    bound,
                    holder: if bound { nonempty(holder) } else { None },
                    superseded_by: nonempty(superseded_by),
                    relay_of: nonempty(relay_of),
                    relayed_by: nonempty(relayed_by),
                    cleared_by: nonempty(cleared_by),
                    passed_rb: nonempty(passed_rb),
                    gk_cancel_why: gk_cancel.as_ref().and(gk_cancel_why),
                    gk_cancel_at: gk_cancel.as_ref().and(gk_cancel_at),
                    gk_cancel,
                    overdue_at: overdue.as_ref().and(overdue_at),
                    overdue,
                }
            })
    }

    fn thread_record() -> impl Strategy<Value = Handoff> {
        (
            (1i64..1000, text(), text(), text(), opt(), opt(), opt()),
            (
                proptest::collection::vec((text(), text()), 0..2),
                proptest::collection::vec(text(), 0..2),
                proptest::collection::vec((1i64..9, text(), text(), text()), 0..2),
                any::<bool>(),
                proptest::option::of((text(), text())),
            ),
        )
            .prop_map(|(a, b)| {
                let (line_no, id, sender, receiver, item, exp, due) = a;
                let (closes, cancels, wrong, acked, ran) = b;
                Handoff {
                    line_no,
                    id,
                    sender,
                    receiver,
                    item,
                    exp,
                    due,
                    closes,
                    cancels,
                    wrong,
                    acked,
                    ran,
                }
            })
    }

    /// A thread record as a list of fields each written on its own, the trailing empty ones past the fifth dropped:
    /// what `write_thread_record` must write (it writes them into one buffer).
    fn thread_record_field_by_field(h: &Handoff) -> Vec<u8> {
        let s = |v: &[u8]| {
            let mut o = Vec::new();
            json::string(&mut o, v);
            o
        };
        let o = |v: &Option<Vec<u8>>| v.as_deref().map_or_else(|| b"null".to_vec(), s);
        let list = |items: Vec<Vec<u8>>| [&b"["[..], &items.join(&b","[..]), b"]"].concat();
        let mut fields = vec![
            h.line_no.to_string().into_bytes(),
            s(&h.id),
            s(&h.sender),
            s(&h.receiver),
            o(&h.item),
            o(&h.exp),
            o(&h.due),
            list(
                h.closes
                    .iter()
                    .map(|(a, b)| list(vec![s(a), s(b)]))
                    .collect(),
            ),
            list(h.cancels.iter().map(|c| s(c)).collect()),
            list(
                h.wrong
                    .iter()
                    .map(|(k, i, f, t)| list(vec![k.to_string().into_bytes(), s(i), s(f), s(t)]))
                    .collect(),
            ),
            if h.acked {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            },
            match &h.ran {
                Some((a, b)) => list(vec![s(a), s(b)]),
                None => b"null".to_vec(),
            },
        ];
        while fields.len() > 5 && matches!(&fields[fields.len() - 1][..], b"null" | b"0" | b"[]") {
            fields.pop();
        }
        list(fields)
    }

    proptest! {
        /// Every entry the state writes reads back as itself, and writes again to the same bytes.
        /// A thread record written into one buffer is the record written field by field.
        #[test]
        fn a_thread_record_is_written_as_field_by_field(t in thread_record(), empty_tail in any::<bool>()) {
            let mut t = t;
            if empty_tail {
                (t.exp, t.due, t.closes, t.cancels, t.wrong, t.acked, t.ran) = (None, None, vec![], vec![], vec![], false, None);
            }
            prop_assert_eq!(write_thread_record(&t), thread_record_field_by_field(&t));
        }

        #[test]
        fn what_the_state_writes_it_reads_back(
            lines in proptest::collection::vec(line(), 0..3),
            handoffs in proptest::collection::vec(handoff(), 0..3),
            rbs in proptest::collection::vec((text(), any::<bool>(), opt(), any::<bool>()), 0..3),
            threads in proptest::collection::vec(thread_record(), 0..3),
        ) {
            let mut fields: Fields = Vec::new();
            for (i, l) in lines.iter().enumerate() {
                fields.push((format!("l:L{i}").into_bytes(), write_line(l)));
            }
            for (i, h) in handoffs.iter().enumerate() {
                fields.push((format!("o:O{i}").into_bytes(), write_handoff(h)));
            }
            for (i, (ho, passed, exp, refused)) in rbs.iter().enumerate() {
                let rb = StoredReadback { ho: ho.clone(), passed: *passed, exp: exp.clone().filter(|e| !e.is_empty()), refused: *refused };
                fields.push((format!("r:R{i}").into_bytes(), write_readback(&rb)));
            }
            for t in &threads {
                fields.push((field_name(b"t:", &t.id), write_thread_record(t)));
            }
            let st = State::from_fields(fields.iter().map(|(k, v)| (&k[..], &v[..]))).unwrap();
            for (i, l) in lines.iter().enumerate() {
                prop_assert_eq!(&*st.lines[format!("L{i}").as_bytes()], l);
            }
            for (i, h) in handoffs.iter().enumerate() {
                prop_assert_eq!(&*st.handoffs[format!("O{i}").as_bytes()], h);
            }
            for (name, value) in &fields {
                if name.starts_with(b"t:") && st.tracker.handoff(&name[2..]).map(write_thread_record).as_ref() != Some(value) {
                    continue; // two records of one id: the latest stands
                }
                let written = st.field(name).unwrap();
                prop_assert_eq!(written.as_ref(), Some(value), "{}", String::from_utf8_lossy(name));
            }
        }

        /// Any bytes in any field read as a state or as an error naming the field, never a panic.
        #[test]
        fn any_field_reads_or_is_refused(name in prop_oneof![Just("h"), Just("l:x"), Just("o:x"), Just("r:x"), Just("t:x")], raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = State::from_fields([(name.as_bytes(), &raw[..])]);
        }

        /// JSON of any shape in any field: read or refused, never a panic.
        #[test]
        fn any_json_reads_or_is_refused(name in prop_oneof![Just("h"), Just("l:x"), Just("o:x"), Just("r:x"), Just("t:x")], v in json_value()) {
            let mut raw = Vec::new();
            json::value(&mut raw, &v);
            let _ = State::from_fields([(name.as_bytes(), &raw[..])]);
        }
    }

    #[test]
    fn a_header_of_another_version_is_refused_by_name() {
        let err =
            State::from_fields([(HEADER, &b"{\"v\":\"2\",\"seq\":0,\"open\":0}"[..])]).unwrap_err();
        assert_eq!(err, "conversation state version '2' is not 2");
        assert!(State::from_fields([(HEADER, &b"{\"v\":2.0,\"seq\":3,\"open\":1}"[..])]).is_ok());
    }
}
