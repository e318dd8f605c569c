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
use rw1::keys::KeyMap;

/// The extension's own allocations (the engine's strings, vectors and maps, made and freed for every line) go
/// through mimalloc rather than the C library's malloc, which took about a fifth of a line's instructions. Only
/// memory Rust allocates and frees is concerned: every Python object is made by the interpreter's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod batch;
mod counting;
mod decision;
mod fields;
mod headers;
mod intake;
mod lines;
mod notices;
mod outcomes;
mod record_batch;
mod state;

/// The protocol's integrity digest (`h=`) of a canonical JSON text already encoded as UTF-8 (with
/// `surrogatepass`): the first 12 hex digits of its SHA-256.
#[pyfunction]
fn digest(data: &Bound<'_, PyBytes>) -> String {
    rw1::digest(data.as_bytes())
}

/// `f()`, a panic in it made a RuntimeError: a Rust panic would otherwise reach Python as PanicException, a
/// BaseException that the daemon's `except Exception` (which makes a line an internal-error dead letter) does not
/// catch. rw1 is property-tested not to panic on any input; this is the fence should it ever.
fn guarded<T>(f: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        pyo3::exceptions::PyRuntimeError::new_err(format!("rw1 panicked: {what}"))
    })
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

/// The Python string of bytes `rw1` gave back. The interpreter checks the UTF-8 as it decodes it (checking it in
/// Rust first read every byte twice); bytes it refuses are a lone surrogate as `surrogatepass` wrote it, or not
/// text at all (the decode's error).
fn string<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match PyString::from_bytes(py, b) {
        Ok(s) => Ok(s.into_any()),
        Err(_) => PyBytes::new(py, b).call_method1("decode", ("utf-8", "surrogatepass")),
    }
}

fn opt_string<'py>(py: Python<'py>, b: Option<&[u8]>) -> PyResult<Bound<'py, PyAny>> {
    match b {
        Some(b) => string(py, b),
        None => Ok(py.None().into_bound(py)),
    }
}

/// Python strings, as a list of them.
type Names<'py> = Vec<Bound<'py, PyString>>;
/// (a name, its names): an enum's codes, an ask's execution slots, an alias group.
type Groups<'py> = Vec<(Bound<'py, PyString>, Names<'py>)>;

fn groups(g: &Groups<'_>) -> PyResult<Vec<rw1::grammar::Group>> {
    g.iter()
        .map(|(n, c)| Ok((owned(n)?, owned_all(c)?)))
        .collect()
}

/// A profile compiled (`rw1::Grammar`): for the parser and the checks. rwcore's `Profile` holds one.
#[pyclass(frozen, module = "rwcore._native")]
struct Grammar {
    inner: Arc<rw1::Grammar>,
    /// the vocabulary's slot names as Python strings, made once, each with whether its values are names the
    /// profile lists (an enum's codes, its agents): the keys of a parsed line's slots dict (a string made per key
    /// per line, and hashed again as the dict took it, was a tenth of the compatible parse)
    keys: KeyMap<(Py<PyString>, bool)>,
    /// the names a line's values most often are (the version, the types, the enums' codes, the agents, the
    /// profile's own name) as Python strings, made once: a twin's value that is one of them is not made anew
    names: KeyMap<Py<PyString>>,
}

