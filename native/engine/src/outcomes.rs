//! The records the gatekeeper produces for one decided line, by trim level: its forward or its dead letter, an
//! alert beside it, a refusal notice to its sender. Pure: the bindings hand them to Kafka's producer.
//!
//! `gatekeeper.consumers.outcomes` documents every header and the trim levels (the table the operators read); this
//! module writes them. What it is given is already decided: the verdict, the problems, the notice's words and the
//! gatekeeper's signature (`gatekeeper.verdicts` signs, with the key it holds).

use std::borrow::Cow;

use crate::decide::{civil, push_padded, Finding};
use crate::inert;
use crate::masking::Masker;

/// Bytes a record adds to its key, value and headers in a record batch (an upper estimate, batch header included).
pub const RECORD_OVERHEAD: usize = 96;
/// `gk.reason` of a forwarded line its output topic could not hold.
pub const OUTCOME_TOO_LARGE: &[u8] = b"outcome-too-large";
const HEADER_PREFIX: &[u8] = b"gk.";
/// What each trim level drops, in order (`gk.trimmed` lists those done).
const TRIMMED: [&str; 3] = ["problems", "headers", "value"];

/// A header: its name (text) and value, each borrowed where it can be (the gatekeeper's own names are static; the
/// consumed record's coordinates, key, value and own headers, the route's topics and the version are read where
/// they are: a line's records copied them some thirty times).
pub type Header<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Output,
    DeadLetter,
    Alert,
    Notice,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Output => "output",
            Kind::DeadLetter => "dead-letter",
            Kind::Alert => "alert",
            Kind::Notice => "notice",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    Alert,
    DeadLetter,
}

/// The consumed record an outcome answers for, borrowed from whoever holds it.
#[derive(Debug, Clone, Default)]
pub struct Source<'a> {
    pub topic: Cow<'a, [u8]>,
    pub partition: i64,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    /// epoch milliseconds
    pub timestamp: Option<i64>,
    pub headers: Vec<(Cow<'a, [u8]>, &'a [u8])>,
    /// the attempt a dead letter of this record is (1, or one more than a replayed dead letter's)
    pub attempt: i64,
}

/// Where a route's outcomes go.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    pub output: Vec<u8>,
    pub dead_letter: Vec<u8>,
    pub alerts: Vec<u8>,
    pub name: Vec<u8>,
    pub dry_run: bool,
}

/// The slots of the decided line an alert names.
#[derive(Debug, Clone, Default)]
pub struct Named {
    pub id: Option<Vec<u8>>,
    pub kind: Option<Vec<u8>>,
    pub re: Option<Vec<u8>>,
    pub from: Option<Vec<u8>>,
    pub to: Option<Vec<u8>>,
    pub item: Option<Vec<u8>>,
}

/// What was decided about the line.
#[derive(Debug, Clone)]
pub struct Decided {
    pub verdict: Verdict,
    pub reason: Option<Vec<u8>>,
    /// where the problems come from (`gk.check`)
    pub check: Option<Vec<u8>>,
    pub internal_error: bool,
    pub problems: Vec<Finding>,
    pub notes: Vec<Vec<u8>>,
    pub repeated: bool,
    pub decided_at: f64,
    pub raise_alert: bool,
    pub message: Option<Named>,
}

/// A refusal notice to write, its words decided (`gatekeeper.notices`).
#[derive(Debug, Clone)]
pub struct Notice {
    pub id: Vec<u8>,
    pub line: Vec<u8>,
    pub re: Vec<u8>,
    pub reason: Vec<u8>,
    pub why: Vec<u8>,
    pub author: Vec<u8>,
    /// its `gk.sig` header's value, with signing configured
    pub sig: Option<Vec<u8>>,
}

/// Everything building one line's outcomes reads.
#[derive(Debug, Clone)]
pub struct Line<'a> {
    pub decided: &'a Decided,
    pub source: &'a Source<'a>,
    pub targets: &'a Targets,
    pub conversation: Option<&'a [u8]>,
    /// the route's sensitive slots (the defaults added)
    pub masker: &'a Masker,
    pub now: f64,
    pub notice: Option<&'a Notice>,
    /// the forward's `gk.sig` header's value, with signing configured
    pub sig: Option<&'a [u8]>,
    pub version: &'a [u8],
}

/// A record at a trim level, owned (the tests' view of one).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub topic: Vec<u8>,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub level: u8,
}

