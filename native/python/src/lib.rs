//! `rwcore._native`: the Python bindings of the `rw1` crate. Each function takes and returns plain Python values
//! and does no work of its own beyond converting them; the logic is `rw1`'s.
//!
//! Strings cross as bytes: a `str` as its UTF-8, or, when it holds a lone surrogate (which UTF-8 cannot carry), as
//! Python's `surrogatepass` encodes it; `rw1` reads both (see `rw1::pytext`), and what it gives back is turned into
//! `str` the same way.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// The protocol's integrity digest (`h=`) of a canonical JSON text already encoded as UTF-8 (with
/// `surrogatepass`): the first 12 hex digits of its SHA-256.
#[pyfunction]
fn digest(data: &Bound<'_, PyBytes>) -> String {
    rw1::digest(data.as_bytes())
}

/// Bytes `rw1` reads, borrowed from a Python string where they can be.
type Text<'a> = Cow<'a, [u8]>;

/// The bytes `rw1` reads for a Python string.
fn text<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    match s.to_str() {
        Ok(t) => Ok(Cow::Borrowed(t.as_bytes())),
        Err(_) => {
            let b = s.call_method1("encode", ("utf-8", "surrogatepass"))?;
            Ok(Cow::Owned(b.cast_into::<PyBytes>()?.as_bytes().to_vec()))
        }
    }
}

fn owned(s: &Bound<'_, PyString>) -> PyResult<Box<[u8]>> {
    Ok(text(s)?.into())
}

fn owned_all(v: &[Bound<'_, PyString>]) -> PyResult<Vec<Box<[u8]>>> {
    v.iter().map(owned).collect()
}

/// The Python string of bytes `rw1` gave back.
fn string<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match std::str::from_utf8(b) {
        Ok(s) => Ok(PyString::new(py, s).into_any()),
        Err(_) => PyBytes::new(py, b).call_method1("decode", ("utf-8", "surrogatepass")),
    }
}

fn opt_string<'py>(py: Python<'py>, b: Option<&[u8]>) -> PyResult<Bound<'py, PyAny>> {
    match b {
        Some(b) => string(py, b),
        None => Ok(py.None().into_bound(py)),
    }
}

/// A profile compiled for the parser (`rw1::Grammar`); rwcore's `Profile` holds one.
#[pyclass(frozen, module = "rwcore._native")]
struct Grammar {
    inner: Arc<rw1::Grammar>,
}

#[pymethods]
impl Grammar {
    /// Compile a merged vocabulary: the profile's declared name (None for the core), its types as (code,
    /// required, allowed), its slots as (key, type), its enums as (name, codes), its agents (None: any), the
    /// tail's limit and `sys.get_int_max_str_digits()`. A slot type it cannot read is a ValueError.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::type_complexity)]
    fn new(
        declared: Option<Bound<'_, PyString>>,
        types: Vec<(
            Bound<'_, PyString>,
            Vec<Bound<'_, PyString>>,
            Vec<Bound<'_, PyString>>,
        )>,
        slots: Vec<(Bound<'_, PyString>, Bound<'_, PyString>)>,
        enums: Vec<(Bound<'_, PyString>, Vec<Bound<'_, PyString>>)>,
        agents: Option<Vec<Bound<'_, PyString>>>,
        tail_max: usize,
        int_max_digits: usize,
    ) -> PyResult<Self> {
        let vocabulary = rw1::Vocabulary {
            declared: declared.as_ref().map(owned).transpose()?,
            types: types
                .iter()
                .map(|(c, r, a)| Ok((owned(c)?, owned_all(r)?, owned_all(a)?)))
                .collect::<PyResult<_>>()?,
            slots: slots
                .iter()
                .map(|(k, t)| Ok((owned(k)?, owned(t)?)))
                .collect::<PyResult<_>>()?,
            enums: enums
                .iter()
                .map(|(n, c)| Ok((owned(n)?, owned_all(c)?)))
                .collect::<PyResult<_>>()?,
            agents: agents.as_deref().map(owned_all).transpose()?,
            tail_max,
            int_max_digits,
        };
        match rw1::Grammar::new(vocabulary) {
            Ok(g) => Ok(Grammar { inner: Arc::new(g) }),
            Err(msg) => Err(PyValueError::new_err(
                String::from_utf8_lossy(&msg).into_owned(),
            )),
        }
    }
}

