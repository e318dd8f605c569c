//! A parsed line's fields held natively until Python reads them.
//!
//! Every parsed line becomes an `rwcore.Message` (`parse_line`, and `prepare_batch` for the worker's batches), but
//! most are never read past their type: in the worker Python reads a message's type for nearly every line and its
//! other fields only for a few (a held reply's `re`, an alert, a refusal notice, a log line), and the typed API's
//! checks read the parser's twin here rather than the fields. Making every field a Python value was about twenty
//! objects and a third of `prepare_batch` a line. So a parsed message is made with its version and type only, and
//! its other fields held here ([`Fields`], the message's `_fields`); the message makes them on the first read of
//! one (`rwcore._types.Message.__getattr__`), the same values `Fields::values` gives.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyDict, PyTuple};

use rw1::Twin;

use crate::{opt_string, opt_value, string, value};

/// A line's text as Python holds it (immutable, kept alive here): a consumed record's `bytes`, or a `str` handed to
/// `parse_line` (its UTF-8, which Python keeps with the string); or a copy of a kept line's text read from a
/// conversation's state.
pub(crate) enum Backed {
    Bytes(PyBackedBytes),
    Str(PyBackedStr),
    Owned(Box<[u8]>),
}

impl Backed {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Backed::Bytes(b) => b,
            Backed::Str(s) => s.as_bytes(),
            Backed::Owned(b) => b,
        }
    }
}

self_cell::self_cell!(
    /// A line's text and the twin the parser made of it, the twin borrowing its text from the line instead of a
    /// copy of each of its fields: a line's twin was about thirty allocations. A self-referential value, which
    /// `self_cell` makes without unsafe code of ours.
    pub(crate) struct Kept {
        owner: Backed,
        #[covariant]
        dependent: Twin,
    }
);

impl engine::decide::HeldTwin for Kept {
    fn twin(&self) -> &Twin<'_> {
        self.borrow_dependent()
    }
}

/// A parsed line's twin, held for the `rwcore.Message` made of it (see the module's documentation), and shared with
/// the kept lines' parses when the line is kept (`DecideRoute::keep_parsed`).
#[pyclass(module = "rwcore._native", frozen)]
pub struct Fields {
    kept: Arc<Kept>,
}

impl Fields {
    pub(crate) fn new(kept: Kept) -> Self {
        Fields {
            kept: Arc::new(kept),
        }
    }

    pub(crate) fn twin(&self) -> &Twin<'_> {
        self.kept.borrow_dependent()
    }

    /// The line's text and its parse, shared.
    pub(crate) fn kept(&self) -> &Arc<Kept> {
        &self.kept
    }
}

#[pymethods]
impl Fields {
    /// The message's other fields as `rwcore.parse_line` makes them: `(id, from_, to, re, item, slots, tail)`, the
    /// slots a `slots_type` (`rwcore.Slots`) in the twin's order.
    fn values<'py>(
        &self,
        py: Python<'py>,
        slots_type: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let t = self.twin();
        let slots = slots_type.call0()?.cast_into::<PyDict>()?;
        for (k, v) in &t.slots {
            slots.set_item(string(py, k)?, value(py, v)?)?;
        }
        PyTuple::new(
            py,
            [
                opt_string(py, t.id.as_deref())?,
                opt_value(py, &t.from)?,
                opt_value(py, &t.to)?,
                opt_value(py, &t.re)?,
                opt_value(py, &t.item)?,
                slots.into_any(),
                opt_string(py, t.tail.as_deref())?,
            ],
        )
    }

    /// The message's `id` alone (what `values` gives first): the field a dead letter's log line reads.
    #[getter]
    fn id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        opt_string(py, self.twin().id.as_deref())
    }
}

/// How a parsed line's `rwcore.Message` is made: `object.__new__`, `Message`, the `__set__` of its slots `v`,
/// `type` and `_fields`, and the version. Made once (`rwcore._codec.MESSAGE_KIT`). The message is frozen: its slots
/// are set as a frozen dataclass's `__init__` sets them, by each slot's own setter (`object.__setattr__` looked the
/// name up again each time: a third of making a message).
#[pyclass(module = "rwcore._native", frozen)]
pub struct MessageKit {
    new: Py<PyAny>,
    class: Py<PyAny>,
    set_v: Py<PyAny>,
    set_type: Py<PyAny>,
    set_fields: Py<PyAny>,
    version: Py<PyAny>,
}

#[pymethods]
impl MessageKit {
    #[new]
    fn new(
        new: Py<PyAny>,
        class: Py<PyAny>,
        set_v: Py<PyAny>,
        set_type: Py<PyAny>,
        set_fields: Py<PyAny>,
        version: Py<PyAny>,
    ) -> Self {
        MessageKit {
            new,
            class,
            set_v,
            set_type,
            set_fields,
            version,
        }
    }
}