impl Grammar {
    /// A slot name as a Python string (the vocabulary's own, or a new one for a name it does not have), and
    /// whether the slot's values are names the profile lists.
    fn key<'py>(&self, py: Python<'py>, name: &[u8]) -> PyResult<(Bound<'py, PyAny>, bool)> {
        match self.keys.get(name) {
            Some((k, named)) => Ok((k.bind(py).clone().into_any(), *named)),
            None => Ok((string(py, name)?, false)),
        }
    }

    /// A text that may be one of the profile's names: that name's string, or a new one.
    fn named<'py>(&self, py: Python<'py>, text: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        match self.names.get(text) {
            Some(s) => Ok(s.bind(py).clone().into_any()),
            None => string(py, text),
        }
    }

    /// [`Grammar::named`] of a text the line may lack (None then).
    fn opt_named<'py>(&self, py: Python<'py>, text: Option<&[u8]>) -> PyResult<Bound<'py, PyAny>> {
        match text {
            Some(t) => self.named(py, t),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// A slot's value for a twin, as [`value`] makes it (a list as a `list` when `as_list`, else a tuple); when
    /// `named`, a text that is one of the profile's names is that name's string.
    fn slot_value<'py>(
        &self,
        py: Python<'py>,
        v: &rw1::Value<'_>,
        named: bool,
        as_list: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        match v {
            rw1::Value::Text(t) if named => self.named(py, t),
            rw1::Value::List(items) => {
                let items = items
                    .iter()
                    .map(|x| self.slot_value(py, x, named, as_list))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(if as_list {
                    PyList::new(py, items)?.into_any()
                } else {
                    PyTuple::new(py, items)?.into_any()
                })
            }
            _ => value(py, v),
        }
    }

    /// An envelope slot's value for a twin (None when the line lacks it): [`Grammar::slot_value`].
    fn envelope_value<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        v: &Option<rw1::Value<'_>>,
        as_list: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        match v {
            Some(v) => {
                let named = self.keys.get(key).is_some_and(|(_, named)| *named);
                self.slot_value(py, v, named, as_list)
            }
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// A name as an interned plain `str`; None for a name with a lone surrogate (not UTF-8), then made per use.
fn interned(py: Python<'_>, name: &[u8]) -> Option<Py<PyString>> {
    std::str::from_utf8(name)
        .ok()
        .map(|t| PyString::intern(py, t).unbind())
}

/// Whether a slot's values are names the profile lists: an enum's codes, or agents when the profile lists them.
fn names_listed(check: &rw1::grammar::Check) -> bool {
    match check {
        rw1::grammar::Check::Enum { .. } | rw1::grammar::Check::Id { agents: Some(_) } => true,
        rw1::grammar::Check::List(inner) => names_listed(&inner.check),
        _ => false,
    }
}

#[pymethods]
impl Grammar {
    /// Compile a merged vocabulary: the profile's declared name (None for the core), its types as (code,
    /// required, allowed), its slots as (key, type), its enums as (name, codes), its agents (None: any), the
    /// tail's limit, `sys.get_int_max_str_digits()`, the execution slots per ask, the constraint keys, the
    /// set-valued ones and the alias groups. A slot type it cannot read is a ValueError.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        declared: Option<Bound<'_, PyString>>,
        types: Vec<(Bound<'_, PyString>, Names<'_>, Names<'_>)>,
        slots: Vec<(Bound<'_, PyString>, Bound<'_, PyString>)>,
        enums: Groups<'_>,
        agents: Option<Names<'_>>,
        tail_max: usize,
        int_max_digits: usize,
        exec: Groups<'_>,
        constraint_keys: Names<'_>,
        constraint_set_keys: Names<'_>,
        value_aliases: Groups<'_>,
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
            enums: groups(&enums)?,
            agents: agents.as_deref().map(owned_all).transpose()?,
            tail_max,
            int_max_digits,
            exec: groups(&exec)?,
            constraint_keys: owned_all(&constraint_keys)?,
            constraint_set_keys: owned_all(&constraint_set_keys)?,
            value_aliases: groups(&value_aliases)?,
        };
        let g = rw1::Grammar::new(vocabulary)
            .map_err(|msg| PyValueError::new_err(String::from_utf8_lossy(&msg).into_owned()))?;
        let mut keys = KeyMap::default();
        for (k, _) in &slots {
            let name = owned(k)?;
            if let Some(key) = interned(py, &name) {
                let named = g
                    .slots
                    .get(&name)
                    .is_some_and(|s| names_listed(&s.validator.check));
                keys.insert(&name, (key, named));
            }
        }
        let mut names = KeyMap::default();
        let version = PyString::new(py, "RW1"); // rw1::parse::VERSION
        let listed = std::iter::once(&version)
            .chain(declared.iter())
            .chain(types.iter().map(|t| &t.0))
            .chain(enums.iter().flat_map(|(_, codes)| codes))
            .chain(agents.iter().flatten());
        for n in listed {
            let name = owned(n)?;
            if let Some(s) = interned(py, &name) {
                names.insert(&name, s);
            }
        }
        Ok(Grammar {
            inner: Arc::new(g),
            keys,
            names,
        })
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
        rw1::Value::None => py.None().into_bound(py),
        rw1::Value::Float(f, _) => pyo3::types::PyFloat::new(py, *f).into_any(),
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
            p.tier,
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
    grammar: &rw1::Grammar,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(rw1::Parsed<'a>, Option<Bound<'py, PyAny>>)> {
    run_with(py, bytes, grammar, |name| switch.call1((name,)))
}

/// [`run`] with the `p=` switch a Rust function: the profile a name (a Python string) names.
fn run_with<'py, 'a>(
    py: Python<'py>,
    bytes: &'a [u8],
    grammar: &rw1::Grammar,
    switch: impl Fn(Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<(rw1::Parsed<'a>, Option<Bound<'py, PyAny>>)> {
    let chosen: RefCell<Option<Bound<'py, PyAny>>> = RefCell::new(None);
    let failure: RefCell<Option<PyErr>> = RefCell::new(None);
    let find = |name: &[u8]| -> Result<Arc<rw1::Grammar>, Vec<u8>> {
        let found = string(py, name).and_then(&switch).and_then(|prof| {
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
    let parsed = guarded(|| rw1::parse(bytes, grammar, find))?;
    match failure.into_inner() {
        Some(e) => Err(e),
        None => Ok((parsed, chosen.into_inner())),
    }
}

/// Parse a line under a grammar: `(twin, errors, warnings, switched)`.
///
/// `twin` is `(v, type, id, re, from, to, item, slots, tail)`, as far as the parser got; `slots` is a new
/// `slots_type()` (a dict or a subclass) filled in the line's order, list values as tuples. The findings are
/// `(code, tier, message, slot, expected, got)` tuples. Under the core a `p=` slot calls
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
    let g = grammar.get();
    let (parsed, switched) = run(py, &bytes, &g.inner, switch)?;
    let t = &parsed.twin;
    let slots = slots_type.call0()?;
    {
        let dict = slots.cast::<PyDict>()?;
        for (k, v) in &t.slots {
            let (key, named) = g.key(py, k)?;
            dict.set_item(key, g.slot_value(py, v, named, false)?)?;
        }
    }
    let twin = PyTuple::new(
        py,
        [
            g.opt_named(py, t.v.as_deref())?,
            g.opt_named(py, t.typ.as_deref())?,
            opt_string(py, t.id.as_deref())?,
            opt_value(py, &t.re)?,
            g.envelope_value(py, b"from", &t.from, false)?,
            g.envelope_value(py, b"to", &t.to, false)?,
            opt_value(py, &t.item)?,
            slots,
            opt_string(py, t.tail.as_deref())?,
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

/// The reference's `parse(line)` in one call: `(twin, errors, warnings)`, the twin the reference's dict (its
/// slots a plain dict, list values as lists) and the findings their messages. rwcore's compatible `parse` is this
/// call: the tuple twin, its `Slots` and the `Problem` values of `parse` would each be made only to be rewritten.
#[pyfunction]
fn parse_compat<'py>(
    py: Python<'py>,
    line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = text(line)?;
    let g = grammar.get();
    let (parsed, _) = run(py, &bytes, &g.inner, switch)?;
    let t = &parsed.twin;
    let slots = PyDict::new(py);
    for (k, v) in &t.slots {
        let (key, named) = g.key(py, k)?;
        slots.set_item(key, g.slot_value(py, v, named, true)?)?;
    }
    let twin = PyDict::new(py);
    twin.set_item(pyo3::intern!(py, "v"), g.opt_named(py, t.v.as_deref())?)?;
    twin.set_item(
        pyo3::intern!(py, "type"),
        g.opt_named(py, t.typ.as_deref())?,
    )?;
    twin.set_item(pyo3::intern!(py, "id"), opt_string(py, t.id.as_deref())?)?;
    let opt = |v: &Option<rw1::Value<'_>>| match v {
        Some(v) => listed(py, v),
        None => Ok(py.None().into_bound(py)),
    };
    twin.set_item(pyo3::intern!(py, "re"), opt(&t.re)?)?;
    twin.set_item(
        pyo3::intern!(py, "from"),
        g.envelope_value(py, b"from", &t.from, true)?,
    )?;
    twin.set_item(
        pyo3::intern!(py, "to"),
        g.envelope_value(py, b"to", &t.to, true)?,
    )?;
    twin.set_item(pyo3::intern!(py, "item"), opt(&t.item)?)?;
    twin.set_item(pyo3::intern!(py, "slots"), slots)?;
    twin.set_item(
        pyo3::intern!(py, "tail"),
        opt_string(py, t.tail.as_deref())?,
    )?;
    let messages = |ps: &[rw1::Problem]| -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for p in ps {
            out.append(string(py, &p.message)?)?;
        }
        Ok(out)
    };
    PyTuple::new(
        py,
        [
            twin.into_any(),
            messages(&parsed.errors)?.into_any(),
            messages(&parsed.warnings)?.into_any(),
        ],
    )
}

/// A value as the reference's twin holds it: as [`value`] makes it, but a list as a `list`.
fn listed<'py>(py: Python<'py>, v: &rw1::Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    match v {
        rw1::Value::List(items) => {
            let items = items
                .iter()
                .map(|x| listed(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any())
        }
        _ => value(py, v),
    }
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
    written_line(
        py,
        (&formatted(typ)?, &formatted(id)?),
        &env,
        &pairs,
        tail_text.as_deref(),
        grammar,
        switch,
    )
}

/// [`encode`] of a JSON twin whose slots are a dict: its envelope's values read off it here, a key it lacks as
/// None (rwcore's compatible `encode`: the Python reading each of them was a third of the call).
#[pyfunction]
fn encode_twin<'py>(
    py: Python<'py>,
    msg: &Bound<'py, PyDict>,
    slots: &Bound<'py, PyDict>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyList>)> {
    let get = |k: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
        Ok(msg.get_item(k)?.unwrap_or_else(|| py.None().into_bound(py)))
    };
    let required = |k: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
        msg.get_item(k)?
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(k.clone().unbind()))
    };
    encode(
        py,
        &required(pyo3::intern!(py, "type"))?,
        &required(pyo3::intern!(py, "id"))?,
        [
            get(pyo3::intern!(py, "re"))?,
            get(pyo3::intern!(py, "from"))?,
            get(pyo3::intern!(py, "to"))?,
            get(pyo3::intern!(py, "item"))?,
        ],
        slots,
        &get(pyo3::intern!(py, "tail"))?,
        grammar,
        switch,
    )
}

/// The line `rw1` writes of a twin's parts, and the errors the parser finds in it (none: the line is valid).
fn written_line<'py>(
    py: Python<'py>,
    (typ, id): (&[u8], &[u8]),
    env: &[Option<Cow<'_, [u8]>>; 4],
    pairs: &[(&[u8], &[u8])],
    tail: Option<&[u8]>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyList>)> {
    let env = [
        env[0].as_deref(),
        env[1].as_deref(),
        env[2].as_deref(),
        env[3].as_deref(),
    ];
    let line = rw1::encode::line(typ, id, env, pairs, tail, &grammar.get().inner);
    let (parsed, _) = run(py, &line, &grammar.get().inner, switch)?;
    Ok((string(py, &line)?, problems(py, &parsed.errors)?))
}

/// [`encode`] of a message whose fields are held (`fields::Fields`): the same line and errors, written from the
/// parser's twin instead of the fields read off the message (each value as the line shows it, `Value::show`).
#[pyfunction]
fn encode_held<'py>(
    py: Python<'py>,
    fields: &Bound<'py, fields::Fields>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyList>)> {
    let t = fields.get().twin();
    let written = |v: &rw1::Value<'_>| {
        !matches!(v, rw1::Value::None) && !matches!(v, rw1::Value::Text(t) if t.is_empty())
    };
    let env = [&t.re, &t.from, &t.to, &t.item]
        .map(|v| v.as_ref().filter(|v| written(v)).map(|v| v.py_str()));
    let shown: Vec<(&[u8], Cow<'_, [u8]>)> = t
        .slots
        .iter()
        .filter(|(_, v)| written(v))
        .map(|(k, v)| (&k[..], v.show()))
        .collect();
    let pairs: Vec<(&[u8], &[u8])> = shown.iter().map(|(k, v)| (*k, &v[..])).collect();
    written_line(
        py,
        (
            t.typ.as_deref().unwrap_or_default(),
            t.id.as_deref().unwrap_or_default(),
        ),
        &env,
        &pairs,
        t.tail.as_deref().filter(|tail| !tail.is_empty()),
        grammar,
        switch,
    )
}

// ---------------------------------------------------------------- messages and the checks

/// A Python value as a slot value: text, an integer, a boolean, a float, None, or a list or tuple of them. Text
/// is borrowed from the Python string where it can be.
fn slot_value<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<rw1::Value<'a>> {
    if v.is_none() {
        return Ok(rw1::Value::None);
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(rw1::Value::Text(text(s)?));
    }
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(rw1::Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(match v.extract::<i64>() {
            Ok(i) => rw1::Value::Int(i),
            Err(_) => rw1::Value::BigInt(v.str()?.to_str()?.to_owned()),
        });
    }
    if let Ok(f) = v.cast::<pyo3::types::PyFloat>() {
        let repr = v.repr()?;
        return Ok(rw1::Value::Float(
            f.value(),
            text(&repr)?.into_owned().into(),
        ));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items = v
            .try_iter()?
            .map(|x| slot_value(&x?).map(rw1::Value::into_owned))
            .collect::<PyResult<_>>()?;
        return Ok(rw1::Value::List(items));
    }
    Err(PyValueError::new_err(format!(
        "a slot value is text, a number, a boolean, None or a list of them, not {}",
        v.get_type().name()?
    )))
}

