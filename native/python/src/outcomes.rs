//! The bindings of `engine::outcomes` and `engine::masking`: a decided line's records (`gatekeeper.consumers.outcomes`)
//! and the masking of sensitive values (`gatekeeper.masking`). Attributes are read off the Python values once; the
//! records come back as plain tuples for the producer, their headers as the engine wrote them (`Headers`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use engine::masking::{self, Masker};
use engine::outcomes::{self as o, View};

use crate::decision::finding_of;
use crate::headers::Headers;
use crate::{opt_py_str, string, text};

fn attr<'py>(v: &Bound<'py, PyAny>, name: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    v.getattr(name)
}

fn opt_bytes(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        Ok(None)
    } else {
        Ok(Some(v.cast::<PyBytes>()?.as_bytes().to_vec()))
    }
}

/// A string enum member (a `str` itself: its value), or None.
fn opt_member(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        return Ok(None);
    }
    Ok(Some(text(v.cast::<PyString>()?)?.into_owned()))
}

/// Headers as Python holds them, `(str, bytes)` pairs, read into bytes.
pub(crate) fn headers_of(v: &Bound<'_, PyAny>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for item in v.try_iter()? {
        let (k, value): (Bound<'_, PyString>, Bound<'_, PyBytes>) = item?.extract()?;
        out.push((text(&k)?.into_owned(), value.as_bytes().to_vec()));
    }
    Ok(out)
}

/// A consumed record's Python values (`gatekeeper.consumers.outcomes.Source`), held while the engine reads them
/// where they are: its `Source` borrows from these (its value, key and headers were copied for every line).
struct SourceRefs<'py> {
    topic: Bound<'py, PyString>,
    partition: i64,
    offset: i64,
    key: Option<Bound<'py, PyBytes>>,
    value: Bound<'py, PyBytes>,
    timestamp: Option<i64>,
    headers: Vec<(Bound<'py, PyString>, Bound<'py, PyBytes>)>,
    attempt: i64,
}

impl<'py> SourceRefs<'py> {
    fn of(s: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = s.py();
        let key = attr(s, pyo3::intern!(py, "key"))?;
        let mut headers = Vec::new();
        for item in attr(s, pyo3::intern!(py, "headers"))?.try_iter()? {
            headers.push(item?.extract()?);
        }
        Ok(SourceRefs {
            topic: attr(s, pyo3::intern!(py, "topic"))?.cast_into::<PyString>()?,
            partition: attr(s, pyo3::intern!(py, "partition"))?.extract()?,
            offset: attr(s, pyo3::intern!(py, "offset"))?.extract()?,
            key: if key.is_none() {
                None
            } else {
                Some(key.cast_into::<PyBytes>()?)
            },
            value: attr(s, pyo3::intern!(py, "value"))?.cast_into::<PyBytes>()?,
            timestamp: attr(s, pyo3::intern!(py, "timestamp"))?.extract()?,
            headers,
            attempt: attr(s, pyo3::intern!(py, "attempt"))?.extract()?,
        })
    }

    fn source(&self) -> PyResult<o::Source<'_>> {
        Ok(o::Source {
            topic: text(&self.topic)?,
            partition: self.partition,
            offset: self.offset,
            key: self.key.as_ref().map(|k| k.as_bytes()),
            value: self.value.as_bytes(),
            timestamp: self.timestamp,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| Ok((text(k)?, v.as_bytes())))
                .collect::<PyResult<_>>()?,
            attempt: self.attempt,
        })
    }
}

