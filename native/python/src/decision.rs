//! The bindings of the `gk-engine` crate (the gatekeeper's decision engine): plain Python values in and out, the
//! logic the crate's. Findings cross as `(code, tier, message, slot, expected, got)` tuples, as rw1's do.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::{guarded, problems, string, text, Grammar};

/// The gate's input rules on a record value: `(text, [])`, or `(None, findings)` for a value that is `invalid`.
#[pyfunction]
fn screen<'py>(
    py: Python<'py>,
    raw: &Bound<'py, PyBytes>,
    max_bytes: u64,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyList>)> {
    match guarded(|| engine::gate::screen(raw.as_bytes(), max_bytes))? {
        Ok(text) => Ok((PyString::new(py, text).into_any(), PyList::empty(py))),
        Err(found) => Ok((py.None().into_bound(py), problems(py, &found)?)),
    }
}

/// The finding of a conversation id the gate refuses (a control, format, separator... character), or None.
#[pyfunction]
fn conversation_problem<'py>(
    py: Python<'py>,
    conversation: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyList>> {
    let conversation = text(conversation)?;
    let found = guarded(|| engine::gate::conversation_problem(&conversation))?;
    problems(py, found.as_slice())
}

/// Whether a message id's number is in the range the gatekeeper keeps for its own lines.
#[pyfunction]
fn is_reserved_id(id: &Bound<'_, PyString>) -> PyResult<bool> {
    Ok(engine::rules::is_reserved_id(&text(id)?))
}

/// The number of a message id `<sender>-<n>` (one above the reserved range for any longer number), or None.
#[pyfunction]
fn id_number(id: &Bound<'_, PyString>) -> PyResult<Option<u64>> {
    Ok(engine::rules::id_number(&text(id)?))
}

/// The finding of an answer whose `val` (as the line shows it) is not of the shape its question's `need` asks
/// (`allowed`: the question's `opts`; `tail`: the answer's), as a list of none or one.
#[pyfunction]
fn answer_problems<'py>(
    py: Python<'py>,
    an_id: &Bound<'py, PyString>,
    aq_id: &Bound<'py, PyString>,
    need: &Bound<'py, PyString>,
    val: &Bound<'py, PyString>,
    allowed: Vec<Bound<'py, PyString>>,
    tail: Option<Bound<'py, PyString>>,
) -> PyResult<Bound<'py, PyList>> {
    let (need, val) = (text(need)?, text(val)?);
    let allowed = allowed.iter().map(text).collect::<PyResult<Vec<_>>>()?;
    let allowed: Vec<&[u8]> = allowed.iter().map(|a| &a[..]).collect();
    let tail = tail.as_ref().map(text).transpose()?;
    let (an_id, aq_id) = (text(an_id)?, text(aq_id)?);
    let found = guarded(|| {
        engine::rules::answer_wants(&need, &val, &allowed, tail.as_deref())
            .map(|wants| engine::rules::answer_problem(&an_id, &aq_id, &need, &val, &wants))
    })?;
    problems(py, found.as_slice())
}

/// Whether `YYYYMMDD` names no day of the calendar (as `time.strptime(text, "%Y%m%d")` decides).
#[pyfunction]
fn impossible_date(value: &Bound<'_, PyString>) -> PyResult<bool> {
    Ok(engine::rules::impossible_date(&text(value)?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(screen, m)?)?;
    m.add_function(wrap_pyfunction!(conversation_problem, m)?)?;
    m.add_function(wrap_pyfunction!(is_reserved_id, m)?)?;
    m.add_function(wrap_pyfunction!(id_number, m)?)?;
    m.add_function(wrap_pyfunction!(answer_problems, m)?)?;
    m.add_function(wrap_pyfunction!(impossible_date, m)?)?;
    m.add_function(wrap_pyfunction!(authority_table, m)?)?;
    m.add("RESERVED_ID_MIN", engine::rules::RESERVED_ID_MIN)?;
    m.add("RESERVED_ID_MAX", engine::rules::RESERVED_ID_MAX)?;
    Ok(())
}

/// The authority table as rows of plain values: `(line, target, [(sender role, addressee role, effect)],
/// (verdict, reason, code, alert))`, roles and targets in their words.
#[pyfunction]
fn authority_table() -> Vec<AuthorityRow> {
    engine::authority::TABLE
        .iter()
        .map(|r| {
            let permits = r
                .permits
                .iter()
                .map(|p| (p.sender.text(), p.to.text(), p.effect))
                .collect();
            let f = &r.refusal;
            (
                r.line,
                r.target.text(),
                permits,
                (f.verdict, f.reason, f.code, f.alert),
            )
        })
        .collect()
}

type AuthorityRow = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str, &'static str)>,
    (&'static str, &'static str, &'static str, bool),
);

// ------------------------------------------------------------------------------------------------ the decision

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use crate::fields::{Backed, Kept};

use engine::decide::{self as d, Env, Finding};
use pyo3::types::PyTuple;

fn bytes_of(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        return Ok(None);
    }
    match v.cast::<PyString>() {
        Ok(s) => Ok(Some(text(s)?.into_owned())),
        Err(_) => Ok(Some(text(&v.str()?)?.into_owned())),
    }
}

