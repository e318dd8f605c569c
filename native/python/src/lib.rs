//! `rwcore._native`: the Python bindings of the `rw1` crate. Each function takes and returns plain Python values
//! and does no work of its own beyond converting them; the logic is `rw1`'s.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The protocol's integrity digest (`h=`) of a canonical JSON text already encoded as UTF-8 (with
/// `surrogatepass`): the first 12 hex digits of its SHA-256.
#[pyfunction]
fn digest(data: &Bound<'_, PyBytes>) -> String {
    rw1::digest(data.as_bytes())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(digest, m)?)?;
    Ok(())
}
