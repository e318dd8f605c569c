//! A parsed line's fields held natively until Python reads them.
//!
//! `prepare_batch` parses every line of a batch, and every decision carries its line's `rwcore.Message`; but in
//! the worker Python reads a message's type for nearly every line and its other fields only for a few (a held
//! reply's `re`, an alert, a refusal notice, a log line). Making every field a Python value was about twenty
//! objects and a third of `prepare_batch` a line. So the batch's messages are made with their version and type
//! only, and their other fields held here ([`Fields`], the message's `_fields`); the message makes them on the
//! first read of one (`rwcore._types.Message.__getattr__`), the same values `parse_line` gives.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use rw1::Twin;

use crate::{opt_string, opt_value, string, value};

self_cell::self_cell!(
    /// A line's value and the twin the parser made of it, the twin borrowing its text from the value (a Python
    /// `bytes`, immutable, kept alive here) instead of a copy of each of its fields: a line's twin was about thirty
    /// allocations. A self-referential value, which `self_cell` makes without unsafe code of ours.
    pub(crate) struct Kept {
        owner: Py<pyo3::types::PyBytes>,
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Fields>()
}