fn value<'py>(py: Python<'py>, v: &rw1::Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        rw1::Value::Text(t) => string(py, t)?,
        rw1::Value::Int(i) => i.into_pyobject(py)?.into_any(),
        rw1::Value::BigInt(digits) => py
            .get_type::<pyo3::types::PyInt>()
            .call1((digits.as_str(),))?,
        rw1::Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
        rw1::Value::List(items) => {
            let items = items
                .iter()
                .map(|x| value(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any()
        }
    })
}

fn opt_value<'py>(py: Python<'py>, v: &Option<rw1::Value<'_>>) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Some(v) => value(py, v),
        None => Ok(py.None().into_bound(py)),
    }
}

fn problems<'py>(py: Python<'py>, ps: &[rw1::Problem]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for p in ps {
        out.append((
            p.code,
            string(py, &p.message)?,
            opt_string(py, p.slot.as_deref())?,
            opt_string(py, p.expected.as_deref())?,
            opt_string(py, p.got.as_deref())?,
        ))?;
    }
    Ok(out)
}

/// `rw1::parse` of a Python line: the parse and the profile a `p=` switched to (see [`parse`]).
fn run<'py, 'a>(
    py: Python<'py>,
    bytes: &'a [u8],
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(rw1::Parsed<'a>, Option<Bound<'py, PyAny>>)> {
    let chosen: RefCell<Option<Bound<'py, PyAny>>> = RefCell::new(None);
    let failure: RefCell<Option<PyErr>> = RefCell::new(None);
    let find = |name: &[u8]| -> Result<Arc<rw1::Grammar>, Vec<u8>> {
        let found = string(py, name)
            .and_then(|n| switch.call1((n,)))
            .and_then(|prof| {
                let g = prof
                    .getattr("grammar")?
                    .cast_into::<Grammar>()?
                    .get()
                    .inner
                    .clone();
                *chosen.borrow_mut() = Some(prof);
                Ok(g)
            });
        found.map_err(|e| {
            if e.is_instance_of::<PyValueError>(py) {
                e.value(py)
                    .str()
                    .map(|s| s.to_string().into_bytes())
                    .unwrap_or_default()
            } else {
                *failure.borrow_mut() = Some(e);
                Vec::new()
            }
        })
    };
    let parsed = rw1::parse(bytes, &grammar.get().inner, find);
    match failure.into_inner() {
        Some(e) => Err(e),
        None => Ok((parsed, chosen.into_inner())),
    }
}

/// Parse a line under a grammar: `(twin, errors, warnings, switched)`.
///
/// `twin` is `(v, type, id, re, from, to, item, slots, tail)`, as far as the parser got; `slots` is a new
/// `slots_type()` (a dict or a subclass) filled in the line's order, list values as tuples. The findings are `(code, message, slot, expected, got)` tuples. Under the core a `p=` slot calls
/// `switch(name)`, which returns the profile to validate with (an object whose `grammar` is a `Grammar`) or
/// raises ValueError in the words of a finding; `switched` is what it returned, or None.
#[pyfunction]
fn parse<'py>(
    py: Python<'py>,
    line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
    slots_type: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = text(line)?;
    let (parsed, switched) = run(py, &bytes, grammar, switch)?;
    let t = &parsed.twin;
    let slots = slots_type.call0()?;
    {
        let dict = slots.cast::<PyDict>()?;
        for (k, v) in &t.slots {
            dict.set_item(string(py, k)?, value(py, v)?)?;
        }
    }
    let twin = PyTuple::new(
        py,
        [
            opt_string(py, t.v)?,
            opt_string(py, t.typ)?,
            opt_string(py, t.id)?,
            opt_value(py, &t.re)?,
            opt_value(py, &t.from)?,
            opt_value(py, &t.to)?,
            opt_value(py, &t.item)?,
            slots,
            opt_string(py, t.tail)?,
        ],
    )?;
    PyTuple::new(
        py,
        [
            twin.into_any(),
            problems(py, &parsed.errors)?.into_any(),
            problems(py, &parsed.warnings)?.into_any(),
            switched.unwrap_or_else(|| py.None().into_bound(py)),
        ],
    )
}

