//! A route's batch decided in two calls instead of a Python loop over its lines (`gatekeeper.processor`):
//! [`prepare_batch`] screens and parses every line once and says what the batch must load (the state entries its
//! lines name, the records of its handoffs); [`decide_batch`] decides the lines in order against what was loaded,
//! applies each decision's effects to its conversation's state and the batch's bindings, and returns the decisions
//! with what the save and the lifecycle index need (the conversations changed, the handoffs touched).
//!
//! The rows, the effects and the state are the engine's, as for one line (`decide_line`); what this adds is the
//! batch's own bookkeeping, which the processor did line by line: a conversation with a held line queues its later
//! lines behind it, a decision's effects are applied before the next line of its conversation is decided. Any error
//! (a state the decision cannot read, a Python error met reading the records, a panic: raised as a `RuntimeError`,
//! never as pyo3's `PanicException`, which no `except Exception` catches) is raised whole: the
//! processor then decides the batch again from a fresh load line by line in Python, each line under its own guard,
//! so a line's bug becomes that line's `internal-error` dead letter as before.

use std::collections::{HashMap, HashSet};

use engine::decide::{self as d, Finding};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString, PyTuple};

use crate::decision::{proof_of, DecideRoute};
use crate::fields::{Backed, Fields, Kept, MessageKit};
use crate::state::{Effects, State};
use crate::{guarded, opt_string, opt_value, string, value};

/// Maps keyed by what agents choose (conversation ids): foldhash, seeded per process.
type Hashed = foldhash::fast::RandomState;

/// One line as the gate and the parser left it.
enum Prep {
    /// refused by the gate's input rules: their findings
    Refused(Vec<Finding>),
    /// not parsed: its twin (the raw fields a tombstone reads) and the parser's errors
    Invalid(Kept, Vec<Finding>),
    /// a message: its twin (held for the `rwcore.Message` made of it), the message, and whether the route's own
    /// profile parsed it (no `p=` switched to another)
    Parsed(Py<Fields>, Py<PyAny>, bool),
}

/// A route's lines screened and parsed (see [`prepare_batch`]).
#[pyclass(module = "rwcore._native", frozen)]
pub struct PreparedBatch {
    lines: Vec<Prep>,
}

#[pymethods]
impl PreparedBatch {
    fn __len__(&self) -> usize {
        self.lines.len()
    }
}

/// A raw field a tombstone reads: the value when it is text.
fn raw_text<'a>(v: &'a Option<rw1::Value<'_>>) -> Option<&'a [u8]> {
    match v {
        Some(rw1::Value::Text(t)) => Some(t),
        _ => None,
    }
}

/// Screen and parse a route's lines (`values`, each with its `conversations` entry) under the route's profile
/// (`switch` finds the profile a `p=` slot names; `message_kit` makes a parsed line's `rwcore.Message`, see
/// `fields::MessageKit`; `record_key` is `RecordKey`). Returns the prepared batch, the ids each conversation's lines
/// name (`policy.state.line_ids`: what the store loads), and the (item, ask) of every handoff (its record and
/// binding are loaded with the batch).
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn prepare_batch<'py>(
    py: Python<'py>,
    route: &Bound<'py, DecideRoute>,
    values: Vec<Bound<'py, PyBytes>>,
    conversations: Vec<Option<Bound<'py, PyString>>>,
    switch: &Bound<'py, PyAny>,
    message_kit: &Bound<'py, MessageKit>,
    record_key: &Bound<'py, PyAny>,
) -> PyResult<(PreparedBatch, Bound<'py, PyDict>, Bound<'py, PySet>)> {
    // a panic is a bug, raised as the Python error the processor decides the batch line by line for
    guarded(|| {
        prepare_all(
            py,
            route,
            &values,
            &conversations,
            switch,
            message_kit.get(),
            record_key,
        )
    })?
}