/// An upper estimate of a record's size in a batch: its key, value and headers (name, value) with what a record
/// adds to them.
pub fn size<'h>(
    key: Option<&[u8]>,
    value: &[u8],
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> usize {
    RECORD_OVERHEAD
        + key.map_or(0, <[u8]>::len)
        + value.len()
        + headers.map(|(k, v)| 10 + k.len() + v.len()).sum::<usize>()
}

/// A value of an alert's JSON document.
#[derive(Debug, Clone)]
enum Field {
    Text(Option<Vec<u8>>),
    Int(Option<i64>),
    Bool(bool),
    /// JSON written already (inert)
    Raw(Vec<u8>),
}

/// An alert's document: its fields in order.
type Doc = Vec<(&'static str, Field)>;

/// Everything an outcome may carry, by trim level: rendered at level 0, and again one level further each time the
/// record does not fit its topic.
#[derive(Debug, Clone)]
pub struct Draft<'a> {
    kind: Kind,
    topic: &'a [u8],
    dead_letter: &'a [u8],
    key: Option<&'a [u8]>,
    value: Cow<'a, [u8]>,
    required: Vec<Header<'a>>,
    /// dropped at level 1
    problems: Vec<Header<'a>>,
    /// dropped at level 2
    optional: Vec<Header<'a>>,
    alert: Option<Doc>,
    /// a forward's: the attempt its dead letter would be, were it moved to the dead-letter topic (`moved`)
    attempt: i64,
}

fn h<'a>(name: &'static str, value: impl Into<Cow<'a, [u8]>>) -> Header<'a> {
    (Cow::Borrowed(name.as_bytes()), value.into())
}

fn decimal(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// Epoch seconds as ISO-8601 UTC with milliseconds and a `Z` (`2026-10-01T09:00:00.000Z`), as Python's
/// `datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")` writes it: the fraction rounded half to
/// even to microseconds, then cut to milliseconds. None for a time Python's `datetime` cannot hold.
pub fn iso(epoch: f64) -> Option<String> {
    let [y, m, d, h, min, s, ms] = iso_fields(epoch)?;
    // written without the formatter (every line's outcome carries a time): each field is within its width here
    let mut out = Vec::with_capacity(24);
    for (v, width, after) in [
        (y, 4, b'-'),
        (m, 2, b'-'),
        (d, 2, b'T'),
        (h, 2, b':'),
        (min, 2, b':'),
        (s, 2, b'.'),
        (ms, 3, b'Z'),
    ] {
        push_padded(&mut out, v, width);
        out.push(after);
    }
    String::from_utf8(out).ok()
}

/// The year (1-9999), month, day, hour, minute, second and millisecond `iso` writes, or None.
fn iso_fields(epoch: f64) -> Option<[u32; 7]> {
    if !epoch.is_finite() {
        return None;
    }
    let mut whole = epoch.trunc();
    let mut micros = ((epoch - whole) * 1e6).round_ties_even();
    if micros >= 1e6 {
        micros -= 1e6;
        whole += 1.0;
    } else if micros < 0.0 {
        micros += 1e6;
        whole -= 1.0;
    }
    if whole.abs() > 1e15 {
        return None;
    }
    let secs = whole as i64;
    let (y, m, d) = civil(secs.div_euclid(86_400));
    if !(1..=9999).contains(&y) {
        return None;
    }
    let rem = secs.rem_euclid(86_400);
    let fields = [
        y,
        m,
        d,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        micros as i64 / 1000,
    ];
    Some(fields.map(|v| u32::try_from(v).unwrap_or(0))) // all within 0..=9999 here
}

fn iso_bytes(epoch: f64) -> Result<Vec<u8>, String> {
    thread_local! {
        /// The last time written, by its bits: a batch's records share their decision's time, and writing it was
        /// a twentieth of building a record
        static LAST: std::cell::RefCell<Option<(u64, Vec<u8>)>> = const { std::cell::RefCell::new(None) };
    }
    let bits = epoch.to_bits();
    if let Some(hit) = LAST.with_borrow(|last| {
        last.as_ref()
            .filter(|(b, _)| *b == bits)
            .map(|(_, t)| t.clone())
    }) {
        return Ok(hit);
    }
    let made = iso(epoch)
        .map(String::into_bytes)
        .ok_or_else(|| format!("no date and time for the epoch {epoch}"))?;
    LAST.set(Some((bits, made.clone())));
    Ok(made)
}

/// The record's own headers, without any `gk.*` header (only the gatekeeper writes those: an agent cannot forge a
/// verdict). The prefix is compared as Python's `str.lower` sees it.
pub fn passthrough<'a>(
    headers: &'a [(Cow<'a, [u8]>, &'a [u8])],
) -> impl Iterator<Item = Header<'a>> + 'a {
    headers
        .iter()
        .filter(|(k, _)| !rw1::pytext::lower(k).starts_with(HEADER_PREFIX))
        .map(|(k, v)| (Cow::Borrowed(&k[..]), Cow::Borrowed(*v)))
}