fn attr_bytes(o: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<Option<Vec<u8>>> {
    bytes_of(&o.getattr(name)?)
}

pub(crate) fn finding_of(p: &Bound<'_, PyAny>) -> PyResult<Finding> {
    let py = p.py();
    let code = attr_bytes(p, pyo3::intern!(py, "code"))?.unwrap_or_default();
    let tier = attr_bytes(p, pyo3::intern!(py, "tier"))?;
    Ok(Finding {
        code: String::from_utf8_lossy(&code).into_owned().into(),
        tier: tier.map(|t| String::from_utf8_lossy(&t).into_owned().into()),
        message: attr_bytes(p, pyo3::intern!(py, "message"))?.unwrap_or_default(),
        slot: attr_bytes(p, pyo3::intern!(py, "slot"))?,
        expected: attr_bytes(p, pyo3::intern!(py, "expected"))?,
        got: attr_bytes(p, pyo3::intern!(py, "got"))?,
    })
}

pub(crate) fn findings_py<'py>(py: Python<'py>, fs: &[Finding]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for f in fs {
        out.append((
            &*f.code,
            f.tier.as_deref(),
            crate::string(py, &f.message)?,
            crate::opt_string(py, f.slot.as_deref())?,
            crate::opt_string(py, f.expected.as_deref())?,
            crate::opt_string(py, f.got.as_deref())?,
        ))?;
    }
    Ok(out)
}

fn opt_py<'py>(py: Python<'py>, b: &Option<Vec<u8>>) -> PyResult<Bound<'py, PyAny>> {
    crate::opt_string(py, b.as_deref())
}

/// A kept line's parse as the kept lines' map holds it: found by its text (hashed and compared as its bytes), so
/// that the map's keys are the parses themselves, not copies of their texts.
#[derive(Clone)]
struct ByText(Arc<Kept>);

impl ByText {
    fn bytes(&self) -> &[u8] {
        self.0.borrow_owner().bytes()
    }
}

impl std::hash::Hash for ByText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state) // as `[u8]` hashes: a lookup by a text finds it (`Borrow`)
    }
}

impl PartialEq for ByText {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for ByText {}

impl std::borrow::Borrow<[u8]> for ByText {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

/// A line's text is an agent's to choose: its hash is seeded per process (foldhash's random state), so colliding
/// texts cannot be prepared in advance.
type Hashed = foldhash::fast::RandomState;

/// The lines the state kept (forwarded HOs, checked RBs, questions), parsed, by profile then text: replies mostly
/// follow their handoff within moments, so a small bounded map (oldest out first) spares parsing them again. A
/// line kept as its batch is decided is put in it with the parse its batch was prepared with (`keep_parsed`), so a
/// reply in the same or a later batch finds it without a parse of its own.
struct Stored {
    by_profile: HashMap<Arc<[u8]>, HashSet<ByText, Hashed>, Hashed>,
    /// what it holds, oldest first
    order: VecDeque<(Arc<[u8]>, ByText)>,
}

impl Stored {
    fn get(&self, profile: &[u8], text: &[u8]) -> Option<Arc<Kept>> {
        self.by_profile.get(profile)?.get(text).map(|k| k.0.clone())
    }