fn str_attr(v: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<Vec<u8>> {
    Ok(text(&v.getattr(name)?.cast_into::<PyString>()?)?.into_owned())
}

fn targets_of(t: &Bound<'_, PyAny>) -> PyResult<o::Targets> {
    let py = t.py();
    Ok(o::Targets {
        output: str_attr(t, pyo3::intern!(py, "output"))?,
        dead_letter: str_attr(t, pyo3::intern!(py, "dead_letter"))?,
        alerts: str_attr(t, pyo3::intern!(py, "alerts"))?,
        name: str_attr(t, pyo3::intern!(py, "name"))?,
        dry_run: t.getattr(pyo3::intern!(py, "dry_run"))?.is_truthy()?,
    })
}

fn named_of(m: &Bound<'_, PyAny>) -> PyResult<Option<o::Named>> {
    if m.is_none() {
        return Ok(None);
    }
    let py = m.py();
    let get = |name: &Bound<'_, PyString>| opt_py_str(&m.getattr(name)?);
    Ok(Some(o::Named {
        id: get(pyo3::intern!(py, "id"))?,
        kind: get(pyo3::intern!(py, "type"))?,
        re: get(pyo3::intern!(py, "re"))?,
        from: get(pyo3::intern!(py, "from_"))?,
        to: get(pyo3::intern!(py, "to"))?,
        item: get(pyo3::intern!(py, "item"))?,
    }))
}

/// `f` of each item of a decision's problems or notes: a tuple (nearly always empty) read in place, anything else
/// iterated (an iterator was made for each of them, two a line).
fn each<T>(
    items: &Bound<'_, PyAny>,
    f: impl Fn(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    if let Ok(t) = items.cast::<PyTuple>() {
        return t.iter().map(|p| f(&p)).collect();
    }
    items.try_iter()?.map(|p| f(&p?)).collect()
}

fn decided_of(d: &Bound<'_, PyAny>) -> PyResult<o::Decided> {
    let py = d.py();
    let verdict = opt_member(&d.getattr(pyo3::intern!(py, "verdict"))?)?.unwrap_or_default();
    let verdict = match verdict.as_slice() {
        b"forward" => o::Verdict::Forward,
        b"alert" => o::Verdict::Alert,
        b"dead-letter" => o::Verdict::DeadLetter,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "a {} line has no outcome yet",
                String::from_utf8_lossy(other)
            )))
        }
    };
    let reason = opt_member(&d.getattr(pyo3::intern!(py, "reason"))?)?;
    let problems = each(&d.getattr(pyo3::intern!(py, "problems"))?, finding_of)?;
    let notes = each(&d.getattr(pyo3::intern!(py, "notes"))?, |p| {
        str_attr(p, pyo3::intern!(py, "code"))
    })?;
    Ok(o::Decided {
        verdict,
        internal_error: reason.as_deref() == Some(b"internal-error"),
        reason,
        check: if verdict == o::Verdict::DeadLetter {
            opt_py_str(&d.getattr(pyo3::intern!(py, "check"))?)?
        } else {
            None // only a dead letter says where its problems come from
        },
        problems,
        notes,
        repeated: d.getattr(pyo3::intern!(py, "repeated"))?.is_truthy()?,
        decided_at: d.getattr(pyo3::intern!(py, "decided_at"))?.extract()?,
        raise_alert: d.getattr(pyo3::intern!(py, "raise_alert"))?.is_truthy()?,
        message: None,
    })
    .and_then(|mut decided: o::Decided| {
        // only an alert names the line's slots
        if decided.verdict == o::Verdict::Alert || decided.raise_alert {
            decided.message = named_of(&d.getattr(pyo3::intern!(py, "message"))?)?;
        }
        Ok(decided)
    })
}

fn notice_of(n: &Bound<'_, PyAny>, author: &[u8], sig: Option<Vec<u8>>) -> PyResult<o::Notice> {
    let py = n.py();
    Ok(o::Notice {
        id: str_attr(n, pyo3::intern!(py, "id"))?,
        line: str_attr(n, pyo3::intern!(py, "line"))?,
        re: str_attr(n, pyo3::intern!(py, "re"))?,
        reason: str_attr(n, pyo3::intern!(py, "reason"))?,
        why: str_attr(n, pyo3::intern!(py, "why"))?,
        author: author.to_vec(),
        sig,
    })
}

fn masker_of(slots: &Bound<'_, PyAny>) -> PyResult<Masker> {
    let mut extra = Vec::new();
    for s in slots.try_iter()? {
        extra.push(text(&s?.cast_into::<PyString>()?)?.into_owned());
    }
    Ok(Masker::for_slots(extra.iter().map(Vec::as_slice)))
}

