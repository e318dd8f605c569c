//! The bindings of the `gk-engine` crate (the gatekeeper's decision engine): plain Python values in and out, the
//! logic the crate's. Findings cross as `(code, tier, message, slot, expected, got)` tuples, as rw1's do.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

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

/// The date and time slots of a parsed message that name no real instant of the calendar: only those slots of
/// `msg.slots` are read.
#[pyfunction]
fn impossible_dates<'py>(
    py: Python<'py>,
    msg: &Bound<'py, PyAny>,
    grammar: &Bound<'py, Grammar>,
) -> PyResult<Bound<'py, PyList>> {
    let grammar = &grammar.get().inner;
    if grammar.calendar.is_empty() {
        return Ok(PyList::empty(py));
    }
    let slots = msg.getattr(pyo3::intern!(py, "slots"))?;
    let slots = slots.cast::<PyDict>()?;
    let mut values = Vec::new();
    for (key, _) in &grammar.calendar {
        let value = match slots.get_item(string(py, key)?)? {
            Some(v) => match v.cast_into::<PyString>() {
                Ok(s) => Some(text(&s)?.into_owned()),
                Err(_) => None,
            },
            None => None,
        };
        values.push((key.clone(), value));
    }
    let found = guarded(|| {
        engine::gate::impossible_dates(grammar, |key| {
            values
                .iter()
                .find(|(k, _)| &k[..] == key)
                .and_then(|(_, v)| v.as_deref().map(std::borrow::Cow::Borrowed))
        })
    })?;
    problems(py, &found)
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
    m.add_function(wrap_pyfunction!(impossible_dates, m)?)?;
    m.add_function(wrap_pyfunction!(is_reserved_id, m)?)?;
    m.add_function(wrap_pyfunction!(id_number, m)?)?;
    m.add_function(wrap_pyfunction!(answer_problems, m)?)?;
    m.add_function(wrap_pyfunction!(impossible_date, m)?)?;
    m.add_function(wrap_pyfunction!(authority_table, m)?)?;
    m.add_function(wrap_pyfunction!(authorize, m)?)?;
    m.add("RESERVED_ID_MIN", engine::rules::RESERVED_ID_MIN)?;
    m.add("RESERVED_ID_MAX", engine::rules::RESERVED_ID_MAX)?;
    Ok(())
}

fn opt_text<'a>(
    p: &'a Option<Bound<'_, PyString>>,
) -> PyResult<Option<std::borrow::Cow<'a, [u8]>>> {
    p.as_ref().map(text).transpose()
}

fn target(text: &[u8]) -> PyResult<engine::authority::Target> {
    engine::authority::Target::from_text(text).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err("not a target of the authority table")
    })
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

/// The table's word on a line replying to `target` (its words): None when its sender may send it, else
/// `(line, target, expected)` of the rule that refuses it. `parties` is `(sender, receiver, asker, asked)`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn authorize<'py>(
    py: Python<'py>,
    line: &Bound<'py, PyString>,
    target_text: &Bound<'py, PyString>,
    sender: &Bound<'py, PyString>,
    to: &Bound<'py, PyString>,
    parties: (
        Option<Bound<'py, PyString>>,
        Option<Bound<'py, PyString>>,
        Option<Bound<'py, PyString>>,
        Option<Bound<'py, PyString>>,
    ),
) -> PyResult<Option<(&'static str, &'static str, Bound<'py, PyAny>)>> {
    let kind = target(&text(target_text)?)?;
    let (line, sender, to) = (text(line)?, text(sender)?, text(to)?);
    let (s, r, a, q) = (
        opt_text(&parties.0)?,
        opt_text(&parties.1)?,
        opt_text(&parties.2)?,
        opt_text(&parties.3)?,
    );
    let ps = engine::authority::Parties {
        sender: s.as_deref(),
        receiver: r.as_deref(),
        asker: a.as_deref(),
        asked: q.as_deref(),
    };
    match guarded(|| engine::authority::authorize(&line, kind, &sender, &to, &ps))? {
        None => Ok(None),
        Some(rule) => Ok(Some((
            rule.line,
            rule.target.text(),
            string(py, &rule.expected(&ps))?,
        ))),
    }
}