    fn put(&mut self, profile: &Arc<[u8]>, kept: Arc<Kept>) {
        let key = ByText(kept);
        let texts = self.by_profile.entry(profile.clone()).or_default();
        if texts.contains(key.bytes()) {
            return;
        }
        texts.insert(key.clone());
        self.order.push_back((profile.clone(), key));
        if self.order.len() > STORED_MAX {
            if let Some((profile, old)) = self.order.pop_front() {
                if let Some(texts) = self.by_profile.get_mut(&profile) {
                    texts.remove(old.bytes());
                    if texts.is_empty() {
                        self.by_profile.remove(&profile);
                    }
                }
            }
        }
    }
}

static STORED: Mutex<Option<Stored>> = Mutex::new(None);
const STORED_MAX: usize = 2048;

fn with_stored<T>(f: impl FnOnce(&mut Stored) -> T) -> T {
    let mut guard = STORED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(guard.get_or_insert_with(|| Stored {
        by_profile: HashMap::default(),
        order: VecDeque::new(),
    }))
}

pub(crate) struct PyEnv<'py> {
    pub(crate) py: Python<'py>,
    /// the conversation's loaded state, held for the decision (nothing else changes it meanwhile)
    pub(crate) state: PyRefMut<'py, crate::state::State>,
    pub(crate) records: Bound<'py, PyAny>,
    pub(crate) record_key: Bound<'py, PyAny>,
    pub(crate) record_check: Option<Bound<'py, PyAny>>,
    pub(crate) grammar: Arc<rw1::Grammar>,
    pub(crate) profile: Arc<[u8]>,
    /// the record a lookup found, for the record check
    pub(crate) looked_up: Option<Bound<'py, PyAny>>,
    /// the first Python error met reading the state or the records: raised once the decision is made
    pub(crate) error: std::cell::RefCell<Option<PyErr>>,
}

impl<'py> PyEnv<'py> {
    fn keep<T>(&self, r: PyResult<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                None
            }
        }
    }

    fn record_info(&self, rec: &Bound<'py, PyAny>, values: bool) -> PyResult<d::RecordInfo> {
        let py = self.py;
        let mut info = d::RecordInfo::default();
        if values {
            info.values = crate::shown_pairs(&rec.getattr(pyo3::intern!(py, "values"))?)?;
        }
        for (k, v) in crate::mapping_items(&rec.getattr(pyo3::intern!(py, "resolved"))?)? {
            info.resolved.push((
                bytes_of(&k)?.unwrap_or_default(),
                bytes_of(&v)?.unwrap_or_default(),
            ));
        }
        let acc = rec.getattr(pyo3::intern!(py, "expect_acc"))?;
        if !acc.is_none() {
            let mut out = Vec::new();
            for x in acc.try_iter()? {
                out.push(bytes_of(&x?)?.unwrap_or_default());
            }
            info.expect_acc = Some(out);
        }
        Ok(info)
    }

    fn key(&self, item: &[u8], ask: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        self.record_key
            .call1((crate::string(self.py, item)?, crate::string(self.py, ask)?))
    }
}

impl Env for PyEnv<'_> {
    fn line(&self, id: &[u8]) -> Option<d::LineInfo> {
        self.state.inner.line_info(id)
    }

    fn handoff(&self, id: &[u8]) -> Option<d::HandoffInfo> {
        self.state.inner.handoff_info(id)
    }

    fn readback(&self, id: &[u8]) -> Option<d::ReadbackInfo> {
        self.state.inner.readback_info(id)
    }

    fn flags(&self, ho: &[u8]) -> Option<(bool, bool)> {
        self.state.inner.flags(ho)
    }

    fn probe(&mut self, msg: &rw1::Twin<'_>, line_no: i64) -> Vec<rw1::Problem> {
        self.state.inner.tracker.probe(msg, Some(line_no))
    }

    fn seq(&self) -> i64 {
        self.state.inner.seq
    }

    fn record(&mut self, item: &[u8], ask: &[u8]) -> Option<d::RecordInfo> {
        let found = self
            .key(item, ask)
            .and_then(|k| self.records.call_method1("record", (k,)));
        let rec = self.keep(found)?;
        if rec.is_none() {
            self.looked_up = None;
            return None;
        }
        let info = self.record_info(&rec, true);
        self.looked_up = Some(rec);
        self.keep(info)
    }

    fn binding(&mut self, item: &[u8], ask: &[u8]) -> Option<Vec<u8>> {
        let found = self
            .key(item, ask)
            .and_then(|k| self.records.call_method1("binding", (k,)))
            .and_then(|b| bytes_of(&b));
        self.keep(found).flatten()
    }

    fn record_check(&mut self) -> Option<Finding> {
        let check = self.record_check.clone()?;
        let rec = self.looked_up.clone()?;
        let found = check.call1((rec,));
        let problem = self.keep(found)?;
        if problem.is_none() {
            return None;
        }
        let f = finding_of(&problem);
        self.keep(f)
    }

    fn stored(&mut self, text: &[u8]) -> Option<d::Stored> {
        if let Some(hit) = with_stored(|s| s.get(&self.profile, text)) {
            return Some(hit);
        }
        let grammar = self.grammar.clone();
        let name = self.profile.clone();
        let mut clean = false;
        let kept = Kept::new(Backed::Owned(text.into()), |t| {
            let parsed = rw1::parse(t.bytes(), &grammar, |n| {
                if n == &name[..] {
                    Ok(grammar.clone())
                } else {
                    Err(b"a stored line switches profile".to_vec())
                }
            });
            clean = parsed.errors.is_empty();
            parsed.twin
        });
        if !clean {
            return None;
        }
        let kept = Arc::new(kept);
        with_stored(|s| s.put(&self.profile, kept.clone()));
        Some(kept)
    }
}

