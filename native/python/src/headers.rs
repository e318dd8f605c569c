//! A record's headers as the engine made them: their bytes, read by the record batch builder as they are, and a
//! sequence of `(name, value)` pairs (a `str` and `bytes`) only when Python reads them. The outcome records carried
//! a tuple of pairs each, made by the engine and read back by the batch builder: about ten tuples, names and values
//! a record, made and freed for every record sent (a fifth of building a route's outcomes).

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::outcomes::headers_of;
use crate::string;

/// The headers of a record: names and values one after another in `data`, each header's name and value lengths in
/// `lengths`. Immutable; equal to (and hashed as) the tuple of its pairs, and added to a tuple as that tuple is.
#[pyclass(module = "rwcore._native", frozen, sequence)]
pub struct Headers {
    data: Vec<u8>,
    lengths: Vec<(usize, usize)>,
}

impl Headers {
    /// The headers of these pairs, in order.
    pub fn of<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> Headers {
        // sized first: grown a header at a time, the two vectors were reallocated about eight times a record
        let (count, size) = pairs
            .clone()
            .fold((0, 0), |(n, b), (k, v)| (n + 1, b + k.len() + v.len()));
        let (mut data, mut lengths) = (Vec::with_capacity(size), Vec::with_capacity(count));
        for (k, v) in pairs {
            data.extend_from_slice(k);
            data.extend_from_slice(v);
            lengths.push((k.len(), v.len()));
        }
        Headers { data, lengths }
    }

    /// Each header's name and value, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut at = 0;
        self.lengths.iter().map(move |&(k, v)| {
            let name = &self.data[at..at + k];
            let value = &self.data[at + k..at + k + v];
            at += k + v;
            (name, value)
        })
    }

    fn pair<'py>(py: Python<'py>, (k, v): (&[u8], &[u8])) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, [string(py, k)?, PyBytes::new(py, v).into_any()])
    }

    /// The tuple of its pairs, as Python reads headers.
    fn tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let pairs = self
            .pairs()
            .map(|p| Headers::pair(py, p))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, pairs)
    }
}

#[pymethods]
impl Headers {
    /// The headers of these `(name, value)` pairs: a `str` and `bytes` each.
    #[new]
    fn new(pairs: &Bound<'_, PyAny>) -> PyResult<Headers> {
        let read = headers_of(pairs)?;
        Ok(Headers::of(read.iter().map(|(k, v)| (&k[..], &v[..]))))
    }

    /// The bytes its names and values take (UTF-8), all together.
    #[getter]
    fn nbytes(&self) -> usize {
        self.data.len()
    }

    fn __len__(&self) -> usize {
        self.lengths.len()
    }

    /// A pair by its place (negative from the end), or a slice of the pairs as a tuple.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        at: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(i) = at.extract::<isize>() {
            let n = self.lengths.len() as isize;
            let place = if i < 0 { i + n } else { i };
            if !(0..n).contains(&place) {
                return Err(pyo3::exceptions::PyIndexError::new_err(
                    "headers index out of range",
                ));
            }
            let pair = self.pairs().nth(place as usize).unwrap_or((b"", b""));
            return Ok(Headers::pair(py, pair)?.into_any());
        }
        self.tuple(py)?.as_any().get_item(at)
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.tuple(py)?.as_any().try_iter()?.into_any())
    }

    fn __richcmp__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(theirs) = other.cast::<Headers>() {
            let same = theirs.get().data == self.data && theirs.get().lengths == self.lengths;
            return match op {
                CompareOp::Eq => Ok(pyo3::types::PyBool::new(py, same).to_owned().into_any()),
                CompareOp::Ne => Ok(pyo3::types::PyBool::new(py, !same).to_owned().into_any()),
                _ => Ok(py.NotImplemented().into_bound(py)),
            };
        }
        if !other.is_instance_of::<PyTuple>() {
            return Ok(py.NotImplemented().into_bound(py));
        }
        self.tuple(py)?.as_any().rich_compare(other, op)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.tuple(py)?.hash()
    }

    fn __add__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.tuple(py)?.as_any().add(other)
    }

    fn __radd__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        other.add(self.tuple(py)?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Headers({})", self.tuple(py)?.repr()?))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Headers>()
}