/// One record as Python's `Outcome` takes it: (kind, topic, key, value, headers, level, size).
fn record_py<'py>(py: Python<'py>, r: &View<'_>) -> PyResult<Bound<'py, PyTuple>> {
    let key = match r.key {
        Some(k) => PyBytes::new(py, k).into_any(),
        None => py.None().into_bound(py),
    };
    PyTuple::new(
        py,
        [
            PyString::new(py, r.kind.name()).into_any(),
            string(py, r.topic)?,
            key,
            PyBytes::new(py, &r.value).into_any(),
            Bound::new(py, headers_of_view(r))?.into_any(),
            r.level.into_pyobject(py)?.into_any(),
            r.size().into_pyobject(py)?.into_any(),
        ],
    )
}

/// What building a route's outcomes reads of the route, read once: where they go, its sensitive slots, the
/// gatekeeper's version and the notices' author.
#[pyclass(module = "rwcore._native", frozen)]
pub struct OutcomeRoute {
    targets: o::Targets,
    masker: Masker,
    version: Vec<u8>,
    author: Vec<u8>,
}

#[pymethods]
impl OutcomeRoute {
    #[new]
    fn new(
        targets: &Bound<'_, PyAny>,
        sensitive: &Bound<'_, PyAny>,
        version: &Bound<'_, PyString>,
        author: &Bound<'_, PyString>,
    ) -> PyResult<OutcomeRoute> {
        Ok(OutcomeRoute {
            targets: targets_of(targets)?,
            masker: masker_of(sensitive)?,
            version: text(version)?.into_owned(),
            author: text(author)?.into_owned(),
        })
    }
}

/// The drafts of one decided line's records: `decision`, `source` and the notice read off their Python values;
/// `conversation`, `notice`, `sig` and `notice_sig` may be None. Both bindings below build through it.
/// `made` is given the drafts, which borrow what was read.
#[allow(clippy::too_many_arguments)]
fn with_drafts<T>(
    route: &OutcomeRoute,
    decision: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    conversation: &Bound<'_, PyAny>,
    now: f64,
    notice: &Bound<'_, PyAny>,
    sig: &Bound<'_, PyAny>,
    notice_sig: &Bound<'_, PyAny>,
    made: impl FnOnce(Vec<o::Draft<'_>>) -> PyResult<T>,
) -> PyResult<T> {
    let decided = decided_of(decision)?;
    let refs = SourceRefs::of(source)?;
    let source = refs.source()?;
    let conversation = if conversation.is_none() {
        None
    } else {
        Some(text(conversation.cast::<PyString>()?)?)
    };
    let notice = if notice.is_none() {
        None
    } else {
        Some(notice_of(notice, &route.author, opt_bytes(notice_sig)?)?)
    };
    let sig = opt_bytes(sig)?;
    let line = o::Line {
        decided: &decided,
        source: &source,
        targets: &route.targets,
        conversation: conversation.as_deref(),
        masker: &route.masker,
        now,
        notice: notice.as_ref(),
        sig: sig.as_deref(),
        version: &route.version,
    };
    let drafts =
        crate::guarded(|| o::build(&line))?.map_err(pyo3::exceptions::PyValueError::new_err)?;
    made(drafts)
}

/// The records of one decided line (`gatekeeper.consumers.outcomes.build` documents them) at trim level `level`,
/// as tuples (kind, topic, key, value, headers, level, size), None for one past its last level. `sig` and the
/// notice's `notice_sig` are the `gk.sig` values the caller signed, with signing configured. Nothing is kept: a
/// record trimmed further is built again (trimming is rare).
#[pyfunction]
#[pyo3(signature = (route, decision, source, conversation, now, notice, sig, notice_sig, level=0))]
#[allow(clippy::too_many_arguments)]
fn build_outcomes<'py>(
    py: Python<'py>,
    route: &Bound<'py, OutcomeRoute>,
    decision: &Bound<'py, PyAny>,
    source: &Bound<'py, PyAny>,
    conversation: &Bound<'py, PyAny>,
    now: f64,
    notice: &Bound<'py, PyAny>,
    sig: &Bound<'py, PyAny>,
    notice_sig: &Bound<'py, PyAny>,
    level: u8,
) -> PyResult<Bound<'py, PyList>> {
    with_drafts(
        route.get(),
        decision,
        source,
        conversation,
        now,
        notice,
        sig,
        notice_sig,
        |drafts| {
            let out = PyList::empty(py);
            for draft in &drafts {
                match crate::guarded(|| draft.view(level))? {
                    Some(view) => out.append(record_py(py, &view)?)?,
                    None => out.append(py.None())?,
                }
            }
            Ok(out)
        },
    )
}