pub(crate) fn effect_py<'py>(py: Python<'py>, e: &d::Effect) -> PyResult<Bound<'py, PyTuple>> {
    let st = |b: &[u8]| crate::string(py, b);
    Ok(match e {
        d::Effect::RememberLine { id, entry } => PyTuple::new(
            py,
            [
                "line".into_pyobject(py)?.into_any(),
                st(id)?,
                st(&entry.digest)?,
                st(&entry.typ)?,
                entry.verdict.code().into_pyobject(py)?.into_any(),
                entry.reason.into_pyobject(py)?.into_any(),
                opt_py(py, &entry.re)?,
                entry.keep_text.into_pyobject(py)?.to_owned().into_any(),
            ],
        )?,
        d::Effect::OpenHandoff {
            id,
            item,
            ask,
            exec_ask,
            record,
            bound,
            holder,
            relay_of,
        } => {
            let (kind, of) = match record {
                d::RecordOf::None => ("none", py.None().into_bound(py)),
                d::RecordOf::Lookup => ("lookup", py.None().into_bound(py)),
                d::RecordOf::Handoff(h) => ("handoff", st(h)?),
            };
            PyTuple::new(
                py,
                [
                    "open".into_pyobject(py)?.into_any(),
                    st(id)?,
                    st(item)?,
                    st(ask)?,
                    exec_ask.into_pyobject(py)?.to_owned().into_any(),
                    kind.into_pyobject(py)?.into_any(),
                    of,
                    bound.into_pyobject(py)?.to_owned().into_any(),
                    opt_py(py, holder)?,
                    opt_py(py, relay_of)?,
                ],
            )?
        }
        d::Effect::Supersede { ho, by } => PyTuple::new(py, [st(b"supersede")?, st(ho)?, st(by)?])?,
        d::Effect::RecordReadback {
            id,
            ho,
            passed,
            exp,
        } => PyTuple::new(
            py,
            [
                st(b"readback")?,
                st(id)?,
                st(ho)?,
                passed.into_pyobject(py)?.to_owned().into_any(),
                opt_py(py, exp)?,
            ],
        )?,
        d::Effect::PassReadback { ho, rb } => PyTuple::new(py, [st(b"pass")?, st(ho)?, st(rb)?])?,
        d::Effect::RefuseReadback { rb } => PyTuple::new(py, [st(b"refuse")?, st(rb)?])?,
        d::Effect::Clear { ho, rb } => PyTuple::new(py, [st(b"clear")?, st(ho)?, st(rb)?])?,
        d::Effect::FeedThread => PyTuple::new(py, [st(b"feed")?])?,
        d::Effect::Bind {
            item,
            ask,
            holder,
            ho,
        } => PyTuple::new(
            py,
            [st(b"bind")?, st(item)?, st(ask)?, st(holder)?, st(ho)?],
        )?,
        d::Effect::Release {
            item,
            ask,
            holder,
            ho,
        } => PyTuple::new(
            py,
            [st(b"release")?, st(item)?, st(ask)?, st(holder)?, st(ho)?],
        )?,
        d::Effect::Relay { ho, by } => PyTuple::new(py, [st(b"relay")?, st(ho)?, st(by)?])?,
        d::Effect::AnswerQuestion { aq, by } => {
            PyTuple::new(py, [st(b"answer")?, st(aq)?, st(by)?])?
        }
    })
}