#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn prepare_all<'py>(
    py: Python<'py>,
    route: &Bound<'py, DecideRoute>,
    values: &[Bound<'py, PyBytes>],
    conversations: &[Option<Bound<'py, PyString>>],
    switch: &Bound<'py, PyAny>,
    message_kit: &MessageKit,
    record_key: &Bound<'py, PyAny>,
) -> PyResult<(PreparedBatch, Bound<'py, PyDict>, Bound<'py, PySet>)> {
    let route = route.get();
    let wants = PyDict::new(py);
    let keys = PySet::empty(py)?;
    let mut lines = Vec::with_capacity(values.len());
    for (raw, conv) in values.iter().zip(conversations.iter()) {
        let named = match conv {
            Some(c) => Some(match wants.get_item(c)? {
                Some(found) => found.cast_into::<PySet>()?,
                None => {
                    let set = PySet::empty(py)?;
                    wants.set_item(c, &set)?;
                    set
                }
            }),
            None => None,
        };
        let bytes = raw.as_bytes();
        let screened = engine::gate::screen(bytes, route.max_line_bytes);
        if let Err(found) = screened {
            lines.push(Prep::Refused(
                found.into_iter().map(Finding::from).collect(),
            ));
            continue;
        }
        let mut errors: Vec<Finding> = Vec::new();
        let mut own_profile = true;
        let kept = Kept::try_new(Backed::Bytes(raw.clone().into()), |value| {
            let (parsed, _) = crate::run(py, value.bytes(), &route.grammar, switch)?;
            own_profile = parsed.switched.is_none();
            errors = parsed.errors.into_iter().map(Finding::from).collect();
            Ok::<_, PyErr>(parsed.twin)
        })?;
        if !errors.is_empty() {
            let twin = kept.borrow_dependent();
            if let Some(named) = &named {
                for id in [twin.id.as_deref(), raw_text(&twin.re)]
                    .into_iter()
                    .flatten()
                {
                    named.add(string(py, id)?)?;
                }
            }
            lines.push(Prep::Invalid(kept, errors));
            continue;
        }
        let fields = Bound::new(py, Fields::new(kept))?;
        let message = message_kit.message(&fields)?;
        let twin = fields.get().twin();
        if let Some(named) = &named {
            named.add(opt_string(py, twin.id.as_deref())?)?;
            let re = opt_value(py, &twin.re)?;
            if re.is_truthy()? {
                named.add(&re)?;
            }
            if let Some(ctx) = twin.slot(b"ctx") {
                let ctx = value(py, ctx)?;
                if ctx.is_instance_of::<PyString>() {
                    named.add(ctx)?;
                } else if let Ok(many) = ctx.cast::<PyTuple>() {
                    for c in many.iter() {
                        named.add(c.str()?)?;
                    }
                }
            }
        }
        if twin.typ.as_deref() == Some(b"HO".as_slice()) && twin.item.is_some() {
            let ask = match twin.slot(b"ask") {
                Some(a) => value(py, a)?.str()?,
                None => PyString::new(py, "None"),
            };
            keys.add(record_key.call1((opt_value(py, &twin.item)?, ask))?)?;
        }
        lines.push(Prep::Parsed(fields.unbind(), message.unbind(), own_profile));
    }
    Ok((PreparedBatch { lines }, wants, keys))
}

/// What `decide_batch` makes its Python values with, read once per batch: `(Decision, verdicts by code, reasons by
/// code, problem, EngineEffects, repeat, ConversationState, RecordKey, queued)`. `repeat(state, message, clears)`
/// is the decision of a line that repeats its stored first one; `queued(conversation, now)` that of a line behind a
/// held one.
struct Kit<'py> {
    decision: Bound<'py, PyAny>,
    verdicts: Bound<'py, PyDict>,
    reasons: Bound<'py, PyDict>,
    problem: Bound<'py, PyAny>,
    engine_effects: Bound<'py, PyAny>,
    repeat: Bound<'py, PyAny>,
    queued: Bound<'py, PyAny>,
    conversation_state: Bound<'py, PyAny>,
    record_key: Bound<'py, PyAny>,
}

