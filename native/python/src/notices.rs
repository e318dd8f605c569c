//! The refusal notice's binding (`engine::notices`): `gatekeeper.notices.refusal_notice` finds the reason's row and
//! the refused line, and this writes the notice, reading the line's envelope off its parsed twin.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use engine::notices::{self as n, Refused, Rule};

use crate::decision::{finding_of, DecideRoute};
use crate::outcomes::learnt;
use crate::{hold, run, string, text, twin};

/// The notice to the sender of `message` (the refused line, as parsed; `raw` its bytes), dead-lettered for
/// `reason` with `problems` under `route`, by the reason's `rule` (`(why, says, quote)`): `(line, id, re, to,
/// addressee)`, or None when its sender is not told (`engine::notices::told`; `proven`: the agent the record's
/// signature proves) or no line fits. Raises ValueError when a line it writes does not parse (a bug).
#[pyfunction]
#[pyo3(signature = (route, message, raw, problems, reason, rule, sensitive, proven, switch))]
#[allow(clippy::too_many_arguments)]
fn refusal_notice<'py>(
    py: Python<'py>,
    route: &Bound<'py, DecideRoute>,
    message: &Bound<'py, PyAny>,
    raw: &Bound<'py, PyBytes>,
    problems: &Bound<'py, PyAny>,
    reason: &Bound<'py, PyString>,
    rule: (Bound<'py, PyString>, Bound<'py, PyString>, bool),
    sensitive: &Bound<'py, PyAny>,
    proven: Option<Bound<'py, PyString>>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let held = hold(message)?;
    let t = twin(&held)?;
    let shown = |v: &Option<rw1::Value<'_>>| v.as_ref().map(|v| v.py_str().into_owned());
    let (from, to, item) = (shown(&t.from), shown(&t.to), shown(&t.item));
    let refused = Refused {
        id: t.id.as_deref().unwrap_or_default(),
        from: from.as_deref().unwrap_or_default(),
        to: to.as_deref().unwrap_or_default(),
        item: item.as_deref().filter(|i| !i.is_empty()), // an empty item is left out, as the writer leaves it
    };
    let route = route.get();
    let policy = route.notice_route();
    let proven = proven.as_ref().map(text).transpose()?;
    if !n::told(&refused, &policy, proven.as_deref()) {
        return Ok(None);
    }
    let found = problems
        .try_iter()?
        .map(|p| finding_of(&p?))
        .collect::<PyResult<Vec<_>>>()?;
    let slots = learnt(sensitive)?;
    let slots: Vec<&[u8]> = slots.iter().map(Vec::as_slice).collect();
    let (reason, why, says, quote) = (text(reason)?, text(&rule.0)?, text(&rule.1)?, rule.2);
    let rule = Rule {
        reason: &reason,
        why: &why,
        says: &says,
        quote,
    };
    let check = |line: &[u8]| -> PyResult<()> {
        let (parsed, _) = run(py, line, policy.grammar, switch)?;
        if parsed.errors.is_empty() {
            return Ok(());
        }
        let said: Vec<String> = parsed
            .errors
            .iter()
            .map(|e| String::from_utf8_lossy(&e.message).into_owned())
            .collect();
        Err(pyo3::exceptions::PyValueError::new_err(format!(
            "a refusal notice's line does not parse: {}",
            said.join("; ")
        )))
    };
    let written = n::write(
        &refused,
        &rule,
        raw.as_bytes(),
        &found,
        &policy,
        &slots,
        check,
    )?;
    let Some(notice) = written else {
        return Ok(None);
    };
    let made = (
        string(py, &notice.line)?,
        string(py, &notice.id)?,
        string(py, refused.id)?,
        string(py, refused.from)?,
        string(py, refused.to)?,
    );
    Ok(Some(made.into_pyobject(py)?.into_any()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NOTICE_ID_MIN", n::NOTICE_ID_MIN)?;
    m.add("NOTICE_SPAN", n::NOTICE_SPAN)?;
    m.add("REFUSED_BY", n::REFUSED_BY)?;
    m.add_function(wrap_pyfunction!(refusal_notice, m)?)
}