/// The outcomes of a route's decided lines in one call (`gatekeeper.consumers.outcomes.build_all`): for each line
/// `(decision, source, conversation, notice)`, with its `(sig, notice_sig)` in `sigs` when signing is configured
/// (None: nothing is signed), its records at level 0, each made an `outcome`
/// (`Outcome(kind, topic, key, value, headers, source, level, draft, place, size)`, `kinds` mapping a kind's name
/// to its member) whose draft is the line's build_outcomes arguments and place its place among the line's records:
/// what a further trim level is built again from. A line whose records cannot be built fails the call (the caller
/// builds the lines again one by one, each under its own guard).
#[pyfunction]
fn build_outcomes_all<'py>(
    py: Python<'py>,
    route: &Bound<'py, OutcomeRoute>,
    lines: &Bound<'py, PyList>,
    sigs: Option<&Bound<'py, PyList>>,
    now: f64,
    outcome: &Bound<'py, PyAny>,
    kinds: &Bound<'py, pyo3::types::PyDict>,
) -> PyResult<Bound<'py, PyList>> {
    if sigs.is_some_and(|s| s.len() != lines.len()) {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a batch's lines and their signatures differ in number",
        ));
    }
    let now_py = now.into_pyobject(py)?;
    let zero = 0u8.into_pyobject(py)?;
    let none = py.None().into_bound(py);
    let all = PyList::empty(py);
    let mut made_once = MadeOnce::default();
    for (i, item) in lines.iter().enumerate() {
        let item = item.cast_into::<PyTuple>()?;
        if item.len() != 4 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a line to build is 4 values",
            ));
        }
        let (decision, source) = (item.get_item(0)?, item.get_item(1)?);
        let (conversation, notice) = (item.get_item(2)?, item.get_item(3)?);
        let (sig, notice_sig) = match sigs {
            Some(s) => s
                .get_item(i)?
                .extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?,
            None => (none.clone(), none.clone()),
        };
        let value = attr(&source, pyo3::intern!(py, "value"))?;
        let key = attr(&source, pyo3::intern!(py, "key"))?;
        let args = PyTuple::new(
            py,
            [
                route.clone().into_any(),
                decision.clone(),
                source.clone(),
                conversation.clone(),
                now_py.clone().into_any(),
                notice.clone(),
                sig.clone(),
                notice_sig.clone(),
            ],
        )?;
        let out = PyList::empty(py);
        with_drafts(
            route.get(),
            &decision,
            &source,
            &conversation,
            now,
            &notice,
            &sig,
            &notice_sig,
            |drafts| {
                for (place, draft) in drafts.iter().enumerate() {
                    let Some(view) = crate::guarded(|| draft.view(0))? else {
                        continue;
                    };
                    let kind = kinds
                        .get_item(view.kind.name())?
                        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(view.kind.name()))?;
                    let made = outcome.call1((
                        kind,
                        made_once.topic(py, view.topic)?,
                        same_or_new(py, view.key, &key)?,
                        same_or_new(py, Some(&view.value), &value)?,
                        Bound::new(py, headers_of_view(&view))?,
                        &source,
                        &zero,
                        &args,
                        place,
                        view.size(),
                    ))?;
                    out.append(made)?;
                }
                Ok(())
            },
        )?;
        all.append(out)?;
    }
    Ok(all)
}