/// Decide one line (`gatekeeper.policy.decide` assembles the result). `message` is the parsed line (None when the
/// gate or the parser refused it: `invalid` says which, `raw` are the fields a line that did not parse carried);
/// `state`, `records` and `route` are the policy's objects; `record_key` its RecordKey class.
///
/// Returns `("repeat", clears)`, `("decided", verdict, reason, problems, notes, message, raise_alert, effects,
/// clears)` where `problems` is a list of findings or `"gate"` / `"parse"` (the caller's) and `effects` the
/// engine's (`state::Effects`: `line_text`, the line as the gate read it, is what a kept line keeps), or
/// `("internal", class, message)`: the exception deciding it raised in Python.
/// What the decision reads of a route's policy (`gatekeeper.policy.RoutePolicy`), read once per route.
#[pyclass(module = "rwcore._native", frozen)]
pub struct DecideRoute {
    name: Vec<u8>,
    profile: Arc<[u8]>, // shared with every line's `PyEnv`, not copied for each
    pub(crate) grammar: Arc<rw1::Grammar>,
    senders: Option<Vec<Vec<u8>>>,
    hold_seconds: f64,
    sender_auth: bool,
    state_ttl_seconds: f64,
    refuse_unverified_comprehension: bool,
    pub(crate) record_check: Option<Py<PyAny>>,
    /// the gate's limit on a value's size (`RoutePolicy.max_line_bytes`)
    pub(crate) max_line_bytes: u64,
}

impl DecideRoute {
    /// Put a line the state keeps in the kept lines' map, parsed as its batch was prepared under this route's
    /// profile (a line whose `p=` switched profiles is not: it is parsed again when a reply asks for it).
    pub(crate) fn keep_parsed(&self, kept: &Arc<Kept>) {
        with_stored(|s| s.put(&self.profile, kept.clone()));
    }

    /// The route as the engine's decision reads it.
    pub(crate) fn policy(&self) -> d::Route<'_> {
        d::Route {
            name: &self.name,
            profile: &self.profile[..],
            grammar: &self.grammar,
            senders: self.senders.clone(),
            hold_seconds: self.hold_seconds,
            sender_auth: self.sender_auth,
            state_ttl_seconds: self.state_ttl_seconds,
            refuse_unverified_comprehension: self.refuse_unverified_comprehension,
        }
    }

    /// The route as a refusal notice reads it (`engine::notices`).
    pub(crate) fn notice_route(&self) -> engine::notices::Route<'_> {
        engine::notices::Route {
            grammar: &self.grammar,
            profile: &self.profile,
            senders: self.senders.as_deref(),
            sender_auth: self.sender_auth,
            max_line_bytes: self.max_line_bytes,
        }
    }

    /// What deciding a line reads besides the route: the conversation's state, the records and bindings.
    pub(crate) fn env<'py>(
        &self,
        py: Python<'py>,
        state: PyRefMut<'py, crate::state::State>,
        records: &Bound<'py, PyAny>,
        record_key: &Bound<'py, PyAny>,
    ) -> PyEnv<'py> {
        PyEnv {
            py,
            state,
            records: records.clone(),
            record_key: record_key.clone(),
            record_check: self.record_check.as_ref().map(|c| c.bind(py).clone()),
            grammar: self.grammar.clone(),
            profile: self.profile.clone(),
            looked_up: None,
            error: Default::default(),
        }
    }
}

/// Who signed a line's record (`gatekeeper.policy.SenderProof`), as the engine reads it.
pub(crate) fn proof_of(sender: Option<&Bound<'_, PyAny>>) -> PyResult<Option<d::SenderProof>> {
    let Some(s) = sender.filter(|s| !s.is_none()) else {
        return Ok(None);
    };
    let py = s.py();
    Ok(Some(d::SenderProof {
        agent: attr_bytes(s, pyo3::intern!(py, "agent"))?,
        key_id: attr_bytes(s, pyo3::intern!(py, "key_id"))?,
        failure: attr_bytes(s, pyo3::intern!(py, "failure"))?,
        detail: attr_bytes(s, pyo3::intern!(py, "detail"))?.unwrap_or_default(),
    }))
}