/// A message's field that is text (its version, type, id and tail), or None.
fn opt_text<'a>(v: &'a Bound<'_, PyAny>, field: &str) -> PyResult<Option<Cow<'a, [u8]>>> {
    if v.is_none() {
        return Ok(None);
    }
    match v.cast::<PyString>() {
        Ok(s) => Ok(Some(text(s)?)),
        Err(_) => Err(PyValueError::new_err(format!(
            "a message's {field} is text, not {}",
            v.get_type().name()?
        ))),
    }
}

fn opt_slot_value<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<Option<rw1::Value<'a>>> {
    if v.is_none() {
        Ok(None)
    } else {
        slot_value(v).map(Some)
    }
}

/// A `rwcore.Message` as `rw1` reads it: the twin its fields are held in (a message a batch or `parse_line` made,
/// `fields::Fields`), or its fields and slots read off it, held while `rw1` reads them (its twin borrows their
/// text). It lives on the stack for one call: boxing its larger variant would allocate for every message read back.
#[allow(clippy::large_enum_variant)]
enum Held<'py> {
    Native(Bound<'py, fields::Fields>),
    Read {
        /// v, type, id, re, from_, to, item, tail
        fields: [Bound<'py, PyAny>; 8],
        slots: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    },
}

fn hold<'py>(m: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    let py = m.py();
    if let Ok(held) = m.getattr(pyo3::intern!(py, "_fields")) {
        if let Ok(native) = held.cast_into::<fields::Fields>() {
            return Ok(Held::Native(native));
        }
    }
    let slots = m.getattr(pyo3::intern!(py, "slots"))?;
    let slots = slots.cast::<PyDict>()?.iter().collect();
    let fields = [
        m.getattr(pyo3::intern!(py, "v"))?,
        m.getattr(pyo3::intern!(py, "type"))?,
        m.getattr(pyo3::intern!(py, "id"))?,
        m.getattr(pyo3::intern!(py, "re"))?,
        m.getattr(pyo3::intern!(py, "from_"))?,
        m.getattr(pyo3::intern!(py, "to"))?,
        m.getattr(pyo3::intern!(py, "item"))?,
        m.getattr(pyo3::intern!(py, "tail"))?,
    ];
    Ok(Held::Read { fields, slots })
}