/// `bytes` of a record's key or value: the consumed record's own object when they are its bytes (a forwarded or
/// dead-lettered record carries them unchanged), a new one otherwise.
fn same_or_new<'py>(
    py: Python<'py>,
    b: Option<&[u8]>,
    theirs: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match b {
        None => py.None().into_bound(py),
        // the engine's record borrows the consumed record's own bytes: the same buffer, nothing to compare
        Some(b) => match theirs.cast::<PyBytes>() {
            Ok(t) if std::ptr::eq(t.as_bytes(), b) || t.as_bytes() == b => t.clone().into_any(),
            _ => PyBytes::new(py, b).into_any(),
        },
    })
}

/// What a route's batch of records shares, made once per call: its topics' names.
#[derive(Default)]
struct MadeOnce<'py> {
    topics: Vec<(Vec<u8>, Bound<'py, PyAny>)>,
}

impl<'py> MadeOnce<'py> {
    fn topic(&mut self, py: Python<'py>, t: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        if let Some((_, made)) = self.topics.iter().find(|(name, _)| name == t) {
            return Ok(made.clone());
        }
        let made = string(py, t)?;
        self.topics.push((t.to_vec(), made.clone()));
        Ok(made)
    }
}

/// A record's headers as the engine wrote them (`headers::Headers`: no Python pair made unless Python reads one).
fn headers_of_view(r: &View<'_>) -> Headers {
    Headers::of(r.headers().map(|(k, v)| (&k[..], &v[..])))
}

/// An upper estimate of a record's size in a batch (what `max.message.bytes` limits).
#[pyfunction]
fn record_size(
    key: Option<Bound<'_, PyBytes>>,
    value: &Bound<'_, PyBytes>,
    headers: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let key = key.as_ref().map(|k| k.as_bytes());
    if let Ok(native) = headers.cast::<Headers>() {
        return Ok(o::size(key, value.as_bytes(), native.get().pairs()));
    }
    Ok(o::size(
        key,
        value.as_bytes(),
        headers_of(headers)?.iter().map(|(k, v)| (&k[..], &v[..])),
    ))
}

/// Epoch seconds as ISO-8601 UTC with milliseconds and a `Z`.
#[pyfunction]
fn iso_time(epoch: f64) -> PyResult<String> {
    o::iso(epoch).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!("no date and time for the epoch {epoch}"))
    })
}

/// A sensitive value masked: `****` and its last 2-4 characters.
#[pyfunction]
fn mask_value<'py>(py: Python<'py>, value: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    string(py, &masking::mask_value(&text(value)?))
}

/// A value of a sensitive slot masked, a `+` list element by element.
#[pyfunction]
fn mask_list<'py>(py: Python<'py>, value: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    string(py, &masking::mask_list(&text(value)?))
}

/// What of a sensitive value a masker learns: the value and the parts of a `+` list, each of four characters or
/// more (masking every `12` in a text would hide more than it protects).
#[pyfunction]
fn learnable<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyString>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let v = text(value)?;
    masking::learnable(&v)
        .iter()
        .map(|p| string(py, p))
        .collect()
}

/// A masker of `slots` that has learnt no value yet.
fn slots_only(slots: &Bound<'_, PyAny>) -> PyResult<Masker> {
    Ok(Masker {
        slots: learnt(slots)?,
        values: Default::default(),
    })
}

fn strings<'py>(py: Python<'py>, values: &[Vec<u8>]) -> PyResult<Vec<Bound<'py, PyAny>>> {
    values.iter().map(|v| string(py, v)).collect()
}

/// An iterable of `str` (slot names, values learnt) as a set of their UTF-8 bytes.
pub(crate) fn learnt(values: &Bound<'_, PyAny>) -> PyResult<std::collections::BTreeSet<Vec<u8>>> {
    values
        .try_iter()?
        .map(|v| Ok(text(&v?.cast_into::<PyString>()?)?.into_owned()))
        .collect()
}