fn origin<'a>(source: &'a Source<'a>) -> [Header<'a>; 3] {
    [
        h("gk.original.topic", &source.topic[..]),
        h("gk.original.partition", decimal(source.partition)),
        h("gk.original.offset", decimal(source.offset)),
    ]
}

fn text_or_null(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(v) => inert::string(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// The problems as the JSON list of `gk.problems` and an alert (inert; masked by the caller).
pub fn problems_json(problems: &[Finding]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + problems.len() * 192);
    out.push(b'[');
    for (n, p) in problems.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"code\":");
        inert::string(&mut out, p.code.as_bytes());
        out.extend_from_slice(b",\"tier\":");
        text_or_null(&mut out, p.tier.as_deref().map(str::as_bytes));
        out.extend_from_slice(b",\"slot\":");
        text_or_null(&mut out, p.slot.as_deref());
        out.extend_from_slice(b",\"expected\":");
        text_or_null(&mut out, p.expected.as_deref());
        out.extend_from_slice(b",\"got\":");
        text_or_null(&mut out, p.got.as_deref());
        out.extend_from_slice(b",\"message\":");
        inert::string(&mut out, &p.message);
        out.push(b'}');
    }
    out.push(b']');
    out
}

fn doc_json(doc: &Doc) -> Vec<u8> {
    let mut out = b"{".to_vec();
    for (n, (k, v)) in doc.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        inert::string(&mut out, k.as_bytes());
        out.push(b':');
        match v {
            Field::Text(t) => text_or_null(&mut out, t.as_deref()),
            Field::Int(Some(i)) => out.extend_from_slice(&decimal(*i)),
            Field::Int(None) => out.extend_from_slice(b"null"),
            Field::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Field::Raw(raw) => out.extend_from_slice(raw),
        }
    }
    out.push(b'}');
    out
}

fn verdict_name(v: Verdict) -> &'static [u8] {
    match v {
        Verdict::Forward => b"forward",
        Verdict::Alert => b"alert",
        Verdict::DeadLetter => b"dead-letter",
    }
}