/// A held message's twin: the parser's own, or one borrowing the fields read off the message (on the stack for
/// one call, as [`Held`]).
#[allow(clippy::large_enum_variant)]
enum TwinOf<'a> {
    Parsed(&'a rw1::Twin<'a>),
    Read(rw1::Twin<'a>),
}

impl<'a> std::ops::Deref for TwinOf<'a> {
    type Target = rw1::Twin<'a>;

    fn deref(&self) -> &rw1::Twin<'a> {
        match self {
            TwinOf::Parsed(t) => t,
            TwinOf::Read(t) => t,
        }
    }
}

/// The twin `rw1`'s checks read of a held message.
fn twin<'a>(h: &'a Held<'_>) -> PyResult<TwinOf<'a>> {
    let (fields, slots) = match h {
        Held::Native(native) => return Ok(TwinOf::Parsed(native.get().twin())),
        Held::Read { fields, slots } => (fields, slots),
    };
    let mut pairs = Vec::with_capacity(slots.len());
    for (k, v) in slots {
        let key = match k.cast::<PyString>() {
            Ok(s) => text(s)?,
            Err(_) => Cow::Owned(text(&k.str()?)?.into_owned()),
        };
        pairs.push((key, slot_value(v)?));
    }
    let [v, typ, id, re, from, to, item, tail] = fields;
    Ok(TwinOf::Read(rw1::Twin {
        v: opt_text(v, "v")?,
        typ: opt_text(typ, "type")?,
        id: opt_text(id, "id")?,
        re: opt_slot_value(re)?,
        from: opt_slot_value(from)?,
        to: opt_slot_value(to)?,
        item: opt_slot_value(item)?,
        slots: pairs,
        tail: opt_text(tail, "tail")?,
    }))
}

fn findings<'py>(
    py: Python<'py>,
    f: &rw1::checks::Findings,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    Ok((problems(py, &f.problems)?, problems(py, &f.notes)?))
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|x| &x[..]).collect()
}

fn owned_texts(v: &[Bound<'_, PyString>]) -> PyResult<Vec<Vec<u8>>> {
    v.iter().map(|s| Ok(text(s)?.into_owned())).collect()
}

/// The canonical JSON of a message, what its digest is taken over.
#[pyfunction]
fn canonical<'py>(py: Python<'py>, msg: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let held = hold(msg)?;
    let t = twin(&held)?;
    string(py, &guarded(|| rw1::canon::canonical(&t))?)
}

/// The digest (`h=`) of a message: the first 12 hex digits of the SHA-256 of its canonical JSON.
#[pyfunction]
fn message_digest(msg: &Bound<'_, PyAny>) -> PyResult<String> {
    let held = hold(msg)?;
    let t = twin(&held)?;
    guarded(|| rw1::canon::digest(&t))
}

/// The digest (`h=`) of a line parsed under a grammar (`switch` as for [`parse`]): `(digest, [])`, or
/// `(None, errors)` when the line is not valid. What `message_digest` gives of the line's parsed message, without
/// making the message: the digest is taken over the parser's own twin.
#[pyfunction]
fn h_of_line<'py>(
    py: Python<'py>,
    line: &Bound<'py, PyString>,
    grammar: &Bound<'py, Grammar>,
    switch: &Bound<'py, PyAny>,
) -> PyResult<(Option<String>, Bound<'py, PyList>)> {
    let bytes = text(line)?;
    let (parsed, _) = run(py, &bytes, &grammar.get().inner, switch)?;
    if !parsed.errors.is_empty() {
        return Ok((None, problems(py, &parsed.errors)?));
    }
    let digest = guarded(|| rw1::canon::digest(&parsed.twin))?;
    Ok((Some(digest), PyList::empty(py)))
}

/// Check 1: an HO against its record (a mapping of slots to values; a value other than text is compared as the
/// line writes it): (problems, notes).
#[pyfunction]
fn ho_check<'py>(
    py: Python<'py>,
    ho: &Bound<'py, PyAny>,
    record: &Bound<'py, PyAny>,
    grammar: &Bound<'py, Grammar>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let held = hold(ho)?;
    let ho = twin(&held)?;
    let texts = shown_pairs(record)?;
    let pairs: Vec<(&[u8], &[u8])> = texts.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    findings(
        py,
        &guarded(|| rw1::checks::ho_check(&ho, &pairs, &grammar.get().inner))?,
    )
}