#[pymethods]
impl DecideRoute {
    #[new]
    fn new(route: &Bound<'_, PyAny>) -> PyResult<DecideRoute> {
        let py = route.py();
        let profile = route.getattr(pyo3::intern!(py, "profile"))?;
        let senders = route.getattr(pyo3::intern!(py, "senders"))?;
        let senders = if senders.is_none() {
            None
        } else {
            let mut out = Vec::new();
            for s in senders.try_iter()? {
                out.push(bytes_of(&s?)?.unwrap_or_default());
            }
            Some(out)
        };
        let check = route.getattr(pyo3::intern!(py, "record_check"))?;
        Ok(DecideRoute {
            name: attr_bytes(route, pyo3::intern!(py, "name"))?.unwrap_or_default(),
            profile: attr_bytes(&profile, pyo3::intern!(py, "name"))?
                .unwrap_or_default()
                .into(),
            grammar: profile
                .getattr(pyo3::intern!(py, "grammar"))?
                .cast_into::<Grammar>()?
                .get()
                .inner
                .clone(),
            senders,
            hold_seconds: route
                .getattr(pyo3::intern!(py, "hold_seconds"))?
                .extract()?,
            sender_auth: route
                .getattr(pyo3::intern!(py, "sender_auth"))?
                .is_truthy()?,
            state_ttl_seconds: route
                .getattr(pyo3::intern!(py, "state_ttl_seconds"))?
                .extract()?,
            refuse_unverified_comprehension: route
                .getattr(pyo3::intern!(py, "refuse_unverified_comprehension"))?
                .is_truthy()?,
            record_check: (!check.is_none()).then(|| check.unbind()),
            max_line_bytes: route
                .getattr(pyo3::intern!(py, "max_line_bytes"))?
                .extract()?,
        })
    }
}

#[pyfunction]
#[pyo3(signature = (raw, conversation, message, invalid, raw_fields, state, records, route, record_key, now, first_seen, replay, sender, line_text))]
#[allow(clippy::too_many_arguments)]
fn decide_line<'py>(
    py: Python<'py>,
    raw: &Bound<'py, PyBytes>,
    conversation: Option<Bound<'py, PyString>>,
    message: Option<Bound<'py, PyAny>>,
    invalid: &str,
    raw_fields: Option<Bound<'py, PyAny>>,
    state: &Bound<'py, crate::state::State>,
    records: &Bound<'py, PyAny>,
    route: &Bound<'py, DecideRoute>,
    record_key: &Bound<'py, PyAny>,
    now: f64,
    first_seen: Option<f64>,
    replay: bool,
    sender: Option<Bound<'py, PyAny>>,
    line_text: Option<Bound<'py, PyString>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let conv = conversation.as_ref().map(text).transpose()?;
    let conversation_problem = match &conv {
        Some(c) => engine::gate::conversation_problem(c).map(Finding::from),
        None => None,
    };
    let held = message.as_ref().map(crate::hold).transpose()?;
    let twin = held.as_ref().map(crate::twin).transpose()?;
    let mut rf: [Option<Vec<u8>>; 4] = Default::default();
    if let Some(fields) = &raw_fields {
        let fields: Vec<Bound<'py, PyAny>> = fields.extract()?;
        for (slot, f) in rf.iter_mut().zip(fields.iter()) {
            *slot = match f.cast::<PyString>() {
                Ok(s) => Some(text(s)?.into_owned()),
                Err(_) => None,
            };
        }
    }
    let raw_view = d::RawFields {
        id: rf[0].as_deref(),
        from: rf[1].as_deref(),
        typ: rf[2].as_deref(),
        re: rf[3].as_deref(),
    };
    let line = match (&twin, invalid) {
        (Some(t), _) => d::Line::Parsed(t),
        (None, "gate") => d::Line::Refused,
        _ => d::Line::Invalid(raw_view.clone()),
    };
    let route = route.get();
    let policy = route.policy();
    let proof = proof_of(sender.as_ref())?;
    let mut env = route.env(py, state.borrow_mut(), records, record_key);
    let outcome = guarded(|| {
        d::decide(
            raw.as_bytes(),
            conv.as_deref(),
            conversation_problem,
            line,
            &mut env,
            &policy,
            now,
            first_seen,
            replay,
            proof.as_ref(),
        )
    })?;
    if let Some(e) = env.error.take() {
        return Err(e);
    }
    let clears_py = |c: &Option<(Vec<u8>, Vec<u8>)>| -> PyResult<Bound<'py, PyAny>> {
        match c {
            None => Ok(py.None().into_bound(py)),
            Some((a, b)) => {
                Ok(PyTuple::new(py, [crate::string(py, a)?, crate::string(py, b)?])?.into_any())
            }
        }
    };
    match outcome {
        Err(internal) => PyTuple::new(
            py,
            [
                crate::string(py, b"internal")?,
                internal.class.into_pyobject(py)?.into_any(),
                crate::string(py, &internal.message)?,
            ],
        ),
        Ok(d::Outcome::Repeat { clears }) => {
            PyTuple::new(py, [crate::string(py, b"repeat")?, clears_py(&clears)?])
        }
        Ok(d::Outcome::Decided(dec)) => {
            let problems = match &dec.problems {
                d::Problems::Own(ps) => findings_py(py, ps)?.into_any(),
                d::Problems::Gate => crate::string(py, b"gate")?,
                d::Problems::Parse => crate::string(py, b"parse")?,
            };
            let effects = crate::state::Effects::of(
                dec.effects.clone(),
                dec.problems.clone(),
                env.looked_up.as_ref(),
                line_text
                    .as_ref()
                    .map(text)
                    .transpose()?
                    .map(std::borrow::Cow::into_owned),
                twin.as_deref(),
                now,
            )?;
            let effects = Bound::new(py, effects)?;
            PyTuple::new(
                py,
                [
                    crate::string(py, b"decided")?,
                    dec.verdict.code().into_pyobject(py)?.into_any(),
                    dec.reason.into_pyobject(py)?.into_any(),
                    problems,
                    findings_py(py, &dec.notes)?.into_any(),
                    dec.message.into_pyobject(py)?.to_owned().into_any(),
                    dec.raise_alert.into_pyobject(py)?.to_owned().into_any(),
                    effects.into_any(),
                    clears_py(&dec.clears)?,
                ],
            )
        }
    }
}