/// The drafts of one decided line's outcomes (render each at level 0 for its record): one forward or dead letter,
/// then an alert when the decision raises one, then the notice for a dead letter of an enforcing route with a
/// conversation. Err: a time that has no date (the line's outcome cannot be built).
pub fn build<'a>(line: &Line<'a>) -> Result<Vec<Draft<'a>>, String> {
    let Line {
        decided: d,
        source,
        targets,
        conversation,
        ..
    } = *line;
    let alerts = d.verdict == Verdict::Alert || d.raise_alert;
    // a clean forwarded line carries no text of the gatekeeper's that could need masking: skip the work
    let masker: Cow<'_, Masker> = if d.problems.is_empty() && !alerts {
        Cow::Borrowed(line.masker)
    } else {
        Cow::Owned(line.masker.clone().knowing(
            Some(String::from_utf8_lossy(source.value).as_bytes()),
            &d.problems,
        ))
    };
    let masked: Vec<Finding> = d.problems.iter().map(|p| masker.problem(p)).collect();
    let problems_doc = problems_json(&masked);
    let problems_h: Vec<Header<'a>> = if masked.is_empty() {
        Vec::new()
    } else {
        vec![h("gk.problems", problems_doc.clone())]
    };
    let mut common_optional = vec![h(
        "gk.original.timestamp",
        decimal(source.timestamp.unwrap_or(-1)),
    )];
    if let Some(c) = conversation {
        common_optional.push(h("gk.conversation", c));
    }
    if d.repeated {
        common_optional.push(h("gk.repeated", &b"true"[..]));
    }
    if !d.notes.is_empty() {
        let mut codes: Vec<&[u8]> = d.notes.iter().map(Vec::as_slice).collect();
        codes.sort_unstable();
        codes.dedup();
        common_optional.push(h("gk.notes", codes.join(&b","[..])));
    }
    let decided_at = iso_bytes(d.decided_at)?;
    let reason = d.reason.clone();
    let dead = d.verdict == Verdict::DeadLetter;
    let [topic_h, partition_h, offset_h] = origin(source);
    let notice = line
        .notice
        .filter(|_| dead && !targets.dry_run && conversation.is_some());
    let own: Vec<Header<'a>> = passthrough(&source.headers).collect();
    let mut out = Vec::with_capacity(3);
    if dead && !targets.dry_run {
        let tier = d
            .problems
            .iter()
            .find_map(|p| p.tier.as_deref().filter(|t| !t.is_empty()));
        let mut required = vec![
            topic_h,
            partition_h,
            offset_h,
            h("gk.reason", reason.clone().unwrap_or_default()),
            h("gk.version", line.version),
            h("gk.attempt", decimal(source.attempt)),
            h("gk.decided.at", decided_at.clone()),
        ];
        if d.internal_error {
            if let Some(first) = masked.first() {
                let class = first.got.clone().filter(|g| !g.is_empty());
                required.push(h(
                    "gk.error.class",
                    class.unwrap_or_else(|| b"Exception".to_vec()),
                ));
                required.push(h("gk.error.message", first.message.clone()));
            }
        }
        if let Some(n) = notice {
            required.push(h("gk.notice.id", n.id.clone()));
        }
        let mut optional = Vec::new();
        if let Some(check) = &d.check {
            optional.push(h("gk.check", check.clone()));
        }
        if let Some(tier) = tier {
            optional.push(h("gk.tier", tier.as_bytes().to_vec()));
        }
        optional.extend(common_optional);
        optional.extend(own);
        out.push(Draft {
            kind: Kind::DeadLetter,
            topic: &targets.dead_letter,
            dead_letter: &targets.dead_letter,
            key: source.key,
            value: Cow::Borrowed(source.value),
            required,
            problems: if problems_h.is_empty() {
                vec![h("gk.problems", &b"[]"[..])]
            } else {
                problems_h
            },
            optional,
            alert: None,
            attempt: 0,
        });
    } else {
        let verdict = if d.verdict == Verdict::Alert {
            Verdict::Alert
        } else {
            Verdict::Forward
        };
        let mut required = vec![
            h("gk.verdict", verdict_name(verdict)),
            h("gk.checked.at", decided_at.clone()),
            h("gk.version", line.version),
            topic_h,
            partition_h,
            offset_h,
        ];
        if d.verdict == Verdict::Alert {
            if let Some(r) = &reason {
                required.push(h("gk.reason", r.clone()));
            }
        }
        if targets.dry_run {
            required.push(h("gk.dry-run", &b"true"[..]));
            if dead {
                required.push(h("gk.would.verdict", verdict_name(Verdict::DeadLetter)));
                required.push(h("gk.would.reason", reason.clone().unwrap_or_default()));
            }
        }
        if let Some(sig) = line.sig {
            required.push(h("gk.sig", sig)); // required: trimming keeps it (a moved record loses it)
        }
        let flagged = d.verdict == Verdict::Alert || dead;
        let mut optional = common_optional;
        optional.extend(own);
        out.push(Draft {
            kind: Kind::Output,
            topic: &targets.output,
            dead_letter: &targets.dead_letter,
            key: source.key,
            value: Cow::Borrowed(source.value),
            required,
            problems: if flagged { problems_h } else { Vec::new() },
            optional,
            alert: None,
            attempt: source.attempt,
        });
    }
    if alerts {
        out.push(alert(line, &masker, problems_doc, decided_at, reason)?);
    }
    if let (Some(n), Some(conversation)) = (notice, conversation) {
        out.push(notice_draft(line, n, conversation));
    }
    Ok(out)
}

