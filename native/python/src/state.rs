//! `rwcore._native.State`: the conversation's loaded state, held natively (`engine::state`), behind
//! `gatekeeper.policy.state.ConversationState`. The decision reads it without Python; the effects change it through
//! the methods below; the readers of the Python API get its entries as tuples the wrapper turns into the policy's
//! values.

use std::borrow::Cow;
use std::sync::Arc;

use engine::decide::{self as d, Finding};
use engine::state::{self as s, StoredHandoff, StoredLine, StoredReadback, StoredRecord};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple,
};
use serde_json::{Map, Value as Json};

use crate::{opt_string, string, text};

/// A state error: a `KeyError: 'x'` the engine names (an entry an effect needs is not loaded) as Python's KeyError,
/// anything else as ValueError.
fn error(e: String) -> PyErr {
    match e.strip_prefix("KeyError: ") {
        Some(k) => PyKeyError::new_err(k.trim_matches('\'').to_owned()),
        None => PyValueError::new_err(e),
    }
}

fn bytes(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    match v.cast::<PyString>() {
        Ok(s) => Ok(text(s)?.into_owned()),
        Err(_) => Ok(text(&v.str()?)?.into_owned()),
    }
}

fn opt_bytes(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        Ok(None)
    } else {
        bytes(v).map(Some)
    }
}

fn attr<'py>(o: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    o.getattr(PyString::intern(o.py(), name))
}

fn opt_float(v: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if v.is_none() {
        Ok(None)
    } else {
        v.extract().map(Some)
    }
}

/// A Python value (what a record holds) as JSON; what JSON cannot hold is a ValueError.
fn json_of(v: &Bound<'_, PyAny>) -> PyResult<Json> {
    if v.is_none() {
        return Ok(Json::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Json::Bool(b.is_true()));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Json::String(s.to_str()?.to_owned()));
    }
    if v.is_instance_of::<PyInt>() {
        if let Ok(i) = v.extract::<i64>() {
            return Ok(Json::from(i));
        }
        if let Ok(u) = v.extract::<u64>() {
            return Ok(Json::from(u));
        }
        return Err(PyValueError::new_err("Integer exceeds 64-bit range"));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Ok(serde_json::Number::from_f64(f.value()).map_or(Json::Null, Json::Number));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut m = Map::new();
        for (k, x) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| PyValueError::new_err("Dict key must be str"))?;
            m.insert(key.to_str()?.to_owned(), json_of(&x)?);
        }
        return Ok(Json::Object(m));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items = v
            .try_iter()?
            .map(|x| json_of(&x?))
            .collect::<PyResult<_>>()?;
        return Ok(Json::Array(items));
    }
    if let Ok(items) = v.call_method0("items") {
        let mut m = Map::new();
        for pair in items.try_iter()? {
            let (k, x): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            m.insert(
                bytes(&k).map(|b| String::from_utf8_lossy(&b).into_owned())?,
                json_of(&x)?,
            );
        }
        return Ok(Json::Object(m));
    }
    Err(PyValueError::new_err(format!(
        "Type is not JSON serializable: {}",
        v.get_type().name()?
    )))
}

/// JSON as the Python value `orjson.loads` gives.
fn py_of<'py>(py: Python<'py>, v: &Json) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Json::Null => py.None().into_bound(py),
        Json::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.into_pyobject(py)?.into_any(),
            (_, Some(u), _) => u.into_pyobject(py)?.into_any(),
            (_, _, Some(f)) => PyFloat::new(py, f).into_any(),
            _ => py.None().into_bound(py),
        },
        Json::String(s) => PyString::new(py, s).into_any(),
        Json::Array(items) => {
            let out = PyList::empty(py);
            for x in items {
                out.append(py_of(py, x)?)?;
            }
            out.into_any()
        }
        Json::Object(m) => map_py(py, m)?.into_any(),
    })
}

fn map_py<'py>(py: Python<'py>, m: &Map<String, Json>) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (k, x) in m {
        out.set_item(k, py_of(py, x)?)?;
    }
    Ok(out)
}

fn finding_of(p: &Bound<'_, PyAny>) -> PyResult<Finding> {
    let code = bytes(&attr(p, "code")?)?;
    Ok(Finding {
        code: String::from_utf8_lossy(&code).into_owned().into(),
        tier: opt_bytes(&attr(p, "tier")?)?
            .map(|t| String::from_utf8_lossy(&t).into_owned().into()),
        message: bytes(&attr(p, "message")?)?,
        slot: opt_bytes(&attr(p, "slot")?)?,
        expected: opt_bytes(&attr(p, "expected")?)?,
        got: opt_bytes(&attr(p, "got")?)?,
    })
}

