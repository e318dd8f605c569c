//! The reference-compatible checks, lines in (`rwcore._compat`: `check_ho`, `check_rb_full`, `check_dn` and their
//! typed `*_lines` twins): each line parsed here under the profile given (a `p=` slot switches the parse, as
//! `rwcore.parse_line` does), then checked against that profile's grammar, in one call and with no
//! `rwcore.Message` made on the way (making one, and reading it back, was most of what these calls cost). An
//! invalid line's errors are the check's problems (`rw1::checks::invalid_line`); the findings come back as the
//! typed checks' do, `(code, tier, message, slot, expected, got)` tuples.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use rw1::checks::{self, Findings};

use crate::{findings, guarded, owned_texts, refs, run, shown_pairs, string, text, Grammar, Names};

type Found<'py> = (Bound<'py, PyList>, Bound<'py, PyList>);

/// The findings as the typed checks take them (`texts` false), or as the reference returns them: each finding's
/// message only (the compatible API's `(problems, notes)`, made here rather than read back out of the tuples).
fn found<'py>(py: Python<'py>, f: &Findings, texts: bool) -> PyResult<Found<'py>> {
    if !texts {
        return findings(py, f);
    }
    let messages = |ps: &[rw1::Problem]| -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for p in ps {
            out.append(string(py, &p.message)?)?;
        }
        Ok(out)
    };
    Ok((messages(&f.problems)?, messages(&f.notes)?))
}

/// What the parse of the lines found wrong, as the reference says it: each invalid line's errors, in order.
fn invalid(parsed: &[(&[u8], &'static str, &rw1::Parsed<'_>)]) -> Option<Findings> {
    let problems: Vec<_> = parsed
        .iter()
        .flat_map(|(label, code, p)| checks::invalid_line(label, code, &p.errors))
        .collect();
    (!problems.is_empty()).then(|| Findings {
        problems,
        notes: Vec::new(),
    })
}

/// Check 1 of a line: the HO against its record (a mapping of slots to values, read only when the line parses).
#[pyfunction]
#[pyo3(signature = (ho_line, grammar, switch, record, *, texts=false))]
fn ho_check_line<'py>(
    py: Python<'py>,
    ho_line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
    record: &Bound<'py, PyAny>,
    texts: bool,
) -> PyResult<Found<'py>> {
    let g = &grammar.get().inner;
    let bytes = text(ho_line)?;
    let (ho, _) = run(py, &bytes, g, switch)?;
    if let Some(f) = invalid(&[(b"HO", "ho-invalid", &ho)]) {
        return found(py, &f, texts);
    }
    let shown = shown_pairs(record)?;
    let pairs: Vec<(&[u8], &[u8])> = shown.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    found(
        py,
        &guarded(|| checks::ho_check(&ho.twin, &pairs, g))?,
        texts,
    )
}

/// Check 2 of two lines: the readback against its HO, with the sender's withheld criteria (None: the HO's own)
/// and the clock (`YYYYMMDDTHHMMZ`).
#[pyfunction]
#[pyo3(signature = (ho_line, rb_line, grammar, switch, expect_acc, now, *, texts=false))]
#[allow(clippy::too_many_arguments)]
fn rb_check_lines<'py>(
    py: Python<'py>,
    ho_line: &Bound<'py, PyString>,
    rb_line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
    expect_acc: Option<Names<'py>>,
    now: &Bound<'py, PyString>,
    texts: bool,
) -> PyResult<Found<'py>> {
    let g = &grammar.get().inner;
    let (ho_bytes, rb_bytes) = (text(ho_line)?, text(rb_line)?);
    let (ho, _) = run(py, &ho_bytes, g, switch)?;
    let (rb, _) = run(py, &rb_bytes, g, switch)?;
    if let Some(f) = invalid(&[(b"HO", "ho-invalid", &ho), (b"RB", "rb-invalid", &rb)]) {
        return found(py, &f, texts);
    }
    let expect = expect_acc.as_deref().map(owned_texts).transpose()?;
    let expect = expect.as_deref().map(refs);
    let now = text(now)?;
    let f = guarded(|| checks::rb_check(&ho.twin, &rb.twin, g, expect.as_deref(), &now))?;
    found(py, &f, texts)
}

/// Check 3 of two lines, or three: the DN against the HO, and against the readback that made the plan when
/// `rb_line` is given (truthy) and passes check 2 at `now` (`rw1::checks::dn_check_planned`). The readback is read
/// only once the receipt lets the check go on: one that is not a str is then a ValueError (`FormError`).
#[pyfunction]
#[pyo3(signature = (ho_line, dn_line, grammar, switch, rb_line=None, now=None, *, texts=false))]
#[allow(clippy::too_many_arguments)]
fn dn_check_lines<'py>(
    py: Python<'py>,
    ho_line: &Bound<'py, PyString>,
    dn_line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
    rb_line: Option<Bound<'py, PyAny>>,
    now: Option<Bound<'py, PyString>>,
    texts: bool,
) -> PyResult<Found<'py>> {
    let g = &grammar.get().inner;
    let (ho_bytes, dn_bytes) = (text(ho_line)?, text(dn_line)?);
    let (ho, _) = run(py, &ho_bytes, g, switch)?;
    let (dn, _) = run(py, &dn_bytes, g, switch)?;
    if let Some(f) = invalid(&[(b"HO", "ho-invalid", &ho), (b"DN", "dn-invalid", &dn)]) {
        return found(py, &f, texts);
    }
    let (receipt, go_on) = guarded(|| checks::dn_receipt(&ho.twin, &dn.twin))?;
    if !go_on {
        let f = Findings {
            problems: receipt.problems,
            notes: Vec::new(),
        };
        return found(py, &f, texts);
    }
    let plan = match rb_line {
        Some(line) if line.is_truthy()? => line,
        _ => {
            return found(
                py,
                &guarded(|| checks::dn_check(&ho.twin, &dn.twin, g, None))?,
                texts,
            )
        }
    };
    let Ok(plan) = plan.cast::<PyString>() else {
        let kind = plan.get_type().name()?;
        return Err(PyValueError::new_err(format!(
            "a line is a str, not {kind}"
        )));
    };
    let now = match &now {
        Some(now) => text(now)?,
        None => {
            return Err(PyValueError::new_err(
                "a readback is checked at a time: now is needed",
            ))
        }
    };
    let rb_bytes = text(plan)?;
    let (rb, _) = run(py, &rb_bytes, g, switch)?;
    let f = guarded(|| checks::dn_check_planned(&ho.twin, &dn.twin, g, &rb, &now))?;
    found(py, &f, texts)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ho_check_line, m)?)?;
    m.add_function(wrap_pyfunction!(rb_check_lines, m)?)?;
    m.add_function(wrap_pyfunction!(dn_check_lines, m)?)?;
    Ok(())
}