fn alert<'a>(
    line: &Line<'a>,
    masker: &Masker,
    problems: Vec<u8>,
    decided_at: Vec<u8>,
    reason: Option<Vec<u8>>,
) -> Result<Draft<'a>, String> {
    let Line {
        decided: d,
        source,
        targets,
        ..
    } = *line;
    let named = d.message.clone().unwrap_or_default();
    let mut original = b"{\"topic\":".to_vec();
    inert::string(&mut original, &source.topic);
    original.extend_from_slice(
        format!(
            ",\"partition\":{},\"offset\":{},\"timestamp\":",
            source.partition, source.offset
        )
        .as_bytes(),
    );
    match source.timestamp {
        Some(t) => original.extend_from_slice(&decimal(t)),
        None => original.extend_from_slice(b"null"),
    }
    original.push(b'}');
    let text = String::from_utf8_lossy(source.value)
        .into_owned()
        .into_bytes();
    let doc: Doc = vec![
        (
            "alert",
            Field::Text(Some(
                reason.unwrap_or_else(|| verdict_name(d.verdict).to_vec()),
            )),
        ),
        (
            "verdict",
            Field::Text(Some(verdict_name(d.verdict).to_vec())),
        ),
        ("route", Field::Text(Some(targets.name.clone()))),
        (
            "conversation",
            Field::Text(line.conversation.map(<[u8]>::to_vec)),
        ),
        ("id", Field::Text(named.id)),
        ("type", Field::Text(named.kind)),
        ("re", Field::Text(named.re)),
        ("from", Field::Text(named.from)),
        ("to", Field::Text(named.to)),
        ("item", Field::Text(named.item)),
        ("line", Field::Text(Some(masker.text(&text)))),
        ("problems", Field::Raw(problems)),
        ("original", Field::Raw(original)),
        ("decided_at", Field::Text(Some(decided_at))),
        ("at", Field::Text(Some(iso_bytes(line.now)?))),
        ("repeated", Field::Bool(d.repeated)),
        ("dry_run", Field::Bool(targets.dry_run)),
        ("version", Field::Text(Some(line.version.to_vec()))),
    ];
    let [topic_h, partition_h, offset_h] = origin(source);
    Ok(Draft {
        kind: Kind::Alert,
        topic: &targets.alerts,
        dead_letter: &targets.dead_letter,
        key: source.key,
        value: Cow::Borrowed(&[][..]),
        required: vec![
            topic_h,
            partition_h,
            offset_h,
            h("gk.version", line.version),
        ],
        problems: Vec::new(),
        optional: Vec::new(),
        alert: Some(doc),
        attempt: 0,
    })
}

/// The refusal notice's record: the notice's line on the output topic, keyed by the conversation, with no
/// `gk.original.*` header (it is not the outcome of the input record at those coordinates).
fn notice_draft<'a>(line: &Line<'a>, n: &'a Notice, conversation: &'a [u8]) -> Draft<'a> {
    let mut required = vec![
        h("gk.author", &n.author[..]),
        h("gk.notice.refused", &n.re[..]),
        h("gk.notice.reason", &n.reason[..]),
        h("gk.notice.why", &n.why[..]),
        h("gk.conversation", conversation),
        h("gk.version", line.version),
    ];
    if line.decided.repeated {
        required.push(h("gk.repeated", &b"true"[..]));
    }
    if let Some(sig) = &n.sig {
        required.push(h("gk.sig", &sig[..]));
    }
    Draft {
        kind: Kind::Notice,
        topic: &line.targets.output,
        dead_letter: &line.targets.dead_letter,
        key: Some(conversation),
        value: Cow::Borrowed(&n.line[..]),
        required,
        problems: Vec::new(),
        optional: Vec::new(),
        alert: None,
        attempt: 0,
    }
}

fn trimmed(level: u8) -> Option<Header<'static>> {
    (level > 0).then(|| {
        h(
            "gk.trimmed",
            TRIMMED[..usize::from(level).min(3)].join(",").into_bytes(),
        )
    })
}

/// A record at a trim level, borrowing its draft: its headers are those of `parts`, in order, then `extra`.
#[derive(Debug)]
pub struct View<'d> {
    pub kind: Kind,
    pub topic: &'d [u8],
    pub key: Option<&'d [u8]>,
    pub value: Cow<'d, [u8]>,
    pub parts: [&'d [Header<'d>]; 3],
    pub extra: Vec<Header<'d>>,
    pub level: u8,
}