/// The (key, value) pairs of a mapping (a dict, or anything with `items()`), in its order.
fn mapping_items<'py>(
    m: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    match m.cast::<PyDict>() {
        Ok(d) => Ok(d.iter().collect()),
        Err(_) => m
            .call_method0("items")?
            .try_iter()?
            .map(|item| item?.extract())
            .collect(),
    }
}

/// A record's values (a mapping) as check 1 reads them: each key as text, each value as a line shows it.
fn shown_pairs(values: &Bound<'_, PyAny>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let items = mapping_items(values)?;
    let mut out = Vec::with_capacity(items.len());
    for (k, v) in &items {
        let key = match k.cast_exact::<PyString>() {
            Ok(s) => text(s)?.into_owned(),
            Err(_) => text(&k.str()?)?.into_owned(),
        };
        let want = match v.cast_exact::<PyString>() {
            Ok(s) => text(s)?.into_owned(),
            Err(_) => slot_value(v)?.show().into_owned(),
        };
        out.push((key, want));
    }
    Ok(out)
}

/// Check 2: a readback against its HO, with the sender's withheld criteria (None: the HO's own) and the clock:
/// (problems, notes).
#[pyfunction]
fn rb_check<'py>(
    py: Python<'py>,
    ho: &Bound<'py, PyAny>,
    rb: &Bound<'py, PyAny>,
    grammar: &Bound<'py, Grammar>,
    expect_acc: Option<Names<'py>>,
    now: &Bound<'py, PyString>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let (ho, rb) = (hold(ho)?, hold(rb)?);
    let (ho, rb) = (twin(&ho)?, twin(&rb)?);
    let expect = expect_acc.as_deref().map(owned_texts).transpose()?;
    let expect_refs: Option<Vec<&[u8]>> =
        expect.as_ref().map(|e| e.iter().map(|x| &x[..]).collect());
    let now = text(now)?;
    let f = guarded(|| {
        rw1::checks::rb_check(&ho, &rb, &grammar.get().inner, expect_refs.as_deref(), &now)
    })?;
    findings(py, &f)
}

/// Check 3: a done report against its HO and the readback that made the plan (None: the HO alone):
/// (problems, notes).
#[pyfunction]
fn dn_check<'py>(
    py: Python<'py>,
    ho: &Bound<'py, PyAny>,
    dn: &Bound<'py, PyAny>,
    grammar: &Bound<'py, Grammar>,
    plan_rb: Option<Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let (ho, dn) = (hold(ho)?, hold(dn)?);
    let (ho, dn) = (twin(&ho)?, twin(&dn)?);
    let plan = plan_rb.as_ref().map(hold).transpose()?;
    let plan = plan.as_ref().map(twin).transpose()?;
    findings(
        py,
        &guarded(|| rw1::checks::dn_check(&ho, &dn, &grammar.get().inner, plan.as_deref()))?,
    )
}

/// The type and receipt part of check 3: (problems, whether the types let the check go on).
#[pyfunction]
fn dn_receipt<'py>(
    py: Python<'py>,
    ho: &Bound<'py, PyAny>,
    dn: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, bool)> {
    let (ho, dn) = (hold(ho)?, hold(dn)?);
    let (ho, dn) = (twin(&ho)?, twin(&dn)?);
    let (f, go_on) = guarded(|| rw1::checks::dn_receipt(&ho, &dn))?;
    Ok((problems(py, &f.problems)?, go_on))
}

/// Tier 4 alone: the sender's criteria against the receiver's, with `keys=` and `not=`: (problems, notes).
#[pyfunction]
fn acc_compare<'py>(
    py: Python<'py>,
    expected: Names<'py>,
    derived: Names<'py>,
    keys: Names<'py>,
    derived_not: Names<'py>,
    grammar: &Bound<'py, Grammar>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let all = [&expected, &derived, &keys, &derived_not].map(|v| owned_texts(v));
    let [e, d, k, n] = all;
    let (e, d, k, n) = (e?, d?, k?, n?);
    let (p, notes) = rw1::acc::compare(
        &refs(&e),
        &refs(&d),
        &refs(&k),
        &refs(&n),
        &grammar.get().inner.acc,
    );
    Ok((problems(py, &p)?, problems(py, &notes)?))
}

/// The translation rules for a message under the profile it names: its problems.
#[pyfunction]
fn translation_check<'py>(
    py: Python<'py>,
    msg: &Bound<'py, PyAny>,
    profile: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyList>> {
    let held = hold(msg)?;
    problems(py, &{
        let (t, name) = (twin(&held)?, text(profile)?);
        guarded(|| rw1::translation::translation_check(&t, &name))?
    })
}

// ---------------------------------------------------------------- the closing rule

/// The `N` items of any iterable (Python's `a, b = v`): fewer or more is a ValueError.
fn unpack<'py, const N: usize>(v: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; N]> {
    let items: Vec<Bound<'py, PyAny>> = v.try_iter()?.collect::<PyResult<_>>()?;
    let n = items.len();
    items
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("expected {N} values to unpack, got {n}")))
}

fn py_int(v: &Bound<'_, PyAny>) -> PyResult<i64> {
    v.py()
        .get_type::<pyo3::types::PyInt>()
        .call1((v,))?
        .extract()
}

fn py_str(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    Ok(text(&v.str()?)?.into_owned())
}

fn opt_py_str(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        Ok(None)
    } else {
        py_str(v).map(Some)
    }
}

fn opt_py<'py>(py: Python<'py>, v: &Option<Vec<u8>>) -> PyResult<Bound<'py, PyAny>> {
    opt_string(py, v.as_deref())
}

