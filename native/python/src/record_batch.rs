//! The outcomes' Kafka record batches (`engine::record_batch`) for aiokafka's producer: its `BatchBuilder.append`
//! takes one record at a time (about 2.7 µs each here, a list made of the record's headers every time), and its
//! `send_batch` takes any object with the builder's methods, which [`RecordBatch`] has.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use engine::record_batch::{Builder, Producer, Record};

use crate::headers::Headers;
use crate::text;

/// A record batch for aiokafka's `send_batch`: the methods its producer calls on a `BatchBuilder`. It is closed
/// from the start (nothing the producer's per-record `send` path sends joins it) and not transactional (the
/// idempotent producer's).
#[pyclass(module = "rwcore._native")]
pub struct RecordBatch {
    builder: Builder,
    timestamp: i64,
    producer: Producer,
    built: Option<Py<PyBytes>>,
}

#[pymethods]
impl RecordBatch {
    /// The producer's per-record path: a closed batch takes nothing (None).
    #[pyo3(signature = (*, timestamp=None, key=None, value=None, headers=None))]
    fn append(
        &self,
        timestamp: Option<Bound<'_, PyAny>>,
        key: Option<Bound<'_, PyAny>>,
        value: Option<Bound<'_, PyAny>>,
        headers: Option<Bound<'_, PyAny>>,
    ) -> Option<Py<PyAny>> {
        let _ = (timestamp, key, value, headers);
        None
    }

    fn close(&self) {}

    fn closed(&self) -> bool {
        true
    }

    fn record_count(&self) -> i32 {
        self.builder.count()
    }

    fn size(&self) -> usize {
        self.builder.size()
    }

    fn _set_producer_state(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        let state = Producer::new(producer_id, producer_epoch, base_sequence);
        if state != self.producer {
            self.producer = state;
            self.built = None;
        }
    }

    fn _build<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        if let Some(b) = &self.built {
            return b.bind(py).clone();
        }
        let bytes = PyBytes::new(py, self.builder.finish(self.timestamp, self.producer));
        self.built = Some(bytes.clone().unbind());
        bytes
    }
}

/// The record batches of `records` (each with a `key`, a `value` and `headers`, pairs of a `str` name and a
/// `bytes` value, or the engine's `Headers`), in order, for one partition: each under `max_size` bytes (a record
/// that large alone in one), every record stamped `timestamp` (milliseconds since the epoch).
#[pyfunction]
fn record_batches(
    records: &Bound<'_, PyAny>,
    max_size: usize,
    timestamp: i64,
) -> PyResult<Vec<RecordBatch>> {
    let py = records.py();
    let (key_name, value_name, headers_name) = (
        pyo3::intern!(py, "key"),
        pyo3::intern!(py, "value"),
        pyo3::intern!(py, "headers"),
    );
    let batch = |builder| RecordBatch {
        builder,
        timestamp,
        producer: Producer::default(),
        built: None,
    };
    let mut out = Vec::new();
    let mut current = Builder::new(max_size);
    let mut named: Vec<(Bound<'_, PyString>, Option<Bound<'_, PyBytes>>)> = Vec::new();
    for item in records.try_iter()? {
        let item = item?;
        let key = item.getattr(key_name)?;
        let value = item.getattr(value_name)?;
        let held = item.getattr(headers_name)?;
        let native = held.cast::<Headers>().ok().map(|h| h.get());
        named.clear();
        if native.is_none() {
            for h in held.try_iter()? {
                named.push(h?.extract()?);
            }
        }
        let names = named
            .iter()
            .map(|(k, _)| text(k))
            .collect::<PyResult<Vec<_>>>()?;
        let headers: Vec<(&[u8], Option<&[u8]>)> = match native {
            // the engine's headers, read as their bytes
            Some(h) => h.pairs().map(|(k, v)| (k, Some(v))).collect(),
            None => names
                .iter()
                .zip(&named)
                .map(|(k, (_, v))| (&k[..], v.as_ref().map(|v| v.as_bytes())))
                .collect(),
        };
        let (key, value) = (bytes_or_none(&key)?, bytes_or_none(&value)?);
        let record = Record {
            key: key.as_ref().map(|k| k.as_bytes()),
            value: value.as_ref().map(|v| v.as_bytes()),
            headers: &headers,
        };
        if !current.append(&record) {
            out.push(batch(std::mem::replace(
                &mut current,
                Builder::new(max_size),
            )));
            current.append(&record);
        }
    }
    if current.count() > 0 {
        out.push(batch(current));
    }
    Ok(out)
}

/// A key or value as aiokafka's builder takes it, None or bytes: anything else is a TypeError, never a null record.
fn bytes_or_none<'py>(v: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if v.is_none() {
        return Ok(None);
    }
    Ok(Some(v.cast::<PyBytes>()?.clone()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RecordBatch>()?;
    m.add_function(wrap_pyfunction!(record_batches, m)?)?;
    Ok(())
}