impl View<'_> {
    pub fn headers(&self) -> impl Iterator<Item = &Header<'_>> + Clone {
        self.parts
            .iter()
            .flat_map(|p| p.iter())
            .chain(self.extra.iter())
    }

    /// An upper estimate of the record's size in a batch (what `max.message.bytes` limits).
    pub fn size(&self) -> usize {
        size(
            self.key,
            &self.value,
            self.headers().map(|(k, v)| (&**k, &v[..])),
        )
    }

    #[cfg(test)]
    pub fn to_record(&self) -> Record {
        Record {
            kind: self.kind,
            topic: self.topic.to_vec(),
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.to_vec(),
            headers: self
                .headers()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
            level: self.level,
        }
    }
}

impl Draft<'_> {
    /// The record at a trim level (`view`), owned.
    #[cfg(test)]
    pub fn render(&self, level: u8) -> Option<Record> {
        self.view(level).map(|v| v.to_record())
    }

    /// The record at a trim level, or None past the last: level 1 drops `gk.problems`, level 2 every optional
    /// header (the input's own included), level 3 the value of a dead letter or an alert's document; a forward is
    /// never sent without its value: at level 3 it moves to the dead-letter topic (`outcome-too-large`), at level 4
    /// without its value. A notice is never trimmed.
    pub fn view(&self, level: u8) -> Option<View<'_>> {
        let none: &[Header<'_>] = &[];
        let problems = if level < 1 { &self.problems[..] } else { none };
        let optional = if level < 2 { &self.optional[..] } else { none };
        let key = self.key;
        let view = |kind, topic, value, parts, extra| View {
            kind,
            topic,
            key,
            value,
            parts,
            extra,
            level,
        };
        match self.kind {
            Kind::Alert => {
                let mut doc = self.alert.clone()?;
                if level >= 4 {
                    return None;
                }
                if level >= 1 {
                    let at = doc.iter().position(|(k, _)| *k == "problems");
                    let n = at.map_or(0, |i| match doc.remove(i).1 {
                        Field::Raw(raw) => count_items(&raw),
                        _ => 0,
                    });
                    doc.push(("problems_omitted", Field::Int(Some(n as i64))));
                }
                if level >= 2 {
                    doc.retain(|(k, _)| *k != "line");
                }
                if level >= 3 {
                    const KEEP: [&str; 8] = [
                        "alert",
                        "verdict",
                        "route",
                        "id",
                        "type",
                        "original",
                        "decided_at",
                        "at",
                    ];
                    let mut kept: Doc = KEEP
                        .iter()
                        .filter_map(|k| doc.iter().find(|(name, _)| name == k).cloned())
                        .collect();
                    kept.push(("trimmed", Field::Bool(true)));
                    doc = kept;
                }
                let parts = [&self.required[..], none, none];
                Some(view(
                    Kind::Alert,
                    self.topic,
                    Cow::Owned(doc_json(&doc)),
                    parts,
                    trimmed(level).into_iter().collect(),
                ))
            }
            Kind::Notice => (level == 0).then(|| {
                view(
                    Kind::Notice,
                    self.topic,
                    Cow::Borrowed(&self.value[..]),
                    [&self.required[..], none, none],
                    Vec::new(),
                )
            }),
            Kind::DeadLetter => {
                if level >= 4 {
                    return None;
                }
                let mut extra = Vec::new();
                let mut value = Cow::Borrowed(&self.value[..]);
                if level >= 3 {
                    extra.push(h("gk.value.omitted", decimal(self.value.len() as i64)));
                    value = Cow::Borrowed(&[][..]);
                }
                extra.extend(trimmed(level));
                Some(view(
                    Kind::DeadLetter,
                    self.topic,
                    value,
                    [&self.required[..], problems, optional],
                    extra,
                ))
            }
            Kind::Output => match level {
                0..=2 => Some(view(
                    Kind::Output,
                    self.topic,
                    Cow::Borrowed(&self.value[..]),
                    [&self.required[..], problems, optional],
                    trimmed(level).into_iter().collect(),
                )),
                3 => {
                    let mut extra = self.moved();
                    extra.push(h("gk.trimmed", &b"problems,headers,moved"[..]));
                    Some(view(
                        Kind::DeadLetter,
                        self.dead_letter,
                        Cow::Borrowed(&self.value[..]),
                        [none, none, none],
                        extra,
                    ))
                }
                4 => {
                    let mut extra = self.moved();
                    extra.push(h("gk.value.omitted", decimal(self.value.len() as i64)));
                    extra.push(h("gk.trimmed", &b"problems,headers,moved,value"[..]));
                    Some(view(
                        Kind::DeadLetter,
                        self.dead_letter,
                        Cow::Borrowed(&[][..]),
                        [none, none, none],
                        extra,
                    ))
                }
                _ => None,
            },
        }
    }
}