impl<'py> Kit<'py> {
    fn of(kit: &Bound<'py, PyTuple>) -> PyResult<Kit<'py>> {
        let item = |i: usize| kit.get_item(i);
        Ok(Kit {
            decision: item(0)?,
            verdicts: item(1)?.cast_into()?,
            reasons: item(2)?.cast_into()?,
            problem: item(3)?,
            engine_effects: item(4)?,
            repeat: item(5)?,
            conversation_state: item(6)?,
            record_key: item(7)?,
            queued: item(8)?,
        })
    }

    fn problems(&self, fs: &[Finding]) -> PyResult<Bound<'py, PyTuple>> {
        let py = self.problem.py();
        let mut out = Vec::with_capacity(fs.len());
        for f in fs {
            out.push(self.problem.call1((
                &*f.code,
                string(py, &f.message)?,
                f.tier.as_deref(),
                opt_string(py, f.slot.as_deref())?,
                opt_string(py, f.expected.as_deref())?,
                opt_string(py, f.got.as_deref())?,
            ))?);
        }
        PyTuple::new(py, out)
    }
}

fn clears_py<'py>(py: Python<'py>, c: &Option<(Vec<u8>, Vec<u8>)>) -> PyResult<Bound<'py, PyAny>> {
    match c {
        None => Ok(py.None().into_bound(py)),
        Some((a, b)) => Ok(PyTuple::new(py, [string(py, a)?, string(py, b)?])?.into_any()),
    }
}

/// Decide a prepared batch's lines in order (`lines`: each one's `(value, conversation, first_seen, replay,
/// partition, sender)`), each against its conversation's loaded state (`states`, changed in place as each
/// decision's effects are applied) and the batch's records and bindings (`overlay`, `policy.apply.Overlay`, its
/// bindings changed in place). Returns the decisions, the conversations whose state changed, and for each
/// conversation of a line with an input partition the handoffs (and questions) its decisions touched. Raises on any
/// error: see the module.
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn decide_batch<'py>(
    py: Python<'py>,
    batch: &Bound<'py, PreparedBatch>,
    route: &Bound<'py, DecideRoute>,
    lines: Vec<Bound<'py, PyTuple>>,
    states: &Bound<'py, PyDict>,
    overlay: &Bound<'py, PyAny>,
    now: f64,
    kit: &Bound<'py, PyTuple>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PySet>, Bound<'py, PyDict>)> {
    // a panic is a bug, raised as the Python error the processor decides the batch line by line for
    guarded(|| decide_all(py, batch, route, &lines, states, overlay, now, kit))?
}