impl MessageKit {
    /// The `rwcore.Message` of a parsed line: its version and type set, its other fields held (`fields`).
    pub(crate) fn message<'py>(&self, fields: &Bound<'py, Fields>) -> PyResult<Bound<'py, PyAny>> {
        let py = fields.py();
        let m = self.new.bind(py).call1((&self.class,))?;
        self.set_v.bind(py).call1((&m, &self.version))?;
        let typ = opt_string(py, fields.get().twin().typ.as_deref())?;
        self.set_type.bind(py).call1((&m, typ))?;
        self.set_fields.bind(py).call1((&m, fields))?;
        Ok(m)
    }
}

/// How `rwcore.parse_line` makes a valid line's `Parsed`: the message's kit, `object.__new__`, `Parsed`, the
/// `__set__` of its slots `message`, `errors`, `warnings`, `_raw` and `profile`, what makes the warnings' tuple of
/// `Problem` values from the native findings, and the profile a `p=` slot names (`switch(name, profile)`, the
/// profile the line was parsed under). Made once (`rwcore._codec.PARSED_KIT`).
#[pyclass(module = "rwcore._native", frozen)]
pub struct ParsedKit {
    message: Py<MessageKit>,
    new: Py<PyAny>,
    class: Py<PyAny>,
    set_message: Py<PyAny>,
    set_errors: Py<PyAny>,
    set_warnings: Py<PyAny>,
    set_raw: Py<PyAny>,
    set_profile: Py<PyAny>,
    problems: Py<PyAny>,
    switch: Py<PyAny>,
}

#[pymethods]
impl ParsedKit {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        message: Py<MessageKit>,
        new: Py<PyAny>,
        class: Py<PyAny>,
        set_message: Py<PyAny>,
        set_errors: Py<PyAny>,
        set_warnings: Py<PyAny>,
        set_raw: Py<PyAny>,
        set_profile: Py<PyAny>,
        problems: Py<PyAny>,
        switch: Py<PyAny>,
    ) -> Self {
        ParsedKit {
            message,
            new,
            class,
            set_message,
            set_errors,
            set_warnings,
            set_raw,
            set_profile,
            problems,
            switch,
        }
    }
}

/// `rwcore.parse_line` of a valid line in one call: its `Parsed`, the message's fields held (see the module's
/// documentation), made with `kit`, or None for a line with errors (`rwcore._codec.parse_line` parses it again
/// for its twin and errors) or one Python cannot give as UTF-8 (a lone surrogate: parsed the same way, from a
/// copy). `profile` is an `rwcore.Profile`: the line is parsed under its `grammar`.
#[pyfunction]
fn parse_line<'py>(
    py: Python<'py>,
    line: Bound<'py, pyo3::types::PyString>,
    profile: &Bound<'py, PyAny>,
    kit: &Bound<'py, ParsedKit>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Ok(text) = PyBackedStr::try_from(line) else {
        return Ok(None);
    };
    let kit = kit.get();
    let grammar = profile
        .getattr(pyo3::intern!(py, "grammar"))?
        .cast_into::<crate::Grammar>()?;
    let switch = |name| kit.switch.bind(py).call1((name, profile));
    let (mut valid, mut warnings, mut switched) = (false, Vec::new(), None);
    let kept = Kept::try_new(Backed::Str(text), |text| {
        let (parsed, chosen) = crate::run_with(py, text.bytes(), &grammar.get().inner, switch)?;
        (valid, warnings, switched) = (parsed.errors.is_empty(), parsed.warnings, chosen);
        Ok::<_, PyErr>(parsed.twin)
    })?;
    if !valid {
        return Ok(None);
    }
    let fields = Bound::new(py, Fields::new(kept))?;
    let message = kit.message.get().message(&fields)?;
    let none = PyTuple::empty(py);
    let warnings = if warnings.is_empty() {
        none.clone().into_any()
    } else {
        kit.problems
            .bind(py)
            .call1((crate::problems(py, &warnings)?,))?
    };
    let parsed = kit.new.bind(py).call1((&kit.class,))?;
    kit.set_message.bind(py).call1((&parsed, message))?;
    kit.set_errors.bind(py).call1((&parsed, none))?;
    kit.set_warnings.bind(py).call1((&parsed, warnings))?;
    kit.set_raw.bind(py).call1((&parsed, py.None()))?;
    let used = switched.unwrap_or_else(|| profile.clone());
    kit.set_profile.bind(py).call1((&parsed, used))?;
    Ok(Some(parsed))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Fields>()?;
    m.add_class::<MessageKit>()?;
    m.add_class::<ParsedKit>()?;
    m.add_function(wrap_pyfunction!(parse_line, m)?)
}
