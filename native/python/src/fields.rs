//! A parsed line's fields held natively until Python reads them.
//!
//! Every parsed line becomes an `rwcore.Message` (`parse_line`, and `prepare_batch` for the worker's batches), but
//! most are never read past their type: in the worker Python reads a message's type for nearly every line and its
//! other fields only for a few (a held reply's `re`, an alert, a refusal notice, a log line), and the typed API's
//! checks read the parser's twin here rather than the fields. Making every field a Python value was about twenty
//! objects and a third of `prepare_batch` a line. So a parsed message is made with its version and type only, and
//! its other fields held here ([`Fields`], the message's `_fields`); the message makes them on the first read of
//! one (`rwcore._types.Message.__getattr__`), the same values `Fields::values` gives.

use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyDict, PyTuple};

use rw1::Twin;

use crate::{opt_string, opt_value, string, value};

/// A line's text as Python holds it (immutable, kept alive here): a consumed record's `bytes`, or a `str` handed to
/// `parse_line` (its UTF-8, which Python keeps with the string).
pub(crate) enum Backed {
    Bytes(PyBackedBytes),
    Str(PyBackedStr),
}

impl Backed {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Backed::Bytes(b) => b,
            Backed::Str(s) => s.as_bytes(),
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

/// A parsed line's twin, held for the `rwcore.Message` made of it (see the module's documentation).
#[pyclass(module = "rwcore._native", frozen)]
pub struct Fields {
    kept: Kept,
}

impl Fields {
    pub(crate) fn new(kept: Kept) -> Self {
        Fields { kept }
    }

    pub(crate) fn twin(&self) -> &Twin<'_> {
        self.kept.borrow_dependent()
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

/// What makes a batch's messages, read once per batch: `(object.__new__, Message, object.__setattr__, version)`.
pub(crate) struct MessageKit<'py> {
    new: Bound<'py, PyAny>,
    class: Bound<'py, PyAny>,
    set: Bound<'py, PyAny>,
    version: Bound<'py, PyAny>,
}

impl<'py> MessageKit<'py> {
    pub(crate) fn of(kit: &Bound<'py, PyAny>) -> PyResult<Self> {
        let item = |i: usize| kit.get_item(i);
        Ok(MessageKit {
            new: item(0)?,
            class: item(1)?,
            set: item(2)?,
            version: item(3)?,
        })
    }

    /// The `rwcore.Message` of a parsed line: its version and type set, its other fields held (`fields`). The
    /// message is frozen: its slots are set as a frozen dataclass's `__init__` sets them (`object.__setattr__`).
    pub(crate) fn message(&self, fields: &Bound<'py, Fields>) -> PyResult<Bound<'py, PyAny>> {
        let py = fields.py();
        let m = self.new.call1((&self.class,))?;
        self.set
            .call1((&m, pyo3::intern!(py, "v"), &self.version))?;
        let typ = opt_string(py, fields.get().twin().typ.as_deref())?;
        self.set.call1((&m, pyo3::intern!(py, "type"), typ))?;
        self.set.call1((&m, pyo3::intern!(py, "_fields"), fields))?;
        Ok(m)
    }
}

/// A valid line's `(message, warnings, switched)`.
type HeldParse<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, pyo3::types::PyList>,
    Bound<'py, PyAny>,
);

/// Parse a line (`str`) under a grammar (`switch` as for `parse`) into a `rwcore.Message` whose fields are held
/// (see the module's documentation): `(message, warnings, switched)` for a valid line, None for one with errors
/// (`rwcore._codec.parse_message` parses it again for its twin and errors) or one Python cannot give as UTF-8 (a
/// lone surrogate: parsed the same way, from a copy).
#[pyfunction]
fn parse_held<'py>(
    py: Python<'py>,
    line: Bound<'py, pyo3::types::PyString>,
    grammar: &Bound<'py, crate::Grammar>,
    switch: &Bound<'py, PyAny>,
    message_kit: &Bound<'py, PyAny>,
) -> PyResult<Option<HeldParse<'py>>> {
    let Ok(text) = PyBackedStr::try_from(line) else {
        return Ok(None);
    };
    let (mut valid, mut warnings, mut switched) = (false, Vec::new(), None);
    let kept = Kept::try_new(Backed::Str(text), |text| {
        let (parsed, chosen) = crate::run(py, text.bytes(), &grammar.get().inner, switch)?;
        (valid, warnings, switched) = (parsed.errors.is_empty(), parsed.warnings, chosen);
        Ok::<_, PyErr>(parsed.twin)
    })?;
    if !valid {
        return Ok(None);
    }
    let fields = Bound::new(py, Fields::new(kept))?;
    let message = MessageKit::of(message_kit)?.message(&fields)?;
    let switched = switched.unwrap_or_else(|| py.None().into_bound(py));
    Ok(Some((message, crate::problems(py, &warnings)?, switched)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Fields>()?;
    m.add_function(wrap_pyfunction!(parse_held, m)?)
}