pub(crate) fn record_of(r: &Bound<'_, PyAny>) -> PyResult<StoredRecord> {
    let resolved = crate::mapping_items(&attr(r, "resolved")?)?
        .iter()
        .map(|(k, v)| Ok((bytes(k)?, bytes(v)?)))
        .collect::<PyResult<_>>()?;
    let acc = attr(r, "expect_acc")?;
    let expect_acc = if acc.is_none() {
        None
    } else {
        Some(
            acc.try_iter()?
                .map(|x| bytes(&x?))
                .collect::<PyResult<_>>()?,
        )
    };
    let values = match json_of(&attr(r, "values")?)? {
        Json::Object(m) => m,
        _ => Map::new(),
    };
    Ok(StoredRecord {
        item: bytes(&attr(r, "item")?)?,
        ask: bytes(&attr(r, "ask")?)?,
        values,
        resolved,
        expect_acc,
        signature: opt_bytes(&attr(r, "signature")?)?,
    })
}

fn pair_py<'py>(py: Python<'py>, pairs: &[(Vec<u8>, Vec<u8>)]) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (k, v) in pairs {
        out.set_item(string(py, k)?, string(py, v)?)?;
    }
    Ok(out)
}

fn opt_f<'py>(py: Python<'py>, v: Option<f64>) -> Bound<'py, PyAny> {
    v.map_or_else(
        || py.None().into_bound(py),
        |f| PyFloat::new(py, f).into_any(),
    )
}

fn fields_py<'py>(py: Python<'py>, fields: &[(Vec<u8>, Vec<u8>)]) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (k, v) in fields {
        out.set_item(string(py, k)?, string(py, v)?)?;
    }
    Ok(out)
}

/// An index entry as Python reads it: `(open, opened_at, due_at, lapsed_at)`.
type IndexTuple = (bool, Option<f64>, Option<f64>, Option<f64>);
/// A deadline as Python reads it: `(kind, at, value)`.
type DeadlineTuple<'py> = (&'static str, f64, Bound<'py, PyAny>);

/// The loaded part of one conversation's state (`engine::state::State`).
#[pyclass(module = "rwcore._native")]
pub struct State {
    pub(crate) inner: s::State,
}

impl State {
    /// The state of stored fields (name, JSON text): `from_fields` and `from_reply` once they have the pairs.
    fn read<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> PyResult<Self> {
        let inner =
            crate::guarded(|| s::State::from_fields(pairs))?.map_err(PyValueError::new_err)?;
        Ok(State { inner })
    }
}

#[pymethods]
impl State {
    #[new]
    fn new() -> Self {
        State {
            inner: s::State::new(),
        }
    }

    /// A state from stored fields (name -> JSON text). Another version, or an entry that does not read: ValueError.
    #[staticmethod]
    fn from_fields(fields: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut owned = Vec::new();
        for (k, v) in crate::mapping_items(fields)? {
            owned.push((bytes(&k)?, bytes(&v)?));
        }
        State::read(owned.iter().map(|(k, v)| (&k[..], &v[..])))
    }