impl Draft<'_> {
    /// A forward moved to the dead-letter topic (trim level 3): a dead letter's required headers, made from the
    /// forward's own when it is moved (rarely) rather than beside every forward: its coordinates and version as
    /// the forward has them, `gk.reason` `outcome-too-large`, its attempt, and its decision time (the forward's
    /// `gk.checked.at`).
    fn moved(&self) -> Vec<Header<'_>> {
        let of = |name: &str| {
            self.required
                .iter()
                .find(|(k, _)| &k[..] == name.as_bytes())
                .map_or(Cow::Borrowed(&[][..]), |(_, v)| Cow::Borrowed(&v[..]))
        };
        vec![
            h("gk.original.topic", of("gk.original.topic")),
            h("gk.original.partition", of("gk.original.partition")),
            h("gk.original.offset", of("gk.original.offset")),
            h("gk.reason", OUTCOME_TOO_LARGE),
            h("gk.version", of("gk.version")),
            h("gk.attempt", decimal(self.attempt)),
            h("gk.decided.at", of("gk.checked.at")),
        ]
    }
}

/// The number of problems in a `problems_json` list: its objects, counted at the top level.
fn count_items(raw: &[u8]) -> usize {
    let (mut depth, mut n, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in raw {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => {
                if depth == 1 {
                    n += 1;
                }
                depth += 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn problem(code: &'static str, slot: Option<&str>, got: Option<&str>) -> Finding {
        Finding {
            code: Cow::Borrowed(code),
            tier: Some(Cow::Borrowed("record")),
            message: format!("{code}: got {}", got.unwrap_or("-")).into_bytes(),
            slot: slot.map(|s| s.as_bytes().to_vec()),
            expected: None,
            got: got.map(|s| s.as_bytes().to_vec()),
        }
    }

    fn decided(verdict: Verdict, problems: Vec<Finding>) -> Decided {
        Decided {
            verdict,
            reason: (verdict != Verdict::Forward).then(|| b"check-ho".to_vec()),
            check: (verdict != Verdict::Forward).then(|| b"check_ho".to_vec()),
            internal_error: false,
            problems,
            notes: vec![b"b".to_vec(), b"a".to_vec(), b"b".to_vec()],
            repeated: false,
            decided_at: 1_790_845_200.0,
            raise_alert: false,
            message: None,
        }
    }

    fn source() -> Source<'static> {
        Source {
            topic: Cow::Borrowed(b"agents.pay"),
            partition: 2,
            offset: 41,
            key: Some(b"c-1"),
            value: b"RW1 HO h1 acct=40-12-88/61102938",
            timestamp: Some(1_790_845_200_000),
            headers: vec![
                (Cow::Borrowed(b"trace"), b"x"),
                (Cow::Borrowed(b"GK.verdict"), b"forged"),
            ],
            attempt: 1,
        }
    }

    fn targets() -> Targets {
        Targets {
            output: b"out".to_vec(),
            dead_letter: b"dlq".to_vec(),
            alerts: b"alerts".to_vec(),
            name: b"agents.pay".to_vec(),
            dry_run: false,
        }
    }

    fn records(d: &Decided, level: u8) -> Vec<Record> {
        let (s, t, m) = (source(), targets(), Masker::for_slots([]));
        let line = Line {
            decided: d,
            source: &s,
            targets: &t,
            conversation: Some(b"c-1"),
            masker: &m,
            now: 1_790_845_200.120,
            notice: None,
            sig: None,
            version: b"0.1.0",
        };
        build(&line)
            .unwrap()
            .iter()
            .filter_map(|d| d.render(level))
            .collect()
    }

    fn header<'a>(r: &'a Record, name: &str) -> Option<&'a [u8]> {
        r.headers
            .iter()
            .find(|(k, _)| &**k == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    proptest::proptest! {
        /// The ISO time written without the formatter is what the formatter writes of the same fields.
        #[test]
        fn iso_as_the_formatter_writes_it(epoch in -6.2e10f64..2.5e11) {
            let want = iso_fields(epoch)
                .map(|[y, m, d, h, min, s, ms]| format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z"));
            proptest::prop_assert_eq!(iso(epoch), want);
        }
    }

    #[test]
    fn a_remembered_time_is_only_its_own() {
        for epoch in [
            1_790_845_200.0,
            1_790_845_200.5,
            1_790_845_200.0,
            -0.0,
            0.0,
            1e18,
            7.25,
        ] {
            assert_eq!(
                iso_bytes(epoch).ok(),
                iso(epoch).map(String::into_bytes),
                "{epoch}"
            );
        }
    }

    #[test]
    fn iso_rounds_as_python_does() {
        assert_eq!(iso(1_790_845_200.0).unwrap(), "2026-10-01T09:00:00.000Z");
        assert_eq!(
            iso(1_790_845_200.123_9).unwrap(),
            "2026-10-01T09:00:00.123Z"
        );
        assert_eq!(iso(-0.0005).unwrap(), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso(0.9999996).unwrap(), "1970-01-01T00:00:01.000Z");
        assert!(iso(f64::NAN).is_none());
        assert!(iso(1e18).is_none());
    }

    #[test]
    fn a_forward_moved_to_the_dead_letter_topic_carries_a_dead_letter_s_required_headers() {
        let moved = |level| {
            let r = &records(&decided(Verdict::Forward, vec![]), level)[0];
            assert_eq!((r.kind, &r.topic[..]), (Kind::DeadLetter, &b"dlq"[..]));
            r.headers
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        String::from_utf8_lossy(k),
                        String::from_utf8_lossy(v)
                    )
                })
                .collect::<Vec<_>>()
        };
        let required = [
            "gk.original.topic=agents.pay",
            "gk.original.partition=2",
            "gk.original.offset=41",
            "gk.reason=outcome-too-large",
            "gk.version=0.1.0",
            "gk.attempt=1",
            "gk.decided.at=2026-10-01T09:00:00.000Z",
        ];
        let at3 = moved(3);
        assert_eq!(at3[..7], required);
        assert_eq!(at3[7..], ["gk.trimmed=problems,headers,moved"]);
        let at4 = moved(4);
        assert_eq!(at4[..7], required);
        assert_eq!(
            at4[7..],
            [
                "gk.value.omitted=32",
                "gk.trimmed=problems,headers,moved,value"
            ]
        );
    }

    #[test]
    fn a_forward_carries_no_forged_verdict_and_a_dead_letter_masks() {
        let fwd = &records(&decided(Verdict::Forward, vec![]), 0)[0];
        assert_eq!(fwd.kind, Kind::Output);
        assert_eq!(header(fwd, "gk.verdict"), Some(&b"forward"[..]));
        assert_eq!(header(fwd, "gk.notes"), Some(&b"a,b"[..]));
        assert_eq!(header(fwd, "trace"), Some(&b"x"[..]));
        assert!(header(fwd, "GK.verdict").is_none());
        let p = problem("acct-mismatch", Some("acct"), Some("40-12-88/61102938"));
        let dead = records(&decided(Verdict::DeadLetter, vec![p]), 0);
        let problems =
            String::from_utf8(header(&dead[0], "gk.problems").unwrap().to_vec()).unwrap();
        assert!(!problems.contains("61102938"), "{problems}");
        assert!(problems.contains("****2938"), "{problems}");
        assert_eq!(header(&dead[0], "gk.tier"), Some(&b"record"[..]));
    }

    #[test]
    fn every_level_drops_more_until_none_is_left() {
        for verdict in [Verdict::Forward, Verdict::Alert, Verdict::DeadLetter] {
            let d = decided(
                verdict,
                vec![problem("x", None, None), problem("y", None, None)],
            );
            let (s, t, m) = (source(), targets(), Masker::for_slots([]));
            let line = Line {
                decided: &d,
                source: &s,
                targets: &t,
                conversation: Some(b"c-1"),
                masker: &m,
                now: 0.0,
                notice: None,
                sig: None,
                version: b"v",
            };
            for draft in build(&line).unwrap() {
                let mut level = 0;
                while let Some(r) = draft.render(level) {
                    if r.kind == Kind::Alert {
                        let doc: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
                        if (1..=2).contains(&level) {
                            assert_eq!(doc["problems_omitted"], 2);
                        }
                    }
                    if level >= 2 {
                        assert!(
                            r.headers.iter().all(|(k, _)| k.starts_with(b"gk.")),
                            "{verdict:?} {level}"
                        );
                    }
                    level += 1;
                }
                assert!((1..=5).contains(&level));
            }
        }
    }
}