pub fn register_decide(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DecideRoute>()?;
    m.add_function(wrap_pyfunction!(decide_line, m)?)?;
    Ok(())
}

/// A line's identity within its conversation, with its message id: SHA-256 of the bytes, 16 hex.
#[pyfunction]
fn line_digest(raw: &Bound<'_, PyBytes>) -> String {
    String::from_utf8_lossy(&d::line_digest(raw.as_bytes())).into_owned()
}

/// An epoch time as RW1's `YYYYMMDDTHHMMZ`.
#[pyfunction]
fn rw_time(epoch: f64) -> String {
    String::from_utf8_lossy(&d::rw_time(epoch)).into_owned()
}

/// The value of an exec binding: `<route>/<conversation>/<HO id>#<digest>@<epoch seconds>`.
#[pyfunction]
fn holder_of<'py>(
    py: Python<'py>,
    route: &Bound<'py, PyString>,
    conversation: &Bound<'py, PyString>,
    ho_id: &Bound<'py, PyString>,
    digest: &Bound<'py, PyString>,
    at: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let held = d::holder_of(
        &text(route)?,
        &text(conversation)?,
        &text(ho_id)?,
        &text(digest)?,
        at,
    );
    string(py, &held)
}

/// A binding's handoff without the time it was bound.
#[pyfunction]
fn holder_identity<'py>(
    py: Python<'py>,
    holder: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    string(py, d::holder_identity(&text(holder)?))
}

/// A binding's handoff as a problem shows it: route, conversation and id.
#[pyfunction]
fn bound_handoff<'py>(
    py: Python<'py>,
    holder: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    string(py, d::bound_handoff(&text(holder)?))
}

/// When a binding was made (None: a binding of an earlier release, or not one of ours).
#[pyfunction]
fn bound_at(holder: &Bound<'_, PyString>) -> PyResult<Option<f64>> {
    Ok(d::bound_at(&text(holder)?))
}

pub fn register_holders(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(line_digest, m)?)?;
    m.add_function(wrap_pyfunction!(rw_time, m)?)?;
    m.add_function(wrap_pyfunction!(holder_of, m)?)?;
    m.add_function(wrap_pyfunction!(holder_identity, m)?)?;
    m.add_function(wrap_pyfunction!(bound_handoff, m)?)?;
    m.add_function(wrap_pyfunction!(bound_at, m)?)?;
    Ok(())
}