/// The errors the parser finds in a line (as [`parse`] gives them), and nothing else: what a writer checks its
/// line with.
#[pyfunction]
fn errors<'py>(
    py: Python<'py>,
    line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let bytes = text(line)?;
    let (parsed, _) = run(py, &bytes, grammar, switch)?;
    problems(py, &parsed.errors)
}

/// A value as an f-string writes it (`format(v)`): a string as it is, anything else through its `__format__`.
fn formatted<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(s) = v.cast_exact::<PyString>() {
        return text(s);
    }
    let f = v
        .call_method1("__format__", ("",))?
        .cast_into::<PyString>()?;
    Ok(Cow::Owned(text(&f)?.into_owned()))
}

/// Whether the writer writes a value at all: not None, not equal to "".
fn written(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    if v.is_none() {
        return Ok(false);
    }
    match v.cast_exact::<PyString>() {
        Ok(s) => Ok(!s.to_cow().map(|t| t.is_empty()).unwrap_or(false)),
        Err(_) => v.ne(""),
    }
}

/// A slot's value as the line writes it: a list or tuple joined with `+` (each item as `str` writes it), a
/// boolean `Y` or `N`, anything else formatted.
fn shown<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if v.is_exact_instance_of::<PyString>() {
        return formatted(v);
    }
    if let Ok(b) = v.cast_exact::<pyo3::types::PyBool>() {
        return Ok(Cow::Borrowed(if b.is_true() { b"Y" } else { b"N" }));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for (i, x) in v.try_iter()?.enumerate() {
            if i > 0 {
                out.push(b'+');
            }
            out.extend_from_slice(&text(&x?.str()?)?);
        }
        return Ok(Cow::Owned(out));
    }
    formatted(v)
}

/// Write a twin's line and check it: `(line, errors)`, the errors as [`parse`] gives them (none: the line is
/// valid). The values are written as the reference writes them: the envelope's formatted, a slot's as [`shown`],
/// a value that is None or "" left out, the tail (when truthy) as `str` writes it.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode<'py>(
    py: Python<'py>,
    typ: &Bound<'py, PyAny>,
    id: &Bound<'py, PyAny>,
    envelope: [Bound<'py, PyAny>; 4],
    slots: &Bound<'py, PyDict>,
    tail: &Bound<'py, PyAny>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyList>)> {
    let mut env: [Option<Cow<'_, [u8]>>; 4] = [None, None, None, None];
    for (slot, v) in env.iter_mut().zip(&envelope) {
        if written(v)? {
            *slot = Some(formatted(v)?);
        }
    }
    let items: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = slots.iter().collect();
    let mut texts: Vec<(Text<'_>, Text<'_>)> = Vec::with_capacity(items.len());
    for (k, v) in &items {
        if written(v)? {
            let key = match k.cast::<PyString>() {
                Ok(s) => text(s)?,
                Err(_) => formatted(k)?,
            };
            texts.push((key, shown(v)?));
        }
    }
    let pairs: Vec<(&[u8], &[u8])> = texts.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    let tail_text = if tail.is_truthy()? {
        Some(text(&tail.str()?)?.into_owned())
    } else {
        None
    };
    let line = rw1::encode::line(
        &formatted(typ)?,
        &formatted(id)?,
        [
            env[0].as_deref(),
            env[1].as_deref(),
            env[2].as_deref(),
            env[3].as_deref(),
        ],
        &pairs,
        tail_text.as_deref(),
        &grammar.get().inner,
    );
    let (parsed, _) = run(py, &line, grammar, switch)?;
    Ok((string(py, &line)?, problems(py, &parsed.errors)?))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(digest, m)?)?;
    m.add_function(wrap_pyfunction!(parse, m)?)?;
    m.add_function(wrap_pyfunction!(errors, m)?)?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_class::<Grammar>()?;
    Ok(())
}