/// A handoff's record in the state's list form: `[line, id, from, to, item, exp, due, closes, cancels, wrong,
/// acked, ran]`, empty trailing fields (after the item) dropped.
fn record<'py>(py: Python<'py>, h: &rw1::thread::Handoff) -> PyResult<Bound<'py, PyList>> {
    let pairs = |v: &[(Vec<u8>, Vec<u8>)]| -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (a, b) in v {
            out.append(PyList::new(py, [string(py, a)?, string(py, b)?])?)?;
        }
        Ok(out)
    };
    let cancels = PyList::empty(py);
    for c in &h.cancels {
        cancels.append(string(py, c)?)?;
    }
    let wrong = PyList::empty(py);
    for (k, i, f, t) in &h.wrong {
        wrong.append(
            (k, string(py, i)?, string(py, f)?, string(py, t)?)
                .into_pyobject(py)?
                .to_list(),
        )?;
    }
    let ran = match &h.ran {
        Some((a, b)) => PyList::new(py, [string(py, a)?, string(py, b)?])?.into_any(),
        None => py.None().into_bound(py),
    };
    let fields: Vec<Bound<'py, PyAny>> = vec![
        h.line_no.into_pyobject(py)?.into_any(),
        string(py, &h.id)?,
        string(py, &h.sender)?,
        string(py, &h.receiver)?,
        opt_py(py, &h.item)?,
        opt_py(py, &h.exp)?,
        opt_py(py, &h.due)?,
        pairs(&h.closes)?.into_any(),
        cancels.into_any(),
        wrong.into_any(),
        i64::from(h.acked).into_pyobject(py)?.into_any(),
        ran,
    ];
    let mut keep = fields.len();
    let empty = |v: &Bound<'py, PyAny>| -> bool {
        v.is_none()
            || v.extract::<i64>().is_ok_and(|i| i == 0) && !v.is_instance_of::<PyString>()
            || v.cast::<PyList>().is_ok_and(|l| l.is_empty())
    };
    while keep > 5 && empty(&fields[keep - 1]) {
        keep -= 1;
    }
    PyList::new(py, &fields[..keep])
}

/// A handoff from its record (see [`record`]); a malformed one is a ValueError naming what is wrong.
fn handoff_of<'py>(rec: &Bound<'py, PyAny>) -> PyResult<rw1::thread::Handoff> {
    let mut items: Vec<Bound<'py, PyAny>> = rec.try_iter()?.collect::<PyResult<_>>()?;
    if !(4..=12).contains(&items.len()) {
        return Err(PyValueError::new_err(format!(
            "a handoff record has 4 to 12 fields, not {}",
            items.len()
        )));
    }
    let py = rec.py();
    items.resize_with(12, || py.None().into_bound(py));
    let list_of = |v: &Bound<'py, PyAny>| -> PyResult<Vec<Bound<'py, PyAny>>> {
        if v.is_none() || !v.is_truthy()? {
            return Ok(Vec::new());
        }
        v.try_iter()?.collect()
    };
    let pair = |v: &Bound<'_, PyAny>| -> PyResult<(Vec<u8>, Vec<u8>)> {
        let [a, b] = unpack(v)?;
        Ok((py_str(&a)?, py_str(&b)?))
    };
    let closes = list_of(&items[7])?
        .iter()
        .map(pair)
        .collect::<PyResult<_>>()?;
    let cancels = list_of(&items[8])?
        .iter()
        .map(py_str)
        .collect::<PyResult<_>>()?;
    let wrong = list_of(&items[9])?
        .iter()
        .map(|w| {
            let [k, i, f, t] = unpack(w)?;
            Ok((py_int(&k)?, py_str(&i)?, py_str(&f)?, py_str(&t)?))
        })
        .collect::<PyResult<_>>()?;
    let ran = if items[11].is_truthy()? {
        Some((
            py_str(&items[11].get_item(0)?)?,
            py_str(&items[11].get_item(1)?)?,
        ))
    } else {
        None
    };
    Ok(rw1::thread::Handoff {
        line_no: py_int(&items[0])?,
        id: py_str(&items[1])?,
        sender: py_str(&items[2])?,
        receiver: py_str(&items[3])?,
        item: opt_py_str(&items[4])?,
        exp: opt_py_str(&items[5])?,
        due: opt_py_str(&items[6])?,
        closes,
        cancels,
        wrong,
        acked: items[10].is_truthy()?,
        ran,
    })
}

/// One handoff as the tracker sees it: (id, sender, receiver, item, exp, due, line, closes, cancels, acked,
/// closed, cancelled, done after cancel).
fn view<'py>(py: Python<'py>, h: &rw1::thread::Handoff) -> PyResult<Bound<'py, PyTuple>> {
    let closes = h
        .closes
        .iter()
        .map(|(a, b)| Ok(PyTuple::new(py, [string(py, a)?, string(py, b)?])?.into_any()))
        .collect::<PyResult<Vec<_>>>()?;
    let cancels = h
        .cancels
        .iter()
        .map(|c| string(py, c))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(
        py,
        [
            string(py, &h.id)?,
            string(py, &h.sender)?,
            string(py, &h.receiver)?,
            opt_py(py, &h.item)?,
            opt_py(py, &h.exp)?,
            opt_py(py, &h.due)?,
            h.line_no.into_pyobject(py)?.into_any(),
            PyTuple::new(py, closes)?.into_any(),
            PyTuple::new(py, cancels)?.into_any(),
            pyo3::types::PyBool::new(py, h.acked).to_owned().into_any(),
            pyo3::types::PyBool::new(py, h.closed())
                .to_owned()
                .into_any(),
            pyo3::types::PyBool::new(py, !h.cancels.is_empty())
                .to_owned()
                .into_any(),
            pyo3::types::PyBool::new(py, h.ran.is_some())
                .to_owned()
                .into_any(),
        ],
    )
}

/// The closing rule over one conversation (`rw1::thread::Tracker`); rwcore's `ThreadTracker` wraps it.
#[pyclass(module = "rwcore._native")]
struct Tracker {
    inner: rw1::thread::Tracker,
}

#[pymethods]
impl Tracker {
    #[new]
    fn new() -> Self {
        Tracker {
            inner: rw1::thread::Tracker::new(),
        }
    }