#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn decide_all<'py>(
    py: Python<'py>,
    batch: &Bound<'py, PreparedBatch>,
    route: &Bound<'py, DecideRoute>,
    lines: &[Bound<'py, PyTuple>],
    states: &Bound<'py, PyDict>,
    overlay: &Bound<'py, PyAny>,
    now: f64,
    kit: &Bound<'py, PyTuple>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PySet>, Bound<'py, PyDict>)> {
    let kit = Kit::of(kit)?;
    let prepared = &batch.get().lines;
    if prepared.len() != lines.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a batch's lines and its prepared lines differ in number",
        ));
    }
    let route = route.get();
    let policy = route.policy();
    let decisions = PyList::empty(py);
    let changed = PySet::empty(py)?;
    let hit = PyDict::new(py);
    // keyed by conversation ids, which agents choose: foldhash, seeded per process (SipHash was a hundredth of a
    // line for two lookups)
    let mut held: HashSet<Vec<u8>, Hashed> = HashSet::default();
    let mut conv_problems: HashMap<Vec<u8>, Option<Finding>, Hashed> = HashMap::default();
    let hold = kit
        .verdicts
        .get_item("hold")?
        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("hold"))?;
    let state_native = pyo3::intern!(py, "native");
    let changing = pyo3::intern!(py, "changing");
    for (line, prep) in lines.iter().zip(prepared) {
        let conversation = line.get_item(1)?;
        let conv = conversation.cast::<PyString>().ok().cloned();
        let conv_bytes = conv.as_ref().map(crate::text).transpose()?;
        if let Some(c) = &conv_bytes {
            if held.contains(&c[..]) {
                decisions.append(kit.queued.call1((&conversation, now))?)?;
                continue;
            }
        }
        let first_seen: Option<f64> = line.get_item(2)?.extract()?;
        let replay: bool = line.get_item(3)?.is_truthy()?;
        let partition = line.get_item(4)?;
        let sender = line.get_item(5)?;
        let state_py = match &conv {
            Some(c) => match states.get_item(c)? {
                Some(s) => s,
                None => kit.conversation_state.call0()?,
            },
            None => kit.conversation_state.call0()?,
        };
        let native = state_py.getattr(state_native)?.cast_into::<State>()?;
        let conversation_problem = match &conv_bytes {
            Some(c) => match conv_problems.get(&c[..]) {
                Some(found) => found.clone(),
                None => {
                    let found = engine::gate::conversation_problem(c).map(Finding::from);
                    conv_problems.insert(c.to_vec(), found.clone());
                    found
                }
            },
            None => None,
        };
        let line_view = match prep {
            Prep::Refused(_) => d::Line::Refused,
            Prep::Invalid(kept, _) => {
                let t = kept.borrow_dependent();
                d::Line::Invalid(d::RawFields {
                    id: t.id.as_deref(),
                    from: raw_text(&t.from),
                    typ: t.typ.as_deref(),
                    re: raw_text(&t.re),
                })
            }
            Prep::Parsed(fields, _, _) => d::Line::Parsed(fields.get().twin()),
        };
        let proof = proof_of(Some(&sender))?;
        let value = line.get_item(0)?.cast_into::<PyBytes>()?;
        let raw = value.as_bytes();
        // the line's text as the gate read it (the same bytes), when the gate let it through
        let text = match prep {
            Prep::Refused(_) => None,
            _ => Some(raw),
        };
        let (outcome, looked_up) = {
            let mut env = route.env(py, native.borrow_mut(), overlay, &kit.record_key);
            let outcome = d::decide(
                raw,
                conv_bytes.as_deref(),
                conversation_problem,
                line_view,
                &mut env,
                &policy,
                now,
                first_seen,
                replay,
                proof.as_ref(),
            );
            if let Some(e) = env.error.take() {
                return Err(e);
            }
            (outcome, env.looked_up.take())
        };
        let message = match prep {
            Prep::Parsed(_, m, _) => Some(m.bind(py)),
            _ => None,
        };
        let dec = match outcome {
            Err(internal) => {
                let message = String::from_utf8_lossy(&internal.message).into_owned();
                return Err(if internal.class == "KeyError" {
                    pyo3::exceptions::PyKeyError::new_err(message)
                } else {
                    pyo3::exceptions::PyAssertionError::new_err(message)
                });
            }
            Ok(d::Outcome::Repeat { clears }) => {
                let decision = kit
                    .repeat
                    .call1((&state_py, message, clears_py(py, &clears)?))?;
                if let Some(c) = conv_bytes {
                    if decision.getattr(pyo3::intern!(py, "verdict"))?.is(&hold) {
                        held.insert(c.into_owned());
                    }
                }
                decisions.append(decision)?;
                continue;
            }
            Ok(d::Outcome::Decided(dec)) => dec,
        };
        let is_hold = matches!(dec.verdict, d::Verdict::Hold);
        // a line the state keeps the text of: its parse is the one a reply to it reads
        let keeps_text = dec
            .effects
            .iter()
            .any(|e| matches!(e, d::Effect::RememberLine { entry, .. } if entry.keep_text));
        let theirs = their_problems(&dec, prep);
        let text_py = text.map(|_| &value);
        let (decision, effects) = decision_py(
            &kit, dec, prep, message, text_py, &state_py, overlay, looked_up, now,
        )?;
        decisions.append(decision)?;
        if let (Some(effects), Some(c)) = (effects, &conv) {
            state_py.call_method0(changing)?;
            let twin = match prep {
                Prep::Parsed(fields, _, _) => Some(fields.get().twin()),
                _ => None,
            };
            let line = text.map(|t| (t, twin));
            let (ops, touched) = native
                .borrow_mut()
                .apply_effects(effects.get(), theirs, line)?;
            for op in ops {
                let key = kit
                    .record_key
                    .call1((string(py, &op.item)?, string(py, &op.ask)?))?;
                let name = if op.bind { "bind" } else { "release" };
                overlay.call_method1(name, (key, string(py, &op.holder)?))?;
            }
            if let (true, Prep::Parsed(fields, _, true)) = (keeps_text, prep) {
                route.keep_parsed(fields.get().kept());
            }
            changed.add(c)?;
            if !partition.is_none() {
                let handoffs = match hit.get_item(c)? {
                    Some(found) => found.cast_into::<PySet>()?,
                    None => {
                        let set = PySet::empty(py)?;
                        hit.set_item(c, &set)?;
                        set
                    }
                };
                for t in touched {
                    handoffs.add(string(py, &t)?)?;
                }
            }
        }
        if is_hold {
            if let Some(c) = conv_bytes {
                held.insert(c.into_owned());
            }
        }
    }
    Ok((decisions, changed, hit))
}

