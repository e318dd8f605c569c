//! A fetched partition's records taken in (the worker's `gatekeeper.consumers.intake.take_in`): each record becomes
//! its `Source` and its pending line, with its conversation, in one call a partition rather than a Python loop a
//! record.
//!
//! The conversation's rule, here only (`conversation_of`: the worker's intake and, through
//! `intake.conversation_of`, replay): the key as UTF-8, else the first header of the route's `conversation_header`
//! name with a value, as UTF-8 (a value that is not: no conversation), else none.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

/// A record's headers as the worker keeps them: `(name, value)` pairs, each name a `str` (`str(name)`), each value
/// `bytes` (`bytes(value)`; a missing value is empty).
fn headers_of<'py>(py: Python<'py>, headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let mut pairs = Vec::new();
    for item in headers.try_iter()? {
        let item = item?;
        let (name, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item.extract()?;
        let name = if name.is_exact_instance_of::<PyString>() {
            name
        } else {
            name.str()?.into_any()
        };
        let value = if value.is_none() {
            PyBytes::new(py, b"").into_any()
        } else if value.is_exact_instance_of::<PyBytes>() {
            value
        } else {
            py.get_type::<PyBytes>().call1((value,))?
        };
        pairs.push(PyTuple::new(py, [name, value])?);
    }
    PyTuple::new(py, pairs)
}

/// A record's conversation by the module's rule, or None: `key` (bytes or None), `headers` (`(name, value)` pairs,
/// read as the intake reads a record's), `header` (the route's `conversation_header`, or None).
#[pyfunction]
#[pyo3(name = "conversation_of")]
fn conversation_of_record<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    headers: &Bound<'py, PyAny>,
    header: Option<&Bound<'py, PyString>>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let header = header.map(|h| h.to_str()).transpose()?;
    conversation_of(py, key, &headers_of(py, headers)?, header)
}

/// The record's conversation (see the module's rule), or None.
fn conversation_of<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    headers: &Bound<'py, PyTuple>,
    header: Option<&str>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    if let Ok(key) = key.cast::<PyBytes>() {
        if let Ok(text) = std::str::from_utf8(key.as_bytes()) {
            if !text.is_empty() {
                return Ok(Some(PyString::new(py, text)));
            }
        }
    }
    let Some(header) = header else {
        return Ok(None);
    };
    for pair in headers.iter() {
        let pair = pair.cast_into::<PyTuple>()?;
        let name = pair.get_item(0)?;
        if name.cast::<PyString>()?.to_str().ok() != Some(header) {
            continue;
        }
        let value = pair.get_item(1)?;
        let value = value.cast::<PyBytes>()?.as_bytes();
        if value.is_empty() {
            continue;
        }
        return Ok(std::str::from_utf8(value)
            .ok()
            .map(|text| PyString::new(py, text)));
    }
    Ok(None)
}

/// One fetched partition's records (`records`: aiokafka's, or anything with their `offset`, `key`, `value`,
/// `timestamp` and `headers`) taken in: each made `source(topic, partition, offset, value, key, timestamp,
/// headers)` (a missing value empty) and `pending(source, topic, conversation, now)`, appended to `out` in order.
/// Returns the highest offset taken in. Raises what reading a record raises, with nothing of the partition
/// appended.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn take_in<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    topic: &Bound<'py, PyString>,
    partition: &Bound<'py, PyAny>,
    header: Option<&Bound<'py, PyString>>,
    now: &Bound<'py, PyAny>,
    source: &Bound<'py, PyAny>,
    pending: &Bound<'py, PyAny>,
    out: &Bound<'py, PyList>,
) -> PyResult<i64> {
    let header = header.map(|h| h.to_str()).transpose()?;
    let empty = PyBytes::new(py, b"").into_any();
    let no_headers = PyTuple::empty(py);
    let mut made = Vec::new();
    let mut highest = i64::MIN;
    for record in records.try_iter()? {
        let record = record?;
        let offset = record.getattr(pyo3::intern!(py, "offset"))?;
        highest = highest.max(offset.extract()?);
        let key = record.getattr(pyo3::intern!(py, "key"))?;
        let value = record.getattr(pyo3::intern!(py, "value"))?;
        let value = if value.is_none() {
            empty.clone()
        } else {
            value
        };
        let timestamp = record.getattr(pyo3::intern!(py, "timestamp"))?;
        let raw_headers = record.getattr(pyo3::intern!(py, "headers"))?;
        let headers = if raw_headers.is_truthy()? {
            headers_of(py, &raw_headers)?
        } else {
            no_headers.clone()
        };
        let conversation = conversation_of(py, &key, &headers, header)?;
        let src = source.call1((topic, partition, offset, value, key, timestamp, headers))?;
        made.push(pending.call1((src, topic, conversation, now))?);
    }
    for line in made {
        out.append(line)?;
    }
    Ok(highest)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(take_in, m)?)?;
    m.add_function(wrap_pyfunction!(conversation_of_record, m)?)?;
    Ok(())
}