    /// A state from a Redis reply: its field names and values alternating, each `bytes` (or `str`), read as they
    /// are, without a dict of decoded strings made first (what the Redis store loads for every conversation a
    /// batch names). A name or value not UTF-8, a reply of an odd length, another version, an entry that does not
    /// read: ValueError.
    #[staticmethod]
    fn from_reply(reply: &Bound<'_, PyList>) -> PyResult<Self> {
        let items: Vec<Bound<'_, PyAny>> = reply.iter().collect();
        if items.len() % 2 != 0 {
            return Err(PyValueError::new_err(format!(
                "a state's reply of {} items: names and values do not pair",
                items.len()
            )));
        }
        let mut texts: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
        for item in &items {
            let raw: Cow<'_, [u8]> = match item.cast::<PyBytes>() {
                Ok(b) => Cow::Borrowed(b.as_bytes()),
                Err(_) => text(item.cast::<PyString>()?)?,
            };
            if std::str::from_utf8(&raw).is_err() {
                let shown = String::from_utf8_lossy(&raw[..raw.len().min(40)]).into_owned();
                return Err(PyValueError::new_err(format!(
                    "a state's field is not UTF-8: {shown:?}"
                )));
            }
            texts.push(raw);
        }
        State::read(texts.chunks_exact(2).map(|p| (&p[0][..], &p[1][..])))
    }

    fn copy(&self) -> Self {
        State {
            inner: self.inner.clone(),
        }
    }

    #[getter]
    fn seq(&self) -> i64 {
        self.inner.seq
    }

    #[getter]
    fn base_open(&self) -> i64 {
        self.inner.base_open
    }

    #[setter]
    fn set_base_open(&mut self, v: i64) {
        self.inner.base_open = v;
    }

    #[getter]
    fn legacy(&self) -> bool {
        self.inner.legacy
    }

    #[setter]
    fn set_legacy(&mut self, v: bool) {
        self.inner.legacy = v;
    }

    #[getter]
    fn open_at_load<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        let ids = self
            .inner
            .open_at_load
            .iter()
            .map(|i| string(py, i))
            .collect::<PyResult<Vec<_>>>()?;
        PyFrozenSet::new(py, &ids)
    }

    /// Which loaded handoffs count as open at the load (a converted version-1 document: none).
    fn set_open_at_load(&mut self, ids: Vec<Bound<'_, PyString>>) -> PyResult<()> {
        self.inner.open_at_load = ids
            .iter()
            .map(|i| Ok(text(i)?.into_owned()))
            .collect::<PyResult<_>>()?;
        Ok(())
    }

    #[getter]
    fn dirty<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        let names = self
            .inner
            .dirty
            .iter()
            .map(|n| string(py, n))
            .collect::<PyResult<Vec<_>>>()?;
        PySet::new(py, &names)
    }

    /// Mark every field the state holds as changed (a converted version-1 document is written whole).
    fn mark_all(&mut self) {
        let names: Vec<Vec<u8>> = self
            .inner
            .all_fields()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        self.inner.dirty.extend(names);
    }

    fn is_open(&self, ho: &Bound<'_, PyString>) -> PyResult<bool> {
        Ok(self.inner.is_open(&text(ho)?))
    }

    fn open_delta(&self) -> i64 {
        self.inner.open_delta()
    }

    fn open_count(&self) -> i64 {
        self.inner.open_count()
    }

    fn field<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self.inner.field(&text(name)?).map_err(error)?;
        opt_string(py, v.as_deref())
    }

    fn changed_fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        fields_py(
            py,
            &crate::guarded(|| inner.changed_fields())?.map_err(error)?,
        )
    }

    /// What the Redis save sends of this conversation after its keys (`engine::state::State::save_args`): a JSON
    /// array as bytes (`json`: an element of the batch save's one argument), or the list of arguments (a
    /// cluster's per-conversation script call). `now` and `oldest` are the scores as Redis reads them.
    #[pyo3(signature = (epoch, ttl_open, ttl, now, oldest, collect_per_save, json))]
    #[allow(clippy::too_many_arguments)]
    fn save_args<'py>(
        &self,
        py: Python<'py>,
        epoch: Option<i64>,
        ttl_open: i64,
        ttl: i64,
        now: &Bound<'py, PyString>,
        oldest: &Bound<'py, PyString>,
        collect_per_save: i64,
        json: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = &self.inner;
        let a = crate::guarded(|| inner.save_args(epoch, ttl_open, ttl, collect_per_save))?
            .map_err(error)?;
        if json {
            return Ok(PyBytes::new(py, &a.json(&text(now)?, &text(oldest)?)).into_any());
        }
        let out = PyList::empty(py);
        match a.epoch {
            Some(e) => out.append(e)?,
            None => out.append("")?,
        }
        out.append(a.ttl)?;
        out.append(if a.legacy { "1" } else { "0" })?;
        out.append(now)?;
        out.append(oldest)?;
        out.append(a.collect)?;
        out.append(a.queued.len())?;
        for id in &a.queued {
            out.append(string(py, id)?)?;
        }
        for (k, v) in &a.fields {
            out.append(string(py, k)?)?;
            out.append(string(py, v)?)?;
        }
        Ok(out.into_any())
    }

    fn all_fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fields_py(py, &self.inner.all_fields())
    }

    fn collection<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ids = self
            .inner
            .collection()
            .iter()
            .map(|i| string(py, i))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, ids)
    }

    // ------------------------------------------------------------ the entries, for the Python readers

    /// The ids of the lines (`"l"`), handoffs (`"o"`) or readbacks (`"r"`) held, in the order they came.
    fn ids<'py>(&self, py: Python<'py>, kind: &str) -> PyResult<Bound<'py, PyList>> {
        let keys: Vec<&Vec<u8>> = match kind {
            "l" => self.inner.lines.keys().collect(),
            "o" => self.inner.handoffs.keys().collect(),
            "r" => self.inner.readbacks.keys().collect(),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "no entries of kind {kind:?}"
                )))
            }
        };
        PyList::new(
            py,
            keys.iter()
                .map(|k| string(py, k))
                .collect::<PyResult<Vec<_>>>()?,
        )
    }

    fn has(&self, kind: &str, id: &Bound<'_, PyString>) -> PyResult<bool> {
        let id = text(id)?;
        Ok(match kind {
            "l" => self.inner.lines.contains_key(&id[..]),
            "o" => self.inner.handoffs.contains_key(&id[..]),
            "r" => self.inner.readbacks.contains_key(&id[..]),
            _ => false,
        })
    }

    fn count(&self, kind: &str) -> usize {
        match kind {
            "l" => self.inner.lines.len(),
            "o" => self.inner.handoffs.len(),
            "r" => self.inner.readbacks.len(),
            _ => 0,
        }
    }

    /// A line's entry: `(digest, type, verdict, reason, at, re, problems, text, answered, unanswered_at)`, the
    /// problems as `(code, tier, message, slot, expected, got)`; None when not held.
    fn line<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(l) = self.inner.lines.get(&text(id)?[..]) else {
            return Ok(None);
        };
        let problems = PyList::empty(py);
        for p in &l.problems {
            problems.append((
                &*p.code,
                p.tier.as_deref(),
                string(py, &p.message)?,
                opt_string(py, p.slot.as_deref())?,
                opt_string(py, p.expected.as_deref())?,
                opt_string(py, p.got.as_deref())?,
            ))?;
        }
        let fields: [Bound<'py, PyAny>; 10] = [
            string(py, &l.digest)?,
            string(py, &l.typ)?,
            string(py, &l.verdict)?,
            opt_string(py, l.reason.as_deref())?,
            PyFloat::new(py, l.at).into_any(),
            opt_string(py, l.re.as_deref())?,
            problems.into_any(),
            opt_string(py, l.text.as_deref())?,
            opt_string(py, l.answered.as_deref())?,
            opt_f(py, l.unanswered_at),
        ];
        PyTuple::new(py, fields).map(Some)
    }

    /// A handoff's entry: `(item, ask, exec_ask, record, bound, holder, superseded_by, relay_of, relayed_by,
    /// cleared_by, passed_rb, gk_cancel, gk_cancel_why, gk_cancel_at, overdue, overdue_at)`, the record as
    /// `(item, ask, values, resolved, expect_acc, signature)` or None; None when not held.
    fn handoff<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(h) = self.inner.handoffs.get(&text(id)?[..]) else {
            return Ok(None);
        };
        let record = match &h.record {
            None => py.None().into_bound(py),
            Some(r) => {
                let acc = match &r.expect_acc {
                    None => py.None().into_bound(py),
                    Some(a) => PyTuple::new(
                        py,
                        a.iter()
                            .map(|x| string(py, x))
                            .collect::<PyResult<Vec<_>>>()?,
                    )?
                    .into_any(),
                };
                PyTuple::new(
                    py,
                    [
                        string(py, &r.item)?,
                        string(py, &r.ask)?,
                        map_py(py, &r.values)?.into_any(),
                        pair_py(py, &r.resolved)?.into_any(),
                        acc,
                        opt_string(py, r.signature.as_deref())?,
                    ],
                )?
                .into_any()
            }
        };
        let o = |v: &Option<Vec<u8>>| opt_string(py, v.as_deref());
        let fields: [Bound<'py, PyAny>; 16] = [
            string(py, &h.item)?,
            string(py, &h.ask)?,
            PyBool::new(py, h.exec_ask).to_owned().into_any(),
            record,
            PyBool::new(py, h.bound).to_owned().into_any(),
            o(&h.holder)?,
            o(&h.superseded_by)?,
            o(&h.relay_of)?,
            o(&h.relayed_by)?,
            o(&h.cleared_by)?,
            o(&h.passed_rb)?,
            o(&h.gk_cancel)?,
            o(&h.gk_cancel_why)?,
            opt_f(py, h.gk_cancel_at),
            o(&h.overdue)?,
            opt_f(py, h.overdue_at),
        ];
        PyTuple::new(py, fields).map(Some)
    }

    /// A readback's entry: `(ho, passed, exp, refused)`; None when not held.
    fn readback<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(r) = self.inner.readbacks.get(&text(id)?[..]) else {
            return Ok(None);
        };
        let fields: [Bound<'py, PyAny>; 4] = [
            string(py, &r.ho)?,
            PyBool::new(py, r.passed).to_owned().into_any(),
            opt_string(py, r.exp.as_deref())?,
            PyBool::new(py, r.refused).to_owned().into_any(),
        ];
        PyTuple::new(py, fields).map(Some)
    }

    /// A copy of the thread tracker of the loaded handoffs (for reading: the state's own changes only by `feed`).
    fn tracker(&self) -> crate::Tracker {
        crate::Tracker {
            inner: self.inner.tracker.clone(),
        }
    }

    // ------------------------------------------------------------ the effects

    /// Remember a line's first decision (a `LineEntry`).
    fn remember_line(&mut self, id: &Bound<'_, PyString>, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let problems = attr(e, "problems")?
            .try_iter()?
            .map(|p| finding_of(&p?))
            .collect::<PyResult<_>>()?;
        let line = StoredLine {
            digest: bytes(&attr(e, "digest")?)?,
            typ: bytes(&attr(e, "type")?)?,
            verdict: bytes(&attr(e, "verdict")?)?,
            reason: opt_bytes(&attr(e, "reason")?)?,
            at: attr(e, "at")?.extract()?,
            re: opt_bytes(&attr(e, "re")?)?,
            problems,
            text: opt_bytes(&attr(e, "text")?)?,
            answered: opt_bytes(&attr(e, "answered")?)?,
            unanswered_at: opt_float(&attr(e, "unanswered_at")?)?,
        };
        self.inner.remember_line(&text(id)?, line);
        Ok(())
    }

    /// Open a forwarded handoff (a `HandoffEntry`).
    fn open_handoff(&mut self, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let rec = attr(e, "record")?;
        let handoff = StoredHandoff {
            item: bytes(&attr(e, "item")?)?,
            ask: bytes(&attr(e, "ask")?)?,
            exec_ask: attr(e, "exec_ask")?.is_truthy()?,
            record: if rec.is_none() {
                None
            } else {
                Some(Arc::new(record_of(&rec)?))
            },
            bound: attr(e, "bound")?.is_truthy()?,
            holder: opt_bytes(&attr(e, "holder")?)?,
            superseded_by: opt_bytes(&attr(e, "superseded_by")?)?,
            relay_of: opt_bytes(&attr(e, "relay_of")?)?,
            relayed_by: opt_bytes(&attr(e, "relayed_by")?)?,
            cleared_by: opt_bytes(&attr(e, "cleared_by")?)?,
            passed_rb: opt_bytes(&attr(e, "passed_rb")?)?,
            gk_cancel: opt_bytes(&attr(e, "gk_cancel")?)?,
            gk_cancel_why: opt_bytes(&attr(e, "gk_cancel_why")?)?,
            gk_cancel_at: opt_float(&attr(e, "gk_cancel_at")?)?,
            overdue: opt_bytes(&attr(e, "overdue")?)?,
            overdue_at: opt_float(&attr(e, "overdue_at")?)?,
        };
        self.inner.open_handoff(&bytes(&attr(e, "id")?)?, handoff);
        Ok(())
    }

    /// Record a checked readback (a `ReadbackEntry`).
    fn record_readback(&mut self, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let rb = StoredReadback {
            ho: bytes(&attr(e, "ho")?)?,
            passed: attr(e, "passed")?.is_truthy()?,
            exp: opt_bytes(&attr(e, "exp")?)?,
            refused: attr(e, "refused")?.is_truthy()?,
        };
        self.inner.record_readback(&bytes(&attr(e, "id")?)?, rb);
        Ok(())
    }

    fn supersede(&mut self, ho: &Bound<'_, PyString>, by: &Bound<'_, PyString>) -> PyResult<()> {
        self.inner.supersede(&text(ho)?, &text(by)?).map_err(error)
    }

    fn pass_readback(
        &mut self,
        ho: &Bound<'_, PyString>,
        rb: &Bound<'_, PyString>,
    ) -> PyResult<()> {
        self.inner
            .pass_readback(&text(ho)?, &text(rb)?)
            .map_err(error)
    }

    fn refuse_readback(&mut self, rb: &Bound<'_, PyString>) -> PyResult<()> {
        self.inner.refuse_readback(&text(rb)?).map_err(error)
    }

    fn clear(&mut self, ho: &Bound<'_, PyString>, rb: &Bound<'_, PyString>) -> PyResult<()> {
        self.inner.clear(&text(ho)?, &text(rb)?).map_err(error)
    }

    /// Feed a line (a `Message`) to the thread as the conversation's next line.
    fn feed(&mut self, msg: &Bound<'_, PyAny>) -> PyResult<()> {
        let held = crate::hold(msg)?;
        let t = crate::twin(&held)?;
        let inner = &mut self.inner;
        crate::guarded(|| inner.feed(&t))?.map_err(PyValueError::new_err)
    }

    fn unbind(&mut self, ho: &Bound<'_, PyString>) -> PyResult<()> {
        self.inner.unbind(&text(ho)?);
        Ok(())
    }

    fn relay(&mut self, ho: &Bound<'_, PyString>, by: &Bound<'_, PyString>) -> PyResult<()> {
        self.inner.relay(&text(ho)?, &text(by)?).map_err(error)
    }

    fn answer_question(
        &mut self,
        aq: &Bound<'_, PyString>,
        by: &Bound<'_, PyString>,
    ) -> PyResult<()> {
        self.inner
            .answer_question(&text(aq)?, &text(by)?)
            .map_err(error)
    }

    fn mark_unanswered(&mut self, aq: &Bound<'_, PyString>, at: f64) -> PyResult<()> {
        self.inner.mark_unanswered(&text(aq)?, at).map_err(error)
    }

    fn gatekeeper_cancel(
        &mut self,
        ho: &Bound<'_, PyString>,
        cx: &Bound<'_, PyString>,
        why: &Bound<'_, PyString>,
        at: f64,
    ) -> PyResult<()> {
        self.inner
            .gatekeeper_cancel(&text(ho)?, &text(cx)?, &text(why)?, at)
            .map_err(error)
    }

    // ------------------------------------------------------------ the lifecycle (`engine::lifecycle`)

    /// The index entry of a handoff or question: `(open, opened_at, due_at, lapsed_at)`, or None.
    #[pyo3(signature = (ho, readback_timeout=None))]
    fn index_entry(
        &self,
        ho: &Bound<'_, PyString>,
        readback_timeout: Option<f64>,
    ) -> PyResult<Option<IndexTuple>> {
        let (inner, ho) = (&self.inner, text(ho)?);
        Ok(crate::guarded(|| inner.index_entry(&ho, readback_timeout))?
            .map(|e| (e.open, e.opened_at, e.due_at, e.lapsed_at)))
    }

    /// A handoff's deadlines, earliest first, as `(kind, at, value)` (the readback timeout's value empty); None
    /// when the state has no forwarded handoff of that id.
    #[pyo3(signature = (ho, readback_timeout=None, pending_only=true))]
    fn deadlines<'py>(
        &self,
        py: Python<'py>,
        ho: &Bound<'py, PyString>,
        readback_timeout: Option<f64>,
        pending_only: bool,
    ) -> PyResult<Option<Vec<DeadlineTuple<'py>>>> {
        let (inner, ho) = (&self.inner, text(ho)?);
        let Some(found) = crate::guarded(|| inner.deadlines(&ho, readback_timeout, pending_only))?
        else {
            return Ok(None);
        };
        found
            .iter()
            .map(|d| Ok((d.kind.code(), d.at, string(py, &d.value)?)))
            .collect::<PyResult<_>>()
            .map(Some)
    }

    /// A question's pending `by=`: `(at, value)`, or None.
    fn question_deadline<'py>(
        &self,
        py: Python<'py>,
        aq: &Bound<'py, PyString>,
    ) -> PyResult<Option<(f64, Bound<'py, PyAny>)>> {
        self.inner
            .question_deadline(&text(aq)?)
            .map(|(at, by)| Ok((at, string(py, &by)?)))
            .transpose()
    }

    /// The ids of the open handoffs the state holds, in line order (the thread's), not superseded.
    fn live_handoffs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ids = self
            .inner
            .tracker
            .open_handoffs()
            .filter(|h| {
                self.inner
                    .handoffs
                    .get(&h.id)
                    .is_some_and(|e| e.superseded_by.is_none())
            })
            .map(|h| string(py, &h.id))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, ids)
    }

    /// Apply a decision's effects as the engine made them (`problems`: the decision's, as the policy holds them,
    /// for a line refused by the gate or the parser). Returns the binding changes for the batch's overlay, as
    /// `("bind" | "release", item, ask, holder)`, and the handoffs (and questions) whose place in the lifecycle
    /// indexes they may change (`policy.lifecycle.touched`).
    fn apply_engine<'py>(
        &mut self,
        py: Python<'py>,
        effects: &Bound<'py, Effects>,
        problems: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        // a panic is a bug, raised as the Python error the batch's guard makes an internal-error dead letter of
        crate::guarded(std::panic::AssertUnwindSafe(|| {
            self.apply_engine_impl(py, effects, problems)
        }))?
    }

    fn mark_overdue(
        &mut self,
        ho: &Bound<'_, PyString>,
        kind: &Bound<'_, PyString>,
        at: f64,
    ) -> PyResult<()> {
        self.inner
            .mark_overdue(&text(ho)?, &text(kind)?, at)
            .map_err(error)
    }
}

