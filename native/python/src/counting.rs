//! A finished batch's lines counted in one call (the worker's `gatekeeper.consumers.accounting.account`): what
//! every line adds to the metrics that is the same for most lines, read from the worker's own values.
//!
//! Nearly every line is forwarded with nothing to say about it (no problem, note, alert, repeat or forced hold):
//! all it adds is its latency and one to its route's forwarded lines of its type. Counting those line by line in
//! Python read about ten attributes a line and was the largest part of the worker's own Python a line; here they
//! are read by the extension, and only the places of the other lines go back, for the worker to count and log one
//! by one as before.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyTuple};

/// A batch's forwarded lines by (route, type), kept in the order first met: a batch has a handful of pairs, and a
/// list searched by identity first finds them without hashing a string a line.
struct Plain<'py> {
    counts: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>, u64)>,
}

impl<'py> Plain<'py> {
    fn add(&mut self, route: &Bound<'py, PyAny>, typ: &Bound<'py, PyAny>) -> PyResult<()> {
        for (r, t, n) in &mut self.counts {
            if r.is(route) && t.is(typ) {
                *n += 1;
                return Ok(());
            }
        }
        for (r, t, n) in &mut self.counts {
            if r.eq(route)? && t.eq(typ)? {
                *n += 1;
                return Ok(());
            }
        }
        self.counts.push((route.clone(), typ.clone(), 1));
        Ok(())
    }
}

/// The lines of a finished batch (`done`: its `(Pending, Decision)` pairs) counted: `(seconds, plain, others)`.
/// `seconds` maps each route to its lines' latencies (`now` less each line's `first_seen`, none below zero, in the
/// lines' order); `plain` maps `(route, type)` to the number of lines forwarded with nothing else to count (the
/// verdict `forward` itself, not repeated, no alert raised, no problem or note, not forced out of a hold; the type
/// is the message's, `"none"` without one); `others` lists the places in `done` of every other line.
#[pyfunction]
fn count_done<'py>(
    py: Python<'py>,
    done: &Bound<'py, PyList>,
    now: f64,
    forward: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyList>)> {
    let seconds = PyDict::new(py);
    let others = PyList::empty(py);
    let none_type = pyo3::intern!(py, "none").clone().into_any();
    let mut plain = Plain { counts: Vec::new() };
    // the route's latency list, kept while the lines are of one route (a batch's lines come a route at a time)
    let mut current: Option<(Bound<'py, PyAny>, Bound<'py, PyList>)> = None;
    for (place, item) in done.iter().enumerate() {
        let pair = item.cast_into::<PyTuple>()?;
        let (p, d) = (pair.get_item(0)?, pair.get_item(1)?);
        let route = p.getattr(pyo3::intern!(py, "route"))?;
        let first_seen: f64 = p.getattr(pyo3::intern!(py, "first_seen"))?.extract()?;
        let list = match &current {
            Some((r, list)) if r.is(&route) => list.clone(),
            _ => {
                let list = match seconds.get_item(&route)? {
                    Some(found) => found.cast_into::<PyList>()?,
                    None => {
                        let made = PyList::empty(py);
                        seconds.set_item(&route, &made)?;
                        made
                    }
                };
                current = Some((route.clone(), list.clone()));
                list
            }
        };
        list.append(PyFloat::new(py, (now - first_seen).max(0.0)))?;
        let is_plain = d.getattr(pyo3::intern!(py, "verdict"))?.is(forward)
            && !d.getattr(pyo3::intern!(py, "repeated"))?.is_truthy()?
            && !d.getattr(pyo3::intern!(py, "raise_alert"))?.is_truthy()?
            && d.getattr(pyo3::intern!(py, "problems"))?.len()? == 0
            && d.getattr(pyo3::intern!(py, "notes"))?.len()? == 0
            && p.getattr(pyo3::intern!(py, "forced"))?.is_none();
        if !is_plain {
            others.append(place)?;
            continue;
        }
        let message = d.getattr(pyo3::intern!(py, "message"))?;
        if message.is_none() {
            plain.add(&route, &none_type)?;
        } else {
            plain.add(&route, &message.getattr(pyo3::intern!(py, "type"))?)?;
        }
    }
    let counts = PyDict::new(py);
    for (route, typ, n) in plain.counts {
        counts.set_item(PyTuple::new(py, [route, typ])?, n)?;
    }
    Ok((seconds, counts, others))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(count_done, m)?)?;
    Ok(())
}