    /// Take the next valid line: the findings it raises at once. A line number not above the last is a ValueError.
    #[pyo3(signature = (msg, line_no=None))]
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        msg: &Bound<'py, PyAny>,
        line_no: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let held = hold(msg)?;
        let t = twin(&held)?;
        let found = guarded(|| self.inner.feed(&t, line_no))?.map_err(PyValueError::new_err)?;
        problems(py, &found)
    }

    /// What `feed` would return, the tracker left unchanged.
    #[pyo3(signature = (msg, line_no=None))]
    fn probe<'py>(
        &mut self,
        py: Python<'py>,
        msg: &Bound<'py, PyAny>,
        line_no: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let held = hold(msg)?;
        let t = twin(&held)?;
        let found = guarded(|| self.inner.probe(&t, line_no))?;
        problems(py, &found)
    }

    /// Take a line that failed to parse, with its errors' messages: its one finding.
    fn feed_invalid<'py>(
        &mut self,
        py: Python<'py>,
        line_no: Option<i64>,
        messages: Names<'py>,
    ) -> PyResult<Bound<'py, PyList>> {
        let texts = owned_texts(&messages)?;
        let p = self
            .inner
            .feed_invalid(line_no, &refs(&texts))
            .map_err(PyValueError::new_err)?;
        problems(py, std::slice::from_ref(&p))
    }

    /// Parse `line` under `grammar` (`switch`: the profile a `p=` names) and take it: a valid line as `feed` takes
    /// its message, one with errors as `feed_invalid` takes their messages; nothing returned (the whole-thread
    /// check reads only the report). False, nothing taken, for a line that is not UTF-8 text (a lone surrogate):
    /// the caller parses that one itself. No message is made: the compatible `check_thread` made one a line only
    /// to feed it here.
    fn feed_line(
        &mut self,
        py: Python<'_>,
        line: &Bound<'_, PyString>,
        line_no: Option<i64>,
        grammar: &Bound<'_, Grammar>,
        switch: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let Ok(t) = line.to_str() else {
            return Ok(false);
        };
        let (parsed, _) = run(py, t.as_bytes(), &grammar.get().inner, switch)?;
        if parsed.errors.is_empty() {
            guarded(|| self.inner.feed(&parsed.twin, line_no))?.map_err(PyValueError::new_err)?;
        } else {
            let messages: Vec<&[u8]> = parsed.errors.iter().map(|p| &p.message[..]).collect();
            self.inner
                .feed_invalid(line_no, &messages)
                .map_err(PyValueError::new_err)?;
        }
        Ok(true)
    }

    /// Count a line that carries no message.
    #[pyo3(signature = (line_no=None))]
    fn skip(&mut self, line_no: Option<i64>) -> PyResult<()> {
        self.inner.skip(line_no).map_err(PyValueError::new_err)
    }

    #[getter]
    fn last_line(&self) -> i64 {
        self.inner.last_line()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The thread's verdict at `now`: (problems, notes).
    fn report<'py>(
        &self,
        py: Python<'py>,
        now: &Bound<'py, PyString>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let (p, n) = self.inner.report(&text(now)?);
        Ok((problems(py, &p)?, problems(py, &n)?))
    }

    /// The HO with this id (the latest) as a view tuple, or None.
    fn handoff<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.inner
            .handoff(&text(id)?)
            .map(|h| view(py, h))
            .transpose()
    }

    /// (closed, cancelled) of the HO with this id (the latest), or None.
    fn flags(&self, id: &Bound<'_, PyString>) -> PyResult<Option<(bool, bool)>> {
        Ok(self
            .inner
            .handoff(&text(id)?)
            .map(|h| (h.closed(), !h.cancels.is_empty())))
    }

    /// Every HO (or, with `open_only`, those not closed), in line order, as view tuples.
    fn views<'py>(&self, py: Python<'py>, open_only: bool) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        if open_only {
            self.inner.open_handoffs().map(|h| view(py, h)).collect()
        } else {
            self.inner.handoffs().iter().map(|h| view(py, h)).collect()
        }
    }

    /// One handoff's record in the state's list form (the latest HO with this id), or None.
    fn handoff_state<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        self.inner
            .handoff(&text(id)?)
            .map(|h| record(py, h))
            .transpose()
    }

    /// The tracker as plain data: `{"v": 1, "n": last line, "ho": [records], "cx": [[line, id, re]], "bad":
    /// [[line, message]], "sh": [ids]}`, the last three only when not empty.
    fn to_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (hos, cxs, bad, shadowed, last) = self.inner.parts();
        let state = PyDict::new(py);
        state.set_item("v", 1)?;
        state.set_item("n", last)?;
        let records = hos
            .iter()
            .map(|h| record(py, h))
            .collect::<PyResult<Vec<_>>>()?;
        state.set_item("ho", records)?;
        if !cxs.is_empty() {
            let rows = cxs
                .iter()
                .map(|(k, i, r)| {
                    Ok((k, string(py, i)?, opt_py(py, r)?)
                        .into_pyobject(py)?
                        .to_list())
                })
                .collect::<PyResult<Vec<_>>>()?;
            state.set_item("cx", rows)?;
        }
        if !bad.is_empty() {
            let rows = bad
                .iter()
                .map(|(k, m)| Ok((k, string(py, m)?).into_pyobject(py)?.to_list()))
                .collect::<PyResult<Vec<_>>>()?;
            state.set_item("bad", rows)?;
        }
        if !shadowed.is_empty() {
            state.set_item(
                "sh",
                shadowed
                    .iter()
                    .map(|s| string(py, s))
                    .collect::<PyResult<Vec<_>>>()?,
            )?;
        }
        Ok(state)
    }

    /// A tracker holding only these handoff records, fed on from `last_line`. A malformed record is a ValueError.
    #[staticmethod]
    fn partial(records: &Bound<'_, PyAny>, last_line: &Bound<'_, PyAny>) -> PyResult<Self> {
        let malformed = |e: PyErr| PyValueError::new_err(format!("malformed handoff record: {e}"));
        let last = py_int(last_line).map_err(malformed)?;
        let hs = records
            .try_iter()?
            .map(|r| handoff_of(&r?))
            .collect::<PyResult<Vec<_>>>()
            .map_err(malformed)?;
        Ok(Tracker {
            inner: rw1::thread::Tracker::partial(hs, last),
        })
    }

    /// A tracker from `to_state`'s output. Another version or a malformed state is a ValueError.
    #[staticmethod]
    fn from_state(state: &Bound<'_, PyAny>) -> PyResult<Self> {
        let version_ok = state
            .cast::<PyDict>()
            .ok()
            .and_then(|d| d.get_item("v").ok().flatten())
            .is_some_and(|v| v.eq(1).unwrap_or(false));
        if !version_ok {
            let got = match state.cast::<PyDict>() {
                Ok(d) => d.get_item("v")?.map_or_else(
                    || "None".to_owned(),
                    |v| v.repr().map(|r| r.to_string()).unwrap_or_default(),
                ),
                Err(_) => format!("{:?}", state.get_type().name()?.to_string()).replace('"', "'"),
            };
            return Err(PyValueError::new_err(format!(
                "thread state version {got} is not 1"
            )));
        }
        let malformed = |e: PyErr| PyValueError::new_err(format!("malformed thread state: {e}"));
        let build = || -> PyResult<rw1::thread::Tracker> {
            let get = |k: &str| state.call_method1("get", (k, PyList::empty(state.py())));
            let last = py_int(&state.get_item("n")?)?;
            let hs = get("ho")?
                .try_iter()?
                .map(|r| handoff_of(&r?))
                .collect::<PyResult<Vec<_>>>()?;
            let cxs = get("cx")?
                .try_iter()?
                .map(|row| {
                    let [k, i, r] = unpack(&row?)?;
                    Ok((py_int(&k)?, py_str(&i)?, opt_py_str(&r)?))
                })
                .collect::<PyResult<Vec<_>>>()?;
            let bad = get("bad")?
                .try_iter()?
                .map(|row| {
                    let [k, m] = unpack(&row?)?;
                    Ok((py_int(&k)?, py_str(&m)?))
                })
                .collect::<PyResult<Vec<_>>>()?;
            let sh = get("sh")?
                .try_iter()?
                .map(|x| py_str(&x?))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(rw1::thread::Tracker::from_parts(hs, cxs, bad, sh, last))
        };
        Ok(Tracker {
            inner: build().map_err(malformed)?,
        })
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(digest, m)?)?;
    m.add_function(wrap_pyfunction!(parse, m)?)?;
    m.add_function(wrap_pyfunction!(parse_compat, m)?)?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(encode_twin, m)?)?;
    m.add_function(wrap_pyfunction!(encode_held, m)?)?;
    m.add_function(wrap_pyfunction!(message_digest, m)?)?;
    m.add_function(wrap_pyfunction!(h_of_line, m)?)?;
    m.add_function(wrap_pyfunction!(canonical, m)?)?;
    m.add_function(wrap_pyfunction!(ho_check, m)?)?;
    m.add_function(wrap_pyfunction!(rb_check, m)?)?;
    m.add_function(wrap_pyfunction!(dn_check, m)?)?;
    m.add_function(wrap_pyfunction!(dn_receipt, m)?)?;
    m.add_function(wrap_pyfunction!(acc_compare, m)?)?;
    m.add_function(wrap_pyfunction!(translation_check, m)?)?;
    m.add_function(wrap_pyfunction!(legend, m)?)?;
    m.add("TRANSLATION_PROFILES", rw1::translation::PROFILES.to_vec())?;
    m.add_class::<Grammar>()?;
    m.add_class::<Tracker>()?;
    counting::register(m)?;
    decision::register(m)?;
    decision::register_decide(m)?;
    decision::register_holders(m)?;
    state::register(m)?;
    outcomes::register(m)?;
    notices::register(m)?;
    batch::register(m)?;
    fields::register(m)?;
    lines::register(m)?;
    record_batch::register(m)?;
    headers::register(m)?;
    intake::register(m)?;
    Ok(())
}