/// The decision's problems when they are the gate's or the parser's (the prepared line holds them).
fn their_problems<'a>(dec: &d::Decision, prep: &'a Prep) -> &'a [Finding] {
    match (&dec.problems, prep) {
        (d::Problems::Gate, Prep::Refused(found)) => found,
        (d::Problems::Parse, Prep::Invalid(_, errors)) => errors,
        _ => &[],
    }
}

/// The policy's `Decision` of the engine's decision of a line, and its effects (`state::Effects`) to apply, when it
/// has any. `text` is the line as the gate read it (the consumed value); `looked_up` the record the decision found
/// for a handoff.
#[allow(clippy::too_many_arguments)]
fn decision_py<'py>(
    kit: &Kit<'py>,
    dec: d::Decision,
    prep: &Prep,
    message: Option<&Bound<'py, PyAny>>,
    text: Option<&Bound<'py, PyBytes>>,
    state: &Bound<'py, PyAny>,
    overlay: &Bound<'py, PyAny>,
    looked_up: Option<Bound<'py, PyAny>>,
    now: f64,
) -> PyResult<(Bound<'py, PyAny>, Option<Bound<'py, Effects>>)> {
    let py = kit.decision.py();
    let problems = match &dec.problems {
        d::Problems::Own(own) => kit.problems(own)?,
        _ => kit.problems(their_problems(&dec, prep))?,
    };
    let notes = kit.problems(&dec.notes)?;
    let verdict = kit
        .verdicts
        .get_item(dec.verdict.code())?
        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(dec.verdict.code().to_owned()))?;
    let reason = match dec.reason {
        Some(r) => Some(
            kit.reasons
                .get_item(r)?
                .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(r.to_owned()))?,
        ),
        None => None,
    };
    let clears = clears_py(py, &dec.clears)?;
    let with_message = if dec.message { message } else { None };
    let (native, effects_py) = if dec.effects.is_empty() {
        (None, PyTuple::empty(py).into_any())
    } else {
        // no copy of the text or the twin: `decide_all` applies the effects at once, with the line's own
        let native = Bound::new(
            py,
            Effects::of(
                dec.effects,
                dec.problems,
                looked_up.as_ref(),
                None,
                None,
                now,
            )?,
        )?;
        // the text as the gate read it, bytes: decoded only if a value of the effects is read
        let text_py = match text {
            Some(v) => v.clone().into_any(),
            None => py.None().into_bound(py),
        };
        let source = (&problems, message, text_py, now, state, overlay).into_pyobject(py)?;
        let effects_py = kit.engine_effects.call1((&native, source))?;
        (Some(native), effects_py)
    };
    let decision = kit.decision.call1((
        verdict,
        reason,
        &problems,
        notes,
        with_message,
        now,
        false,
        dec.raise_alert,
        effects_py,
        clears,
    ))?;
    Ok((decision, native))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PreparedBatch>()?;
    m.add_function(wrap_pyfunction!(prepare_batch, m)?)?;
    m.add_function(wrap_pyfunction!(decide_batch, m)?)
}