/// `text` masked against the sensitive `slots` (the defaults added by the caller) and the `values` learnt.
#[pyfunction]
fn mask_text<'py>(
    py: Python<'py>,
    text_: &Bound<'py, PyString>,
    slots: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let masker = Masker {
        slots: learnt(slots)?,
        values: learnt(values)?,
    };
    string(py, &masker.text(&text(text_)?))
}

/// A line as a log, a header or an alert shows it: masked by a masker of the default sensitive slots and `slots`
/// that knows the line's own sensitive values (`gatekeeper.masking.mask_line`, in one call: a dead letter's log
/// line masks its line).
#[pyfunction]
fn mask_line<'py>(
    py: Python<'py>,
    line: &Bound<'py, PyString>,
    slots: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let line = text(line)?;
    let extra = learnt(slots)?;
    let masker = Masker::for_slots(extra.iter().map(Vec::as_slice)).knowing(Some(&line), &[]);
    string(py, &masker.text(&line))
}

/// The values of `text`'s `key=value` tokens whose key is one of `slots`.
#[pyfunction]
fn sensitive_values<'py>(
    py: Python<'py>,
    text_: &Bound<'py, PyString>,
    slots: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    strings(py, &slots_only(slots)?.line_values(&text(text_)?))
}

/// The expected and got values of the problems about one of `slots`.
#[pyfunction]
fn problem_values<'py>(
    py: Python<'py>,
    problems: &Bound<'py, PyAny>,
    slots: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut found = Vec::new();
    for p in problems.try_iter()? {
        found.push(finding_of(&p?)?);
    }
    strings(py, &slots_only(slots)?.problem_values(&found))
}

/// JSON text with every character that could act on a reader escaped (`engine::inert`).
#[pyfunction]
fn json_inert<'py>(py: Python<'py>, doc: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    let t = text(doc)?;
    if t.iter().all(|b| (0x20..0x7F).contains(b)) {
        return Ok(doc.clone().into_any()); // printable ASCII (a log line, nearly always): nothing to escape
    }
    string(py, &engine::inert::json_inert(&t))
}

/// Where the producer's default partitioner puts a record with this key among `count` partitions: Kafka's Java
/// client's (`toPositive(murmur2(key)) % count`), which aiokafka's `DefaultPartitioner` computes in pure Python
/// (about 3 µs a key). The index into the topic's partitions, sorted.
#[pyfunction]
fn key_partition(key: &[u8], count: usize) -> PyResult<usize> {
    if count == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a topic without partitions",
        ));
    }
    let hash = murmur2::murmur2(key, murmur2::KAFKA_SEED) & 0x7fff_ffff;
    Ok(hash as usize % count)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OutcomeRoute>()?;
    m.add_function(wrap_pyfunction!(key_partition, m)?)?;
    m.add_function(wrap_pyfunction!(build_outcomes, m)?)?;
    m.add_function(wrap_pyfunction!(build_outcomes_all, m)?)?;
    m.add_function(wrap_pyfunction!(record_size, m)?)?;
    m.add_function(wrap_pyfunction!(iso_time, m)?)?;
    m.add_function(wrap_pyfunction!(mask_value, m)?)?;
    m.add_function(wrap_pyfunction!(mask_text, m)?)?;
    m.add_function(wrap_pyfunction!(mask_line, m)?)?;
    m.add_function(wrap_pyfunction!(mask_list, m)?)?;
    m.add_function(wrap_pyfunction!(learnable, m)?)?;
    m.add_function(wrap_pyfunction!(problem_values, m)?)?;
    m.add("DEFAULT_SENSITIVE", masking::DEFAULT_SENSITIVE.to_vec())?;
    m.add("MASK", String::from_utf8_lossy(masking::MASK).into_owned())?;
    m.add_function(wrap_pyfunction!(sensitive_values, m)?)?;
    m.add_function(wrap_pyfunction!(json_inert, m)?)?;
    Ok(())
}