/// Python strings as the bytes `rw1` reads.
fn texts(v: &[Bound<'_, PyString>]) -> PyResult<Vec<Vec<u8>>> {
    v.iter().map(|s| Ok(text(s)?.into_owned())).collect()
}

fn text_pairs(
    v: &[(Bound<'_, PyString>, Bound<'_, PyString>)],
) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    v.iter()
        .map(|(k, x)| Ok((text(k)?.into_owned(), text(x)?.into_owned())))
        .collect()
}

/// A message type as the legend takes it: (code, name, required slots, optional slots).
type TypeWords<'py> = (
    Bound<'py, PyString>,
    Bound<'py, PyString>,
    Names<'py>,
    Names<'py>,
);
/// (key, value) pairs of Python strings.
type Pairs<'py> = Vec<(Bound<'py, PyString>, Bound<'py, PyString>)>;

/// The legend of a profile from its words, in the profile's orders (see `rw1::legend`).
#[pyfunction]
#[pyo3(signature = (types, slot_desc, slot_types, enums, core_asks, asks_used, constraint_keys, exec_map, declared, agents, ans, item_kinds, item_examples, lean))]
#[allow(clippy::too_many_arguments)]
fn legend<'py>(
    py: Python<'py>,
    types: Vec<TypeWords<'py>>,
    slot_desc: Pairs<'py>,
    slot_types: Pairs<'py>,
    enums: Vec<(Bound<'py, PyString>, Pairs<'py>)>,
    core_asks: Names<'py>,
    asks_used: Names<'py>,
    constraint_keys: Pairs<'py>,
    exec_map: Groups<'py>,
    declared: Option<Bound<'py, PyString>>,
    agents: Names<'py>,
    ans: bool,
    item_kinds: Pairs<'py>,
    item_examples: Names<'py>,
    lean: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let source = rw1::legend::Source {
        types: types
            .iter()
            .map(|(code, name, required, optional)| {
                Ok(rw1::legend::TypeText {
                    code: text(code)?.into_owned(),
                    name: text(name)?.into_owned(),
                    required: texts(required)?,
                    optional: texts(optional)?,
                })
            })
            .collect::<PyResult<_>>()?,
        slot_desc: text_pairs(&slot_desc)?,
        slot_types: text_pairs(&slot_types)?,
        enums: enums
            .iter()
            .map(|(name, vals)| Ok((text(name)?.into_owned(), text_pairs(vals)?)))
            .collect::<PyResult<_>>()?,
        core_asks: texts(&core_asks)?,
        asks_used: texts(&asks_used)?,
        constraint_keys: text_pairs(&constraint_keys)?,
        exec_map: exec_map
            .iter()
            .map(|(k, v)| Ok((text(k)?.into_owned(), texts(v)?)))
            .collect::<PyResult<_>>()?,
        declared: declared
            .as_ref()
            .map(|d| Ok::<_, PyErr>(text(d)?.into_owned()))
            .transpose()?,
        agents: texts(&agents)?,
        ans,
        item_kinds: text_pairs(&item_kinds)?,
        item_examples: texts(&item_examples)?,
    };
    string(py, &guarded(|| rw1::legend::legend(&source, lean))?)
}