/// When a handoff with this `exp=` becomes overdue (epoch seconds), or None: not a time.
#[pyfunction]
fn exp_deadline(exp: &Bound<'_, PyString>) -> PyResult<Option<f64>> {
    Ok(engine::lifecycle::exp_deadline(&text(exp)?))
}

/// When a handoff with this `due=` becomes overdue, or None: not a date.
#[pyfunction]
fn due_deadline(due: &Bound<'_, PyString>) -> PyResult<Option<f64>> {
    Ok(engine::lifecycle::due_deadline(&text(due)?))
}

/// When a question with this `by=` is overdue, or None.
#[pyfunction]
fn by_deadline(by: &Bound<'_, PyString>) -> PyResult<Option<f64>> {
    Ok(engine::lifecycle::by_deadline(&text(by)?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<State>()?;
    m.add_class::<Effects>()?;
    m.add_function(wrap_pyfunction!(exp_deadline, m)?)?;
    m.add_function(wrap_pyfunction!(due_deadline, m)?)?;
    m.add_function(wrap_pyfunction!(by_deadline, m)?)
}

/// A decision's effects as the engine made them, with what applying them needs besides the state: the decision's
/// own problems (a line's entry keeps them), the record the decision looked up (a handoff keeps it), the line's
/// text and its parsed twin (the thread is fed it), and the time. `policy.apply` applies them natively
/// ([`State::apply_engine`]); the policy's Python effects are made from [`Effects::tuples`] only when read. A batch
/// (`decide_batch`) applies a line's effects at once, with the line's own text and twin: its effects keep no copy.
#[pyclass(module = "rwcore._native", frozen)]
pub struct Effects {
    pub(crate) effects: Vec<d::Effect>,
    pub(crate) problems: d::Problems,
    pub(crate) record: Option<Arc<StoredRecord>>,
    pub(crate) text: Option<Vec<u8>>,
    pub(crate) twin: Option<rw1::Twin<'static>>,
    pub(crate) now: f64,
}

impl Effects {
    /// A decision's effects with what applying them needs: the record the decision looked up (kept when a handoff
    /// opens with it), the line's text, and its twin (kept when the thread is fed it).
    pub(crate) fn of(
        effects: Vec<d::Effect>,
        problems: d::Problems,
        looked_up: Option<&Bound<'_, PyAny>>,
        text: Option<Vec<u8>>,
        twin: Option<&rw1::Twin<'_>>,
        now: f64,
    ) -> PyResult<Effects> {
        let opens_with_lookup = effects.iter().any(|e| {
            matches!(
                e,
                d::Effect::OpenHandoff {
                    record: d::RecordOf::Lookup,
                    ..
                }
            )
        });
        let fed = effects.iter().any(|e| matches!(e, d::Effect::FeedThread));
        Ok(Effects {
            record: match looked_up {
                Some(r) if opens_with_lookup => Some(Arc::new(record_of(r)?)),
                _ => None,
            },
            twin: twin.filter(|_| fed).map(|t| d::owned_twin(t.clone())),
            effects,
            problems,
            text,
            now,
        })
    }
}

#[pymethods]
impl Effects {
    fn __len__(&self) -> usize {
        self.effects.len()
    }

    /// The effects as the tuples `gatekeeper.policy.decide` makes the policy's effects of.
    fn tuples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for e in &self.effects {
            out.append(crate::decision::effect_py(py, e)?)?;
        }
        Ok(out)
    }
}

/// A binding change an applied decision makes in the batch's overlay: bound (true) or released, of (item, ask),
/// by this holder.
pub(crate) struct BindingOp {
    pub(crate) bind: bool,
    pub(crate) item: Vec<u8>,
    pub(crate) ask: Vec<u8>,
    pub(crate) holder: Vec<u8>,
}

impl State {
    fn apply_engine_impl<'py>(
        &mut self,
        py: Python<'py>,
        effects: &Bound<'py, Effects>,
        problems: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let fx = effects.get();
        let theirs = match &fx.problems {
            d::Problems::Own(_) => Vec::new(),
            d::Problems::Gate | d::Problems::Parse => problems
                .try_iter()?
                .map(|p| finding_of(&p?))
                .collect::<PyResult<_>>()?,
        };
        let (ops, touched) = self.apply_effects(fx, &theirs, None)?;
        let bindings = PyList::empty(py);
        for op in ops {
            bindings.append((
                if op.bind { "bind" } else { "release" },
                string(py, &op.item)?,
                string(py, &op.ask)?,
                string(py, &op.holder)?,
            ))?;
        }
        let touched = touched
            .iter()
            .map(|t| string(py, t))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((bindings, PyList::new(py, touched)?))
    }

    /// Apply the effects (`theirs`: the decision's problems when they are the gate's or the parser's). Returns the
    /// binding changes for the overlay and the handoffs (and questions) whose place in the indexes may change.
    pub(crate) fn apply_effects(
        &mut self,
        fx: &Effects,
        theirs: &[Finding],
        line: Option<(&[u8], Option<&rw1::Twin<'_>>)>,
    ) -> PyResult<(Vec<BindingOp>, Vec<Vec<u8>>)> {
        // the line's text and twin: the caller's when it applies the effects at once (a batch), else kept in them
        let (text, twin) = match line {
            Some((text, twin)) => (Some(text), twin),
            None => (fx.text.as_deref(), fx.twin.as_ref()),
        };
        let mut bindings = Vec::new();
        let mut touched: Vec<Vec<u8>> = Vec::new();
        for e in &fx.effects {
            match e {
                d::Effect::RememberLine { id, entry } => {
                    let problems = match &fx.problems {
                        d::Problems::Own(own) => own.clone(),
                        d::Problems::Gate | d::Problems::Parse => theirs.to_vec(),
                    };
                    if entry.typ == b"AQ" {
                        touched.push(id.clone());
                    }
                    let line = StoredLine {
                        digest: entry.digest.clone(),
                        typ: entry.typ.clone(),
                        verdict: entry.verdict.code().as_bytes().to_vec(),
                        reason: entry.reason.map(|r| r.as_bytes().to_vec()),
                        at: fx.now,
                        re: entry.re.clone(),
                        problems,
                        text: if entry.keep_text {
                            text.map(<[u8]>::to_vec)
                        } else {
                            None
                        },
                        answered: None,
                        unanswered_at: None,
                    };
                    self.inner.remember_line(id, line);
                }
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
                    let record = match record {
                        d::RecordOf::None => None,
                        d::RecordOf::Lookup => fx.record.clone(),
                        d::RecordOf::Handoff(of) => match self.inner.handoffs.get(&of[..]) {
                            Some(h) => h.record.clone(),
                            None => {
                                return Err(PyKeyError::new_err(
                                    String::from_utf8_lossy(of).into_owned(),
                                ))
                            }
                        },
                    };
                    let handoff = StoredHandoff {
                        item: item.clone(),
                        ask: ask.clone(),
                        exec_ask: *exec_ask,
                        record,
                        bound: *bound,
                        holder: holder.clone(),
                        relay_of: relay_of.clone(),
                        ..StoredHandoff::default()
                    };
                    self.inner.open_handoff(id, handoff);
                    touched.push(id.clone());
                }
                d::Effect::Supersede { ho, by } => {
                    self.inner.supersede(ho, by).map_err(error)?;
                    touched.push(ho.clone());
                }
                d::Effect::RecordReadback {
                    id,
                    ho,
                    passed,
                    exp,
                } => {
                    let rb = StoredReadback {
                        ho: ho.clone(),
                        passed: *passed,
                        exp: exp.clone(),
                        refused: false,
                    };
                    self.inner.record_readback(id, rb);
                }
                d::Effect::PassReadback { ho, rb } => {
                    self.inner.pass_readback(ho, rb).map_err(error)?;
                    touched.push(ho.clone());
                }
                d::Effect::RefuseReadback { rb } => {
                    self.inner.refuse_readback(rb).map_err(error)?
                }
                d::Effect::Clear { ho, rb } => {
                    self.inner.clear(ho, rb).map_err(error)?;
                    touched.push(ho.clone());
                }
                d::Effect::FeedThread => {
                    let Some(twin) = twin else {
                        return Err(PyValueError::new_err(
                            "a line fed to the thread without its message",
                        ));
                    };
                    let inner = &mut self.inner;
                    crate::guarded(|| inner.feed(twin))?.map_err(PyValueError::new_err)?;
                    touched.extend(self.inner.fed_touches(twin));
                }
                d::Effect::Bind {
                    item, ask, holder, ..
                } => bindings.push(BindingOp {
                    bind: true,
                    item: item.clone(),
                    ask: ask.clone(),
                    holder: holder.clone(),
                }),
                d::Effect::Release {
                    item,
                    ask,
                    holder,
                    ho,
                } => {
                    bindings.push(BindingOp {
                        bind: false,
                        item: item.clone(),
                        ask: ask.clone(),
                        holder: holder.clone(),
                    });
                    self.inner.unbind(ho);
                    touched.push(ho.clone());
                }
                d::Effect::Relay { ho, by } => self.inner.relay(ho, by).map_err(error)?,
                d::Effect::AnswerQuestion { aq, by } => {
                    self.inner.answer_question(aq, by).map_err(error)?;
                    touched.push(aq.clone());
                }
            }
        }
        Ok((bindings, touched))
    }
}
