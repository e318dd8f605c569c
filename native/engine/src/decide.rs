//! The decision: one line, its conversation's state, the records, the route's policy and the time -> a verdict.
//!
//! Pure: no I/O, no clock. What the decision reads of the conversation's state and the records comes through
//! [`Env`] (the bindings read the loaded state; a test holds a map); what it changes it returns as [`Effect`]s,
//! which the caller applies before deciding the next line of the conversation. The rows of the verdict table are
//! applied top to bottom and the first that matches decides (docs/verdicts.md).

use std::borrow::Cow;

use rw1::{Grammar, Twin, Value};

use crate::authority::{self, Parties, Target};
use crate::rules::{is_reserved_id, RESERVED_ID_MAX, RESERVED_ID_MIN};

/// A finding of the decision: a stable code, where it was found, its wording, the slot, what was expected and what
/// was got. Codes and tiers are the decision's own but for a sender proof's and a record check's.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub code: Cow<'static, str>,
    pub tier: Option<Cow<'static, str>>,
    pub message: Vec<u8>,
    pub slot: Option<Vec<u8>>,
    pub expected: Option<Vec<u8>>,
    pub got: Option<Vec<u8>>,
}

impl From<rw1::Problem> for Finding {
    fn from(p: rw1::Problem) -> Finding {
        Finding {
            code: Cow::Borrowed(p.code),
            tier: Some(Cow::Borrowed(p.tier)),
            message: p.message,
            slot: p.slot,
            expected: p.expected,
            got: p.got,
        }
    }
}

fn p(code: &'static str, message: Vec<u8>, tier: &'static str) -> Finding {
    Finding {
        code: Cow::Borrowed(code),
        tier: Some(Cow::Borrowed(tier)),
        message,
        slot: None,
        expected: None,
        got: None,
    }
}

impl Finding {
    fn slot(mut self, slot: &[u8]) -> Finding {
        self.slot = Some(slot.to_vec());
        self
    }
    fn expected(mut self, v: Option<&[u8]>) -> Finding {
        self.expected = v.map(<[u8]>::to_vec);
        self
    }
    fn got(mut self, v: Option<&[u8]>) -> Finding {
        self.got = v.map(<[u8]>::to_vec);
        self
    }
}

fn findings(ps: Vec<rw1::Problem>) -> Vec<Finding> {
    ps.into_iter().map(Finding::from).collect()
}

/// The verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    DeadLetter,
    Alert,
    Hold,
}

impl Verdict {
    pub fn code(self) -> &'static str {
        match self {
            Verdict::Forward => "forward",
            Verdict::DeadLetter => "dead-letter",
            Verdict::Alert => "alert",
            Verdict::Hold => "hold",
        }
    }

    fn of(code: &str) -> Verdict {
        match code {
            "dead-letter" => Verdict::DeadLetter,
            "alert" => Verdict::Alert,
            "hold" => Verdict::Hold,
            _ => Verdict::Forward,
        }
    }
}

/// The reason codes (`gatekeeper.policy.Reason`).
pub mod reason {
    pub const INVALID: &str = "invalid";
    pub const NO_CONVERSATION: &str = "no-conversation";
    pub const SENDER_BINDING: &str = "sender-binding";
    pub const SENDER_AUTH: &str = "sender-auth";
    pub const RESERVED_ID: &str = "reserved-id";
    pub const DUPLICATE_ID: &str = "duplicate-id";
    pub const REFUSED_HANDOFF: &str = "refused-handoff";
    pub const EXPIRED: &str = "expired";
    pub const NO_RECORD: &str = "no-record";
    pub const CHECK_HO: &str = "check-ho";
    pub const RECORD_USED: &str = "record-used";
    pub const UNKNOWN_HANDOFF: &str = "unknown-handoff";
    pub const CHECK_RB: &str = "check-rb";
    pub const CLEARANCE: &str = "clearance";
    pub const CHECK_DN: &str = "check-dn";
    pub const CHECK_THREAD: &str = "check-thread";
    pub const TRANSLATION: &str = "translation";
    pub const AWAITING_HANDOFF: &str = "awaiting-handoff";
}

const AFFIRMATIVE: [&[u8]; 2] = [b"Y", b"APPROVE"];
const NEGATIVE: [&[u8]; 5] = [b"N", b"DECLINE", b"REJECT", b"HOLD", b"CALLBACK"];
/// A cancel says why, one of these (sorted: the problem lists them so).
const CANCEL_WHY: [&[u8]; 4] = [b"EXPIRED", b"REVOKED", b"SUPERSEDED", b"TIMEOUT"];
const REPLY_TYPES: [&[u8]; 6] = [b"RB", b"AN", b"DN", b"UN", b"FL", b"CX"];
/// The slots a relay may set anew (its envelope and its own hop): every other slot of the handoff it relays is kept.
const PER_HOP: [&[u8]; 7] = [b"from", b"to", b"re", b"rb", b"exp", b"p", b"h"];
/// The readback levels whose comprehension tier checks the receiver's acc= against the sender's withheld criteria.
const COMPREHENSION_LEVELS: [&[u8]; 2] = [b"acc", b"plan"];
/// The readback levels that make a readback the plan of the act.
const PLANNED_LEVELS: [&[u8]; 4] = [b"exec", b"all", b"acc", b"plan"];
/// The note on a comprehension readback forwarded with nothing on record to check it against.
pub const UNVERIFIED_COMPREHENSION: &str = "comprehension-unverified";

/// A line the conversation remembers (`l:<id>`), as a decision reads it: the state's own entry, shared (a line's
/// decision reads two or three remembered lines, and copying each, a kept handoff's text included, was a tenth of
/// the allocations of a line).
pub type LineInfo = std::sync::Arc<crate::state::StoredLine>;

fn was_dead_lettered(line: &LineInfo) -> bool {
    line.verdict == b"dead-letter"
}

/// A forwarded handoff (`o:<id>`), as a decision reads it: its id and the state's own entry, shared (a line's
/// decision reads a handoff once or twice, and copying its fields each time was about seven allocations a line). Of
/// the approved record it opened with, a decision reads the values the receiver resolves itself and the sender's
/// withheld criteria (the values the handoff carried were checked when it was).
#[derive(Debug, Clone)]
pub struct HandoffInfo {
    pub id: Vec<u8>,
    pub entry: std::sync::Arc<crate::state::StoredHandoff>,
}

impl std::ops::Deref for HandoffInfo {
    type Target = crate::state::StoredHandoff;

    fn deref(&self) -> &Self::Target {
        &self.entry
    }
}

/// A checked readback (`r:<id>`), as a decision reads it: its id and the state's own entry, shared (as a handoff).
#[derive(Debug, Clone)]
pub struct ReadbackInfo {
    pub id: Vec<u8>,
    pub entry: std::sync::Arc<crate::state::StoredReadback>,
}

impl std::ops::Deref for ReadbackInfo {
    type Target = crate::state::StoredReadback;

    fn deref(&self) -> &Self::Target {
        &self.entry
    }
}

/// An approved record, as far as a decision reads it: the values the handoff must carry (as a line shows them), the
/// values the receiver resolves itself, the sender's withheld criteria.
#[derive(Debug, Clone, Default)]
pub struct RecordInfo {
    pub values: Vec<(Vec<u8>, Vec<u8>)>,
    pub resolved: Vec<(Vec<u8>, Vec<u8>)>,
    pub expect_acc: Option<Vec<Vec<u8>>>,
}

/// What verifying a record's signature found: the agent whose key signed it, or the failure's code and detail.
#[derive(Debug, Clone, Default)]
pub struct SenderProof {
    pub agent: Option<Vec<u8>>,
    pub key_id: Option<Vec<u8>>,
    pub failure: Option<Vec<u8>>,
    pub detail: Vec<u8>,
}

/// The route's policy, as far as a decision reads it.
#[derive(Debug, Clone)]
pub struct Route<'a> {
    pub name: &'a [u8],
    pub profile: &'a [u8],
    pub grammar: &'a Grammar,
    pub senders: Option<Vec<Vec<u8>>>,
    pub hold_seconds: f64,
    pub sender_auth: bool,
    pub state_ttl_seconds: f64,
    pub refuse_unverified_comprehension: bool,
}

/// What a decision reads beyond the line: the conversation's loaded state, the records and bindings of the batch,
/// the route's record check, and the lines the state kept, parsed.
pub trait Env {
    fn line(&self, id: &[u8]) -> Option<LineInfo>;
    fn handoff(&self, id: &[u8]) -> Option<HandoffInfo>;
    fn readback(&self, id: &[u8]) -> Option<ReadbackInfo>;
    /// `(closed, cancelled)` of the handoff in the thread tracker, or None
    fn flags(&self, ho: &[u8]) -> Option<(bool, bool)>;
    /// what the thread tracker would raise if `msg` were fed as line `line_no`
    fn probe(&mut self, msg: &Twin<'_>, line_no: i64) -> Vec<rw1::Problem>;
    /// lines fed to the thread so far
    fn seq(&self) -> i64;
    fn record(&mut self, item: &[u8], ask: &[u8]) -> Option<RecordInfo>;
    fn binding(&mut self, item: &[u8], ask: &[u8]) -> Option<Vec<u8>>;
    /// the route's record check (the approver's signature) of the record the last `record` found: its problem, or
    /// None
    fn record_check(&mut self) -> Option<Finding>;
    /// a kept line (a forwarded HO, a checked RB, a question), parsed under the route's profile
    fn stored(&mut self, text: &[u8]) -> Option<Stored>;
}

/// A kept line's parse, shared rather than copied: the engine reads its twin, and whoever parsed it keeps the
/// text the twin borrows (the Python extension keeps the consumed record's own bytes, so a handoff parsed as its
/// batch was prepared is the parse its readback later reads).
pub trait HeldTwin: Send + Sync {
    fn twin(&self) -> &Twin<'_>;
}

impl HeldTwin for Twin<'static> {
    fn twin(&self) -> &Twin<'_> {
        self
    }
}

/// A kept line, parsed (see [`HeldTwin`]).
pub type Stored = std::sync::Arc<dyn HeldTwin>;

/// What a line that did not parse carried in its raw fields (its tombstone's id, sender, type and reply).
#[derive(Debug, Clone, Default)]
pub struct RawFields<'a> {
    pub id: Option<&'a [u8]>,
    pub from: Option<&'a [u8]>,
    pub typ: Option<&'a [u8]>,
    pub re: Option<&'a [u8]>,
}

/// The line as the gate and the parser left it.
#[derive(Debug)]
pub enum Line<'a> {
    /// refused by the gate's input rules (their findings are the caller's)
    Refused,
    /// not parsed: the parse's errors are the caller's
    Invalid(RawFields<'a>),
    Parsed(&'a Twin<'a>),
}

/// Where a decision's problems are: its own, or the gate's or the parser's (which the caller holds).
#[derive(Debug, Clone, PartialEq)]
pub enum Problems {
    Own(Vec<Finding>),
    Gate,
    Parse,
}

/// The one place a handoff's record comes from in an effect.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordOf {
    None,
    /// the record of the handoff's (item, ask), which the decision looked up
    Lookup,
    /// the record of another handoff (a relay carries the original's)
    Handoff(Vec<u8>),
}

/// A line's first decision, as the state keeps it (`l:<id>`); its problems are the decision's.
#[derive(Debug, Clone, PartialEq)]
pub struct LineEntry {
    pub digest: Vec<u8>,
    pub typ: Vec<u8>,
    pub verdict: Verdict,
    pub reason: Option<&'static str>,
    pub re: Option<Vec<u8>>,
    pub keep_text: bool,
}

/// What a decision changes: the only way it changes state.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    RememberLine {
        id: Vec<u8>,
        entry: LineEntry,
    },
    OpenHandoff {
        id: Vec<u8>,
        item: Vec<u8>,
        ask: Vec<u8>,
        exec_ask: bool,
        record: RecordOf,
        bound: bool,
        holder: Option<Vec<u8>>,
        relay_of: Option<Vec<u8>>,
    },
    Supersede {
        ho: Vec<u8>,
        by: Vec<u8>,
    },
    RecordReadback {
        id: Vec<u8>,
        ho: Vec<u8>,
        passed: bool,
        exp: Option<Vec<u8>>,
    },
    PassReadback {
        ho: Vec<u8>,
        rb: Vec<u8>,
    },
    RefuseReadback {
        rb: Vec<u8>,
    },
    Clear {
        ho: Vec<u8>,
        rb: Vec<u8>,
    },
    FeedThread,
    Bind {
        item: Vec<u8>,
        ask: Vec<u8>,
        holder: Vec<u8>,
        ho: Vec<u8>,
    },
    Release {
        item: Vec<u8>,
        ask: Vec<u8>,
        holder: Vec<u8>,
        ho: Vec<u8>,
    },
    Relay {
        ho: Vec<u8>,
        by: Vec<u8>,
    },
    AnswerQuestion {
        aq: Vec<u8>,
        by: Vec<u8>,
    },
}

/// A decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Option<&'static str>,
    pub problems: Problems,
    pub notes: Vec<Finding>,
    /// whether the decision carries the line's message (from the row that reads the conversation on)
    pub message: bool,
    pub raise_alert: bool,
    pub effects: Vec<Effect>,
    /// an affirmative answer that clears a readback: the digests of the readback and of its handoff
    pub clears: Option<(Vec<u8>, Vec<u8>)>,
}

/// What deciding a line gives: a decision, or the line's stored first decision (a repeat), with what an answer
/// among them clears.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Decided(Decision),
    Repeat { clears: Option<(Vec<u8>, Vec<u8>)> },
}

/// A state the decision cannot read (a kept line missing or no longer parsing): a bug, never the line's fault.
/// `class` and `message` are those of the exception Python raised for it, so the line's internal-error dead letter
/// reads the same.
#[derive(Debug, Clone, PartialEq)]
pub struct Internal {
    pub class: &'static str,
    pub message: Vec<u8>,
}

/// A twin owning its text (a kept line's, held beyond the line it was parsed from).
pub fn owned_twin(t: Twin<'_>) -> Twin<'static> {
    let own = |c: Option<Cow<'_, [u8]>>| c.map(|c| Cow::Owned(c.into_owned()));
    Twin {
        v: own(t.v),
        typ: own(t.typ),
        id: own(t.id),
        re: t.re.map(Value::into_owned),
        from: t.from.map(Value::into_owned),
        to: t.to.map(Value::into_owned),
        item: t.item.map(Value::into_owned),
        slots: t
            .slots
            .into_iter()
            .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
            .collect(),
        tail: own(t.tail),
    }
}

/// A line's identity within its conversation, with its message id: SHA-256 of the bytes, 16 hex.
pub fn line_digest(raw: &[u8]) -> Vec<u8> {
    rw1::digest::sha256_hex(raw, 16).into_bytes()
}

/// `v` in decimal, zero-padded to `width` digits (`format!("{v:0width$}")` for `v` of at most `width` digits,
/// without the formatter: every line's times are written with it).
pub(crate) fn push_padded(out: &mut Vec<u8>, v: u32, width: usize) {
    let start = out.len();
    let mut v = v;
    for _ in 0..width {
        out.push(b'0' + (v % 10) as u8);
        v /= 10;
    }
    debug_assert_eq!(v, 0, "a value wider than its field");
    out[start..].reverse();
}

/// An epoch time as RW1's `YYYYMMDDTHHMMZ` (UTC; `time.gmtime` floors the seconds).
pub fn rw_time(epoch: f64) -> Vec<u8> {
    let secs = epoch.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    let (Ok(year @ 0..=9999), Ok(month), Ok(day), Ok(rem)) = (
        u32::try_from(y),
        u32::try_from(m),
        u32::try_from(d),
        u32::try_from(rem),
    ) else {
        // a year of more than four digits, or before year 0: as the formatter writes it
        return format!(
            "{y:04}{m:02}{d:02}T{:02}{:02}Z",
            rem / 3600,
            (rem % 3600) / 60
        )
        .into_bytes();
    };
    let mut out = Vec::with_capacity(14);
    push_padded(&mut out, year, 4);
    push_padded(&mut out, month, 2);
    push_padded(&mut out, day, 2);
    out.push(b'T');
    push_padded(&mut out, rem / 3600, 2);
    push_padded(&mut out, rem % 3600 / 60, 2);
    out.push(b'Z');
    out
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01).
pub(crate) fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The value of an exec binding: `<route>/<conversation>/<HO id>#<digest>@<epoch seconds>`.
pub fn holder_of(
    route: &[u8],
    conversation: &[u8],
    ho_id: &[u8],
    digest: &[u8],
    at: f64,
) -> Vec<u8> {
    let secs = format!("{}", at.trunc() as i64);
    [
        route,
        b"/",
        conversation,
        b"/",
        ho_id,
        b"#",
        digest,
        b"@",
        secs.as_bytes(),
    ]
    .concat()
}

fn rpartition(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let at = s.iter().rposition(|&b| b == sep)?;
    Some((&s[..at], &s[at + 1..]))
}

/// A binding's handoff without the time it was bound.
pub fn holder_identity(holder: &[u8]) -> &[u8] {
    match rpartition(holder, b'@') {
        Some((head, _)) if !head.is_empty() => head,
        _ => holder,
    }
}

/// When a binding was made (None: a binding of an earlier release, or not one of ours).
pub fn bound_at(holder: &[u8]) -> Option<f64> {
    let (_, stamp) = rpartition(holder, b'@')?;
    if stamp.is_empty() || !stamp.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(stamp).ok()?.parse().ok()
}

/// A binding's handoff as a problem shows it: route, conversation and id.
pub fn bound_handoff(holder: &[u8]) -> &[u8] {
    match rpartition(holder_identity(holder), b'#') {
        Some((head, _)) if !head.is_empty() => head,
        _ => holder,
    }
}

/// A value as Python's `str` writes it; an absent one as `None`.
fn s<'v>(v: Option<&'v Value<'_>>) -> Cow<'v, [u8]> {
    v.map_or(Cow::Borrowed(b"None"), Value::py_str)
}

fn text_of<'v>(v: Option<&'v Value<'_>>) -> Option<&'v [u8]> {
    v.and_then(Value::as_text)
}

fn opt_s(v: Option<&[u8]>) -> &[u8] {
    v.unwrap_or(b"None")
}

fn expired(exp: Option<&Value<'_>>, now_rw: &[u8]) -> bool {
    match exp {
        Some(Value::Text(t)) => rw1::pytext::char_len(t) == 14 && now_rw >= &t[..],
        _ => false,
    }
}

fn expired_text(exp: &[u8], now_rw: &[u8]) -> bool {
    rw1::pytext::char_len(exp) == 14 && now_rw >= exp
}

fn rb_levels(ho: &Twin<'_>) -> Vec<Vec<u8>> {
    match ho.slot(b"rb") {
        Some(v) if v.truthy() => v
            .items()
            .iter()
            .map(|x| rw1::pytext::lower(&x.py_str()))
            .collect(),
        _ => Vec::new(),
    }
}

fn has_level(levels: &[Vec<u8>], set: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = levels
        .iter()
        .filter(|l| set.contains(&&l[..]))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

fn asks_exec(ho: &Twin<'_>) -> bool {
    rb_levels(ho).iter().any(|l| l == b"exec")
}

fn exec_slots<'g>(grammar: &'g Grammar, ask: &[u8]) -> &'g [Box<[u8]>] {
    grammar.exec_map.get(ask).map_or(&[], |v| &v[..])
}

/// A slot's key and value as a dict built from the twin's slots holds them: each key once, at its first place,
/// with its last value.
fn slot_dict<'t, 'a>(twin: &'t Twin<'a>) -> Vec<(&'t [u8], &'t Value<'a>)> {
    let mut out: Vec<(&'t [u8], &'t Value<'a>)> = Vec::with_capacity(twin.slots.len());
    for (k, v) in &twin.slots {
        match out.iter_mut().find(|(key, _)| *key == &k[..]) {
            Some(slot) => slot.1 = v,
            None => out.push((&k[..], v)),
        }
    }
    out
}

/// The problem of a reply whose `re=` names no handoff of this conversation.
fn unknown_handoff(msg: &Twin<'_>) -> Finding {
    let message = [
        msg.typ.as_deref().unwrap_or_default(),
        b" ",
        msg.id.as_deref().unwrap_or_default(),
        b" re=",
        &s(msg.re.as_ref()),
        b": no such handoff in this conversation",
    ]
    .concat();
    p("unknown-handoff", message, "receipt").slot(b"re")
}

fn join(parts: &[Vec<u8>], sep: &[u8]) -> Vec<u8> {
    parts.join(sep)
}

struct Decider<'a, E: Env> {
    conversation: Option<&'a [u8]>,
    env: &'a mut E,
    route: &'a Route<'a>,
    now: f64,
    now_rw: Vec<u8>,
    first_seen: f64,
    replay: bool,
    sender: Option<&'a SenderProof>,
    digest: Vec<u8>,
    msg: Option<&'a Twin<'a>>,
    error: Option<Internal>,
}

/// The parties of a target's thread, held for the decision.
#[derive(Debug, Default)]
struct Held {
    sender: Option<Vec<u8>>,
    receiver: Option<Vec<u8>>,
    asker: Option<Vec<u8>>,
    asked: Option<Vec<u8>>,
}

impl Held {
    fn view(&self) -> Parties<'_> {
        Parties {
            sender: self.sender.as_deref(),
            receiver: self.receiver.as_deref(),
            asker: self.asker.as_deref(),
            asked: self.asked.as_deref(),
        }
    }
}

/// Decide one line. `now` is the gatekeeper's clock (epoch seconds); `first_seen` when the line was first
/// consumed (the hold window); `replay` re-decides a line whose stored first decision was a dead letter.
#[allow(clippy::too_many_arguments)]
pub fn decide<E: Env>(
    raw: &[u8],
    conversation: Option<&[u8]>,
    conversation_problem: Option<Finding>,
    line: Line<'_>,
    env: &mut E,
    route: &Route<'_>,
    now: f64,
    first_seen: Option<f64>,
    replay: bool,
    sender: Option<&SenderProof>,
) -> Result<Outcome, Internal> {
    let mut d = Decider {
        conversation,
        env,
        route,
        now,
        now_rw: rw_time(now),
        first_seen: first_seen.unwrap_or(now),
        replay,
        sender,
        digest: line_digest(raw),
        msg: None,
        error: None,
    };
    let out = d.decide(conversation_problem, line);
    match d.error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

impl<'a, E: Env> Decider<'a, E> {
    #[allow(clippy::too_many_arguments)] // the row's verdict and all it may carry, as Python's _decision
    fn decision(
        &mut self,
        verdict: Verdict,
        reason: Option<&'static str>,
        problems: Vec<Finding>,
        notes: Vec<Finding>,
        mut effects: Vec<Effect>,
        keep_text: bool,
        raise_alert: bool,
        feed: bool,
    ) -> Outcome {
        if let Some(msg) = self.msg {
            if verdict != Verdict::Hold {
                let id = msg.id.as_deref().unwrap_or_default().to_vec();
                let entry = LineEntry {
                    digest: self.digest.clone(),
                    typ: msg.typ.as_deref().unwrap_or_default().to_vec(),
                    verdict,
                    reason,
                    re: text_of(msg.re.as_ref()).map(<[u8]>::to_vec),
                    keep_text,
                };
                effects.insert(0, Effect::RememberLine { id, entry });
                if verdict != Verdict::DeadLetter && feed {
                    effects.push(Effect::FeedThread);
                }
            }
        }
        Outcome::Decided(Decision {
            verdict,
            reason,
            problems: Problems::Own(problems),
            notes,
            message: self.msg.is_some(),
            raise_alert,
            effects,
            clears: None,
        })
    }

    fn dead(&mut self, reason: &'static str, problems: Vec<Finding>) -> Outcome {
        self.decision(
            Verdict::DeadLetter,
            Some(reason),
            problems,
            vec![],
            vec![],
            false,
            false,
            true,
        )
    }

    fn forward(&mut self, notes: Vec<Finding>, effects: Vec<Effect>, keep_text: bool) -> Outcome {
        self.decision(
            Verdict::Forward,
            None,
            vec![],
            notes,
            effects,
            keep_text,
            false,
            true,
        )
    }

    fn bare(&self, verdict: Verdict, reason: &'static str, problems: Problems) -> Outcome {
        Outcome::Decided(Decision {
            verdict,
            reason: Some(reason),
            problems,
            notes: vec![],
            message: self.msg.is_some(),
            raise_alert: false,
            effects: vec![],
            clears: None,
        })
    }

    fn hold_or(&mut self, reason: &'static str, problem: Finding, verdict: Verdict) -> Outcome {
        let known = self
            .msg
            .and_then(|m| text_of(m.re.as_ref()))
            .is_some_and(|re| self.env.line(re).is_some());
        if !known && self.now - self.first_seen < self.route.hold_seconds {
            return self.bare(
                Verdict::Hold,
                reason::AWAITING_HANDOFF,
                Problems::Own(vec![problem]),
            );
        }
        self.decision(
            verdict,
            Some(reason),
            vec![problem],
            vec![],
            vec![],
            false,
            false,
            true,
        )
    }

    fn msg(&self) -> &'a Twin<'a> {
        self.msg.expect("the line's message is set")
    }

    fn decide(&mut self, conversation_problem: Option<Finding>, line: Line<'a>) -> Outcome {
        if self.conversation.is_none() {
            let problem = p(
                "no-conversation",
                b"the record has no conversation id (the Kafka record key)".to_vec(),
                "gate",
            );
            return self.dead(reason::NO_CONVERSATION, vec![problem]);
        }
        if let Some(problem) = conversation_problem {
            return self.dead(reason::NO_CONVERSATION, vec![problem]);
        }
        let (msg, raw) = match line {
            Line::Refused => {
                return self.bare(Verdict::DeadLetter, reason::INVALID, Problems::Gate)
            }
            Line::Invalid(raw) => return self.invalid(Problems::Parse, &raw),
            Line::Parsed(twin) => (
                twin,
                RawFields {
                    id: twin.id.as_deref(),
                    from: text_of(twin.from.as_ref()),
                    typ: twin.typ.as_deref(),
                    re: text_of(twin.re.as_ref()),
                },
            ),
        };
        let from = text_of(msg.from.as_ref()).unwrap_or_default();
        let id = msg.id.as_deref().unwrap_or_default();
        let typ = msg.typ.as_deref().unwrap_or_default();
        let profile = self.route.profile;
        if let Some(named) = msg.slot(b"p") {
            if named.py_str() != profile {
                let named = named.py_str();
                let message = [
                    &b"the line names profile p="[..],
                    &named,
                    b" but this route's profile is ",
                    profile,
                ]
                .concat();
                let problem = p("profile-mismatch", message, "form")
                    .slot(b"p")
                    .expected(Some(profile))
                    .got(Some(&named));
                return self.invalid(Problems::Own(vec![problem]), &raw);
            }
        }
        let impossible: Vec<Finding> = crate::gate::impossible_twin_dates(msg, self.route.grammar)
            .into_iter()
            .map(Finding::from)
            .collect();
        if !impossible.is_empty() {
            return self.invalid(Problems::Own(impossible), &raw);
        }
        if let Some(senders) = &self.route.senders {
            if !senders.iter().any(|s| s == from) {
                let mut sorted = senders.clone();
                sorted.sort();
                let message = [
                    &b"from="[..],
                    from,
                    b" may not publish on route ",
                    self.route.name,
                ]
                .concat();
                let problem = p("sender-binding", message, "gate")
                    .slot(b"from")
                    .expected(Some(&join(&sorted, b"+")))
                    .got(Some(from));
                return self.dead(reason::SENDER_BINDING, vec![problem]);
            }
        }
        if self.route.sender_auth {
            if let Some(refused) = self.sender_auth(from) {
                return refused;
            }
        }
        if typ == b"CX" {
            let why = msg.slot(b"why");
            let ok = matches!(why, Some(Value::Text(w)) if CANCEL_WHY.contains(&&w[..]));
            if !ok {
                let got = why.map(Value::py_str);
                let said = match &got {
                    None => b"none".to_vec(),
                    Some(w) => [&b"why="[..], w].concat(),
                };
                let message = [
                    &b"CX "[..],
                    id,
                    b": a cancel says why, one of ",
                    &CANCEL_WHY.join(&b' '),
                    b"; got ",
                    &said,
                ]
                .concat();
                let problem = p("cancel-why", message, "form")
                    .slot(b"why")
                    .expected(Some(&CANCEL_WHY.join(&b'+')))
                    .got(got.as_deref());
                return self.invalid(Problems::Own(vec![problem]), &raw);
            }
        }
        if is_reserved_id(id) {
            let range = format!(
                ": numbers {RESERVED_ID_MIN}-{RESERVED_ID_MAX} are reserved for the gatekeeper"
            );
            let message = [&b"id "[..], id, range.as_bytes()].concat();
            let problem = p("reserved-id", message, "gate").slot(b"id").got(Some(id));
            return self.dead(reason::RESERVED_ID, vec![problem]);
        }
        self.msg = Some(msg);
        if let Some(seen) = self.env.line(id) {
            if seen.digest != self.digest {
                let message = [
                    &b"id "[..],
                    id,
                    b" was already used in this conversation for a different line",
                ]
                .concat();
                let problem = p("duplicate-id", message, "conversation")
                    .slot(b"id")
                    .got(Some(id));
                return self.bare(
                    Verdict::DeadLetter,
                    reason::DUPLICATE_ID,
                    Problems::Own(vec![problem]),
                );
            }
            if !(self.replay && was_dead_lettered(&seen)) {
                return self.repeat(&seen);
            }
        }
        let re = text_of(msg.re.as_ref());
        if REPLY_TYPES.contains(&typ) {
            if let Some(re) = re {
                if let Some(target) = self.env.line(re).filter(was_dead_lettered) {
                    let ran = typ == b"DN"
                        && msg.slot(b"out").map(Value::py_str).as_deref() != Some(b"NOOP");
                    let message = [
                        typ,
                        b" ",
                        id,
                        b" replies to ",
                        re,
                        b", which was dead-lettered (",
                        opt_s(target.reason.as_deref()),
                        b")",
                    ]
                    .concat();
                    let problem = p("refused-handoff", message, "conversation")
                        .slot(b"re")
                        .got(Some(re));
                    return self.decision(
                        Verdict::DeadLetter,
                        Some(reason::REFUSED_HANDOFF),
                        vec![problem],
                        vec![],
                        vec![],
                        false,
                        ran,
                        true,
                    );
                }
            }
        }
        if let Some((kind, parties)) = self.target(msg) {
            if let Some(refused) = self.authorize(msg, kind, &parties.view()) {
                return refused;
            }
        }
        match typ {
            b"HO" => self.on_ho(msg),
            b"RB" => self.on_rb(msg),
            b"AN" => self.on_an(msg),
            b"DN" => self.on_dn(msg),
            b"UN" => {
                if let Some(target) = re
                    .and_then(|re| self.env.line(re))
                    .filter(|t| t.typ == b"AQ")
                {
                    return self.answer(msg, &target);
                }
                self.close_without_act(msg)
            }
            b"FL" => self.close_without_act(msg),
            b"CX" => self.on_cx(msg),
            b"AQ" => self.forward(vec![], vec![], true),
            b"ST" => {
                let problems = findings(rw1::translation::translation_check(msg, profile));
                if problems.is_empty() {
                    self.forward(vec![], vec![], false)
                } else {
                    self.dead(reason::TRANSLATION, problems)
                }
            }
            _ => self.forward(vec![], vec![], false),
        }
    }

    /// What the line's `re=` names and the parties of its thread; None when it names nothing this conversation knows
    /// (or a line no rule is about). An HO's target is always a handoff.
    fn target(&mut self, msg: &Twin<'_>) -> Option<(Target, Held)> {
        let re = text_of(msg.re.as_ref())?;
        let line = self.env.line(re)?;
        let typ = msg.typ.as_deref().unwrap_or_default();
        if was_dead_lettered(&line) && !(typ == b"HO" && line.typ == b"RB") {
            return None;
        }
        let (kind, ho_id) = match &line.typ[..] {
            b"AQ" => {
                let aq = self.stored(line.text.as_deref()?)?;
                let aq = aq.twin();
                let parties = Held {
                    asker: Some(text_of(aq.from.as_ref()).unwrap_or_default().to_vec()),
                    asked: Some(text_of(aq.to.as_ref()).unwrap_or_default().to_vec()),
                    ..Held::default()
                };
                return Some((Target::Question, parties));
            }
            b"HO" => (Target::Handoff, re.to_vec()),
            b"RB" => {
                let rb = self.env.readback(re)?;
                let kind = if typ == b"HO" {
                    Target::Handoff
                } else {
                    Target::Readback
                };
                (kind, rb.ho.clone())
            }
            b"CX" => (Target::Cancel, line.re.clone().unwrap_or_default()),
            _ => return None,
        };
        let entry = self.env.handoff(&ho_id)?;
        let ho = self.message(&entry.id)?;
        let ho = ho.twin();
        let parties = Held {
            sender: Some(text_of(ho.from.as_ref()).unwrap_or_default().to_vec()),
            receiver: Some(text_of(ho.to.as_ref()).unwrap_or_default().to_vec()),
            ..Held::default()
        };
        Some((kind, parties))
    }

    fn authorize(
        &mut self,
        msg: &Twin<'_>,
        kind: Target,
        parties: &Parties<'_>,
    ) -> Option<Outcome> {
        let typ = msg.typ.as_deref().unwrap_or_default();
        let from = text_of(msg.from.as_ref()).unwrap_or_default();
        let to = text_of(msg.to.as_ref()).unwrap_or_default();
        let rule = authority::authorize(typ, kind, from, to, parties)?;
        let expected = rule.expected(parties);
        let to_s = s(msg.to.as_ref());
        let message = [
            typ,
            b" ",
            msg.id.as_deref().unwrap_or_default(),
            b" re=",
            &s(msg.re.as_ref()),
            b": a ",
            typ,
            b" to ",
            kind.text().as_bytes(),
            b" comes from ",
            &expected,
            b"; got from=",
            from,
            b" to=",
            &to_s,
        ]
        .concat();
        let got = [from, b"->", &to_s].concat();
        let problem = Finding {
            code: Cow::Borrowed(rule.refusal.code),
            ..p("", message, "thread")
        }
        .slot(b"from")
        .expected(Some(&expected))
        .got(Some(&got));
        if rule.refusal.verdict == "alert" {
            return Some(self.decision(
                Verdict::Alert,
                Some(rule.refusal.reason),
                vec![problem],
                vec![],
                vec![],
                false,
                false,
                false,
            ));
        }
        Some(self.decision(
            Verdict::DeadLetter,
            Some(rule.refusal.reason),
            vec![problem],
            vec![],
            vec![],
            false,
            rule.refusal.alert,
            true,
        ))
    }

    fn sender_auth(&mut self, from: &[u8]) -> Option<Outcome> {
        let unverified = SenderProof {
            failure: Some(b"sender-auth-unverified".to_vec()),
            detail: b"the record's signature was not verified".to_vec(),
            ..SenderProof::default()
        };
        let proof = self.sender.cloned().unwrap_or(unverified);
        let Some(agent) = &proof.agent else {
            let code = proof
                .failure
                .as_deref()
                .filter(|f| !f.is_empty())
                .unwrap_or(b"sender-auth");
            let detail: &[u8] = if proof.detail.is_empty() {
                b"no valid signature"
            } else {
                &proof.detail
            };
            let message = [
                &b"sender authentication: "[..],
                detail,
                b" (route ",
                self.route.name,
                b" takes lines signed by their from= agent's key only)",
            ]
            .concat();
            let expected = [&b"a signature of "[..], from].concat();
            let problem = Finding {
                code: Cow::Owned(String::from_utf8_lossy(code).into_owned()),
                ..p("", message, "gate")
            }
            .slot(b"from")
            .expected(Some(&expected))
            .got(proof.key_id.as_deref());
            return Some(self.dead(reason::SENDER_AUTH, vec![problem]));
        };
        if agent != from {
            let message = [
                &b"sender authentication: the line says from="[..],
                from,
                b" but is signed with key ",
                opt_s(proof.key_id.as_deref()),
                b" of agent ",
                agent,
            ]
            .concat();
            let problem = p("sender-auth-wrong-agent", message, "gate")
                .slot(b"from")
                .expected(Some(agent))
                .got(Some(from));
            return Some(self.dead(reason::SENDER_AUTH, vec![problem]));
        }
        None
    }

    fn signed_by(&self, agent: &[u8]) -> bool {
        !self.route.sender_auth || self.sender.and_then(|s| s.agent.as_deref()) == Some(agent)
    }

    /// An invalid line: a tombstone under its id when the id is well formed and its sender may use this route.
    fn invalid(&mut self, problems: Problems, raw: &RawFields<'_>) -> Outcome {
        let own = match &problems {
            Problems::Own(ps) => ps.clone(),
            _ => vec![],
        };
        let mut effects = Vec::new();
        if let (Some(rid), Some(rfrom), Some(rtype)) = (raw.id, raw.from, raw.typ) {
            let prefix = [rfrom, b"-"].concat();
            let allowed = self
                .route
                .senders
                .as_ref()
                .is_none_or(|s| s.iter().any(|x| x == rfrom));
            let number = crate::rules::id_number(rid);
            if rid.is_ascii()
                && rid.starts_with(&prefix)
                && number.is_some_and(|n| n < RESERVED_ID_MIN)
                && allowed
                && self.signed_by(rfrom)
                && self.env.line(rid).is_none()
            {
                let entry = LineEntry {
                    digest: self.digest.clone(),
                    typ: rtype.to_vec(),
                    verdict: Verdict::DeadLetter,
                    reason: Some(reason::INVALID),
                    re: raw.re.map(<[u8]>::to_vec),
                    keep_text: false,
                };
                effects.push(Effect::RememberLine {
                    id: rid.to_vec(),
                    entry,
                });
            }
        }
        let problems = match problems {
            Problems::Own(_) => Problems::Own(own),
            other => other,
        };
        Outcome::Decided(Decision {
            verdict: Verdict::DeadLetter,
            reason: Some(reason::INVALID),
            problems,
            notes: vec![],
            message: false,
            raise_alert: false,
            effects,
            clears: None,
        })
    }

    fn repeat(&mut self, seen: &LineInfo) -> Outcome {
        let msg = self.msg();
        let clears = if msg.typ.as_deref() == Some(b"AN")
            && Verdict::of(&String::from_utf8_lossy(&seen.verdict)) != Verdict::DeadLetter
        {
            self.clears(msg)
        } else {
            None
        };
        Outcome::Repeat { clears }
    }

    fn clears(&mut self, an: &Twin<'_>) -> Option<(Vec<u8>, Vec<u8>)> {
        let val = s(an.slot(b"val"));
        if !AFFIRMATIVE.contains(&&val[..]) {
            return None;
        }
        let rb = self
            .env
            .readback(text_of(an.re.as_ref()).unwrap_or_default())?;
        let rb_line = self.env.line(&rb.id)?;
        let ho_line = self.env.line(&rb.ho)?;
        Some((rb_line.digest.clone(), ho_line.digest.clone()))
    }

    /// A kept line, parsed (Python's `state.lines[line_id]`, asserted kept): None, with the error, when it cannot be.
    fn message(&mut self, line_id: &[u8]) -> Option<Stored> {
        let Some(entry) = self.env.line(line_id) else {
            return self.fail("KeyError", line_id.to_vec()); // the message is the key, as KeyError takes it
        };
        match &entry.text {
            Some(text) => self.stored(text),
            None => self.fail(
                "AssertionError",
                [&b"line "[..], line_id, b" was not kept"].concat(),
            ),
        }
    }

    fn stored(&mut self, text: &[u8]) -> Option<Stored> {
        let found = self.env.stored(text);
        if found.is_none() {
            return self.fail("AssertionError", b"a stored line no longer parses".to_vec());
        }
        found
    }

    fn fail<T>(&mut self, class: &'static str, message: Vec<u8>) -> Option<T> {
        self.error.get_or_insert(Internal { class, message });
        None
    }

    fn open(&self, entry: &HandoffInfo) -> bool {
        if entry.superseded_by.is_some() {
            return false;
        }
        self.env
            .flags(&entry.id)
            .is_none_or(|(closed, cancelled)| !(closed || cancelled))
    }

    fn holder(&self, entry: &HandoffInfo) -> Vec<u8> {
        entry
            .holder
            .clone()
            .unwrap_or_else(|| [self.conversation.unwrap_or_default(), b"/", &entry.id].concat())
    }

    fn release(&self, entry: &HandoffInfo) -> Vec<Effect> {
        if !entry.bound {
            return vec![];
        }
        vec![Effect::Release {
            item: entry.item.clone(),
            ask: entry.ask.clone(),
            holder: self.holder(entry),
            ho: entry.id.clone(),
        }]
    }

    fn thread_problems(&mut self, msg: &Twin<'_>) -> Vec<Finding> {
        let seq = self.env.seq();
        findings(self.env.probe(msg, seq + 1))
    }

    // ---------------------------------------------------------------- HO

    fn on_ho(&mut self, ho: &'a Twin<'a>) -> Outcome {
        let exp = ho.slot(b"exp");
        if expired(exp, &self.now_rw) {
            let exp_s = s(exp);
            let message = [
                &b"expired: the HO expired at "[..],
                &exp_s,
                b" (now ",
                &self.now_rw,
                b")",
            ]
            .concat();
            let problem = p("expired-ho", message, "expiry")
                .slot(b"exp")
                .expected(Some(&exp_s));
            return self.dead(reason::EXPIRED, vec![problem]);
        }
        let ask = s(ho.slot(b"ask")).into_owned();
        let item = match ho.item.as_ref() {
            Some(v) if v.truthy() => v.py_str().into_owned(),
            _ => Vec::new(),
        };
        let id = ho.id.as_deref().unwrap_or_default();
        let from = text_of(ho.from.as_ref()).unwrap_or_default();
        let exec_ask = !exec_slots(self.route.grammar, &ask).is_empty();
        let reissued = self.reissued(ho);
        if let Some(r) = &reissued {
            if (&r.item[..], &r.ask[..]) != (&item[..], &ask[..]) {
                let message = [
                    &b"HO "[..],
                    id,
                    b" re-issues ",
                    &r.id,
                    b" (re=",
                    &s(ho.re.as_ref()),
                    b") for another item or ask: a re-issue carries item ",
                    &r.item,
                    b" ask ",
                    &r.ask,
                ]
                .concat();
                let problem = p("thread-reissue-other-item", message, "thread")
                    .slot(b"item")
                    .expected(Some(&[&r.item[..], b" ", &r.ask].concat()))
                    .got(Some(&[&item[..], b" ", &ask].concat()));
                return self.dead(reason::CHECK_THREAD, vec![problem]);
            }
        }
        if exec_ask && Some(from) == text_of(ho.to.as_ref()) {
            let to = s(ho.to.as_ref());
            let message = [
                &b"HO "[..],
                id,
                b": an irreversible act (",
                &ask,
                b") is never handed by an agent to itself (from=",
                from,
                b" to=",
                &to,
                b"): separation of duties",
            ]
            .concat();
            let problem = p("ho-self", message, "record")
                .slot(b"to")
                .expected(Some(&[&b"an agent other than "[..], from].concat()))
                .got(Some(&to));
            return self.dead(reason::CHECK_HO, vec![problem]);
        }
        if let Some(of) = self.relayed(ho) {
            return self.relay(ho, &of, item, ask, exec_ask);
        }
        let record = self.env.record(&item, &ask);
        if record.is_none() && exec_ask {
            let message = [&b"no approved record for item "[..], &item, b" ask ", &ask].concat();
            let problem = p("no-record", message, "record")
                .slot(b"item")
                .got(Some(&item));
            return self.dead(reason::NO_RECORD, vec![problem]);
        }
        if record.is_some() {
            if let Some(unproven) = self.env.record_check() {
                return self.dead(reason::NO_RECORD, vec![unproven]);
            }
        }
        let mut notes = vec![];
        if let Some(rec) = &record {
            let pairs: Vec<(&[u8], &[u8])> =
                rec.values.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            let result = rw1::checks::ho_check(ho, &pairs, self.route.grammar);
            if !result.problems.is_empty() {
                return self.dead(reason::CHECK_HO, findings(result.problems));
            }
            notes = findings(result.notes);
        }
        let mut effects = Vec::new();
        let supersedes = self.superseded_handoff(ho);
        let mut holder = None;
        if exec_ask {
            let mut mine = holder_of(
                self.route.name,
                self.conversation.unwrap_or_default(),
                id,
                &self.digest,
                self.now,
            );
            let bound = self.env.binding(&item, &ask);
            let prior = supersedes.as_ref().filter(|h| h.bound);
            let prior_holder = prior.map(|h| self.holder(h));
            if let Some(bound) = bound {
                if Some(&bound) != prior_holder.as_ref() {
                    if let Some(refused) = self.bound_elsewhere(&bound, &mine, &item, &ask) {
                        return refused;
                    }
                    mine = bound;
                }
            }
            if let (Some(prior), Some(prior_holder)) = (prior, prior_holder) {
                effects.push(Effect::Release {
                    item: item.clone(),
                    ask: ask.clone(),
                    holder: prior_holder,
                    ho: prior.id.clone(),
                });
            }
            effects.push(Effect::Bind {
                item: item.clone(),
                ask: ask.clone(),
                holder: mine.clone(),
                ho: id.to_vec(),
            });
            holder = Some(mine);
        }
        if ask == b"UNDO" {
            let ctx = ho.slot(b"ctx");
            let ids: Vec<Vec<u8>> = match ctx {
                Some(v) if v.truthy() => {
                    v.items().iter().map(|x| x.py_str().into_owned()).collect()
                }
                _ => vec![],
            };
            let done = ids.iter().any(|i| {
                self.env
                    .line(i)
                    .is_some_and(|e| e.typ == b"DN" && e.verdict != b"dead-letter")
            });
            if !done {
                let got = join(&ids, b"+");
                let problem = p(
                    "undo-no-done",
                    b"ask=UNDO: ctx= names no done report in this conversation".to_vec(),
                    "record",
                )
                .slot(b"ctx")
                .got(if got.is_empty() { None } else { Some(&got) });
                return self.dead(reason::CHECK_HO, vec![problem]);
            }
        }
        if let Some(sup) = &supersedes {
            effects.push(Effect::Supersede {
                ho: sup.id.clone(),
                by: id.to_vec(),
            });
        }
        effects.insert(
            0,
            Effect::OpenHandoff {
                id: id.to_vec(),
                item: item.clone(),
                ask: ask.clone(),
                exec_ask,
                record: if record.is_some() {
                    RecordOf::Lookup
                } else {
                    RecordOf::None
                },
                bound: exec_ask,
                holder,
                relay_of: None,
            },
        );
        self.forward(notes, effects, true)
    }

    fn bound_elsewhere(
        &mut self,
        bound: &[u8],
        holder: &[u8],
        item: &[u8],
        ask: &[u8],
    ) -> Option<Outcome> {
        let shown = bound_handoff(bound);
        let why = if holder_identity(bound) == holder_identity(holder) {
            if bound_at(bound).is_some_and(|at| self.now - at < self.route.state_ttl_seconds) {
                return None;
            }
            [
                &b"the approval for item "[..],
                item,
                b" ask ",
                ask,
                b" was spent by this very handoff (",
                shown,
                b"), whose state is gone (kept for its retention, then expired): a copy is not a new approval; one \
                  approval, one act",
            ]
            .concat()
        } else {
            [
                &b"the approval for item "[..],
                item,
                b" ask ",
                ask,
                b" is bound to another handoff (",
                shown,
                b"); one approval, one act",
            ]
            .concat()
        };
        let problem = p("record-used", why, "record")
            .slot(b"item")
            .got(Some(shown));
        Some(self.dead(reason::RECORD_USED, vec![problem]))
    }

    /// The handoff an HO relays: `re=` names a handoff and the HO comes from its receiver.
    fn relayed(&mut self, ho: &Twin<'_>) -> Option<HandoffInfo> {
        let re = text_of(ho.re.as_ref()).unwrap_or_default();
        let line = self.env.line(re)?;
        let (_, parties) = self.target(ho)?;
        if line.typ != b"HO" {
            return None;
        }
        let from = text_of(ho.from.as_ref()).unwrap_or_default();
        if parties.receiver.as_deref() != Some(from) || parties.sender.as_deref() == Some(from) {
            return None;
        }
        self.env.handoff(re)
    }

    fn relay(
        &mut self,
        ho: &'a Twin<'a>,
        of: &HandoffInfo,
        item: Vec<u8>,
        ask: Vec<u8>,
        exec_ask: bool,
    ) -> Outcome {
        let id = ho.id.as_deref().unwrap_or_default();
        let Some(original) = self.message(&of.id) else {
            return self.dead(reason::CHECK_HO, vec![]);
        };
        let original = original.twin();
        let mut problems = Vec::new();
        if !self.open(of) {
            let message = [&b"HO "[..], id, b" relays ", &of.id, b", which is closed"].concat();
            problems.push(p("relay-closed", message, "record").slot(b"re"));
        }
        if of.passed_rb.is_none() {
            let message = [
                &b"HO "[..],
                id,
                b" relays ",
                &of.id,
                b" before its readback passed",
            ]
            .concat();
            problems.push(p("relay-before-readback", message, "record").slot(b"re"));
        } else if of.exec_ask && asks_exec(original) && of.cleared_by.is_none() {
            let message = [
                &b"HO "[..],
                id,
                b" relays ",
                &of.id,
                b" before its sender cleared it",
            ]
            .concat();
            problems.push(p("relay-not-cleared", message, "record").slot(b"re"));
        }
        let mut values: Vec<(Vec<u8>, Vec<u8>)> = slot_dict(original)
            .into_iter()
            .filter(|(k, _)| !PER_HOP.contains(k))
            .map(|(k, v)| (k.to_vec(), v.show().into_owned()))
            .collect();
        for (key, value) in [(&b"item"[..], &of.item), (&b"ask"[..], &of.ask)] {
            match values.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value.clone(),
                None => values.push((key.to_vec(), value.clone())),
            }
        }
        let pairs: Vec<(&[u8], &[u8])> = values.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let result = rw1::checks::ho_check(ho, &pairs, self.route.grammar);
        problems.extend(findings(result.problems));
        if !problems.is_empty() {
            return self.dead(reason::CHECK_HO, problems);
        }
        if let Some(by) = &of.relayed_by {
            let message = [
                &b"HO "[..],
                id,
                b": ",
                &of.id,
                b" was already relayed by ",
                by,
                b"; one approval, one act",
            ]
            .concat();
            let problem = p("record-used", message, "record")
                .slot(b"re")
                .got(Some(by));
            return self.dead(reason::RECORD_USED, vec![problem]);
        }
        let effects = vec![
            Effect::OpenHandoff {
                id: id.to_vec(),
                item,
                ask,
                exec_ask,
                record: if of.record.is_some() {
                    RecordOf::Handoff(of.id.clone())
                } else {
                    RecordOf::None
                },
                bound: false,
                holder: None,
                relay_of: Some(of.id.clone()),
            },
            Effect::Relay {
                ho: of.id.clone(),
                by: id.to_vec(),
            },
        ];
        self.forward(findings(result.notes), effects, true)
    }

    /// The handoff an HO re-issues: `re=` names it (or its readback) and the HO comes from its sender.
    fn reissued(&mut self, ho: &Twin<'_>) -> Option<HandoffInfo> {
        let (_, parties) = self.target(ho)?;
        if parties.sender.as_deref() != text_of(ho.from.as_ref()) {
            return None;
        }
        let re = text_of(ho.re.as_ref()).unwrap_or_default();
        let line = self.env.line(re);
        if line.is_some_and(|l| l.typ == b"RB") {
            let rb = self.env.readback(re)?;
            return self.env.handoff(&rb.ho);
        }
        self.env.handoff(re)
    }

    /// The handoff a re-issue replaces: `re=` names a readback that failed (its handoff), or an open handoff that
    /// has no passing readback.
    fn superseded_handoff(&mut self, ho: &Twin<'_>) -> Option<HandoffInfo> {
        let re = text_of(ho.re.as_ref())?;
        self.reissued(ho)?;
        let target = self.env.line(re)?;
        if target.typ == b"RB" {
            let rb = self.env.readback(re);
            let failed = was_dead_lettered(&target) || rb.as_ref().is_some_and(|r| !r.passed);
            let ho_id = match &rb {
                Some(r) => r.ho.clone(),
                None => target.re.clone().unwrap_or_default(),
            };
            let original = self.env.handoff(&ho_id)?;
            return (failed && self.open(&original)).then_some(original);
        }
        if target.typ == b"HO" {
            let original = self.env.handoff(re)?;
            return (self.open(&original) && original.passed_rb.is_none()).then_some(original);
        }
        None
    }

    // ---------------------------------------------------------------- RB

    fn on_rb(&mut self, rb: &'a Twin<'a>) -> Outcome {
        let id = rb.id.as_deref().unwrap_or_default();
        let re = text_of(rb.re.as_ref()).unwrap_or_default();
        let Some(entry) = self.env.handoff(re) else {
            return self.hold_or(
                reason::UNKNOWN_HANDOFF,
                unknown_handoff(rb),
                Verdict::DeadLetter,
            );
        };
        let Some(ho) = self.message(&entry.id) else {
            return self.dead(reason::CHECK_RB, vec![]);
        };
        let ho = ho.twin();
        let mut problems = Vec::new();
        if !self.open(&entry) {
            let message = [
                &b"RB "[..],
                id,
                b" reads back ",
                &entry.id,
                b", which is closed",
            ]
            .concat();
            problems.push(p("handoff-closed", message, "receipt").slot(b"re"));
        }
        let expect: Option<Vec<&[u8]>> = entry
            .record
            .as_ref()
            .and_then(|r| r.expect_acc.as_ref())
            .map(|e| e.iter().map(|x| &x[..]).collect());
        let result =
            rw1::checks::rb_check(ho, rb, self.route.grammar, expect.as_deref(), &self.now_rw);
        problems.extend(findings(result.problems));
        problems.extend(self.resolved_problems(
            ho,
            rb,
            entry.record.as_deref().map(|r| &r.resolved[..]),
            b"tier5 execution",
            b"RB",
            "resolved",
        ));
        let mut notes = findings(result.notes);
        let comprehension = has_level(&rb_levels(ho), &COMPREHENSION_LEVELS);
        let unchecked = entry.record.as_ref().is_none_or(|r| r.expect_acc.is_none());
        if !comprehension.is_empty() && unchecked {
            let message = [
                &b"RB "[..],
                id,
                b": ",
                &entry.id,
                b" asks rb=",
                &join(&comprehension, b"+"),
                b", and no withheld criteria (expect_acc) are on record: the comprehension was not verified",
            ]
            .concat();
            let unverified =
                p(UNVERIFIED_COMPREHENSION, message, "tier4 comprehension").slot(b"acc");
            if self.route.refuse_unverified_comprehension {
                problems.push(unverified);
            } else {
                notes.push(unverified);
            }
        }
        let exp = rb
            .slot(b"exp")
            .filter(|v| v.truthy())
            .map(|v| v.py_str().into_owned());
        let passed = problems.is_empty();
        let record = Effect::RecordReadback {
            id: id.to_vec(),
            ho: entry.id.clone(),
            passed,
            exp,
        };
        if !passed {
            return self.decision(
                Verdict::DeadLetter,
                Some(reason::CHECK_RB),
                problems,
                vec![],
                vec![record],
                false,
                false,
                true,
            );
        }
        let pass = Effect::PassReadback {
            ho: entry.id.clone(),
            rb: id.to_vec(),
        };
        self.forward(notes, vec![record, pass], true)
    }

    /// The execution slots the receiver resolved itself (absent from the HO) against the record's `resolved`.
    fn resolved_problems(
        &self,
        ho: &Twin<'_>,
        reply: &Twin<'_>,
        resolved: Option<&[(Vec<u8>, Vec<u8>)]>,
        tier: &[u8],
        what: &[u8],
        code_tier: &'static str,
    ) -> Vec<Finding> {
        let ask = s(ho.slot(b"ask"));
        let slots = exec_slots(self.route.grammar, &ask);
        if slots.is_empty() || !asks_exec(ho) {
            return vec![];
        }
        let mut problems = Vec::new();
        for k in slots {
            if ho.slot(k).is_some() {
                continue;
            }
            let Some(value) = reply.slot(k) else {
                continue;
            };
            let got = value.show();
            let want = resolved
                .and_then(|r| r.iter().rev().find(|(key, _)| key[..] == k[..]))
                .map(|(_, v)| v);
            match want {
                None => {
                    let message = [
                        tier,
                        b": ",
                        k,
                        b"=",
                        &got,
                        b" was resolved by the receiver and the record holds no value to check it",
                    ]
                    .concat();
                    problems.push(
                        p("resolved-unverified", message, code_tier)
                            .slot(k)
                            .got(Some(&got)),
                    );
                }
                Some(want) if want[..] != got[..] => {
                    let message = [
                        tier,
                        b": ",
                        k,
                        b" mismatch: record ",
                        want,
                        b" vs ",
                        what,
                        b" ",
                        &got,
                    ]
                    .concat();
                    problems.push(
                        p("resolved-mismatch", message, code_tier)
                            .slot(k)
                            .expected(Some(want))
                            .got(Some(&got)),
                    );
                }
                Some(_) => {}
            }
        }
        problems
    }

    // ---------------------------------------------------------------- AN

    fn on_an(&mut self, an: &'a Twin<'a>) -> Outcome {
        let id = an.id.as_deref().unwrap_or_default();
        let val = s(an.slot(b"val")).into_owned();
        let re = text_of(an.re.as_ref()).unwrap_or_default();
        let affirmative = AFFIRMATIVE.contains(&&val[..]);
        let Some(target) = self.env.line(re) else {
            let why = if affirmative {
                reason::CLEARANCE
            } else {
                reason::UNKNOWN_HANDOFF
            };
            let message = [
                &b"AN "[..],
                id,
                b" re=",
                &s(an.re.as_ref()),
                b": no such line in this conversation",
            ]
            .concat();
            let problem = p("unknown-reference", message, "receipt").slot(b"re");
            return self.hold_or(why, problem, Verdict::DeadLetter);
        };
        match &target.typ[..] {
            b"CX" => {
                let mut effects = vec![];
                if affirmative {
                    if let Some(entry) = self.env.handoff(target.re.as_deref().unwrap_or_default())
                    {
                        effects = self.release(&entry);
                    }
                }
                return self.forward(vec![], effects, false);
            }
            b"AQ" => return self.answer(an, &target),
            b"RB" => {}
            _ => return self.forward(vec![], vec![], false),
        }
        let rb = self.env.readback(re);
        if !affirmative {
            if let Some(rb) = rb.filter(|_| NEGATIVE.contains(&&val[..])) {
                return self.forward(vec![], vec![Effect::RefuseReadback { rb: rb.id }], false);
            }
            return self.forward(vec![], vec![], false);
        }
        let problems = self.clearance_problems(an, rb.as_ref());
        let Some(rb) = rb.filter(|_| problems.is_empty()) else {
            return self.dead(reason::CLEARANCE, problems);
        };
        let clears = self.clears(an);
        let mut decided = self.forward(
            vec![],
            vec![Effect::Clear {
                ho: rb.ho.clone(),
                rb: rb.id.clone(),
            }],
            false,
        );
        if let Outcome::Decided(d) = &mut decided {
            d.clears = clears;
        }
        decided
    }

    fn clearance_problems(&mut self, an: &Twin<'_>, rb: Option<&ReadbackInfo>) -> Vec<Finding> {
        let Some(rb) = rb else {
            let message = [
                &b"AN "[..],
                an.id.as_deref().unwrap_or_default(),
                b": readback ",
                &s(an.re.as_ref()),
                b" is unknown",
            ]
            .concat();
            return vec![p("clearance-unknown", message, "clearance").slot(b"re")];
        };
        let mut problems = Vec::new();
        let entry = self.env.handoff(&rb.ho);
        if !rb.passed {
            let message = [&b"readback "[..], &rb.id, b" did not pass its check"].concat();
            problems.push(p("clearance-failed", message, "clearance").slot(b"re"));
        }
        if rb.refused {
            let message = [
                &b"readback "[..],
                &rb.id,
                b" was already answered negatively",
            ]
            .concat();
            problems.push(p("clearance-refused", message, "clearance").slot(b"re"));
        }
        if let Some(exp) = rb
            .exp
            .as_deref()
            .filter(|e| !e.is_empty() && expired_text(e, &self.now_rw))
        {
            let message = [
                &b"the statement "[..],
                &rb.id,
                b" expired at ",
                exp,
                b" (now ",
                &self.now_rw,
                b")",
            ]
            .concat();
            problems.push(
                p("clearance-expired", message, "clearance")
                    .slot(b"exp")
                    .expected(Some(exp)),
            );
        }
        let Some(entry) = entry else {
            let message = [&b"the handoff of "[..], &rb.id, b" is unknown"].concat();
            problems.push(p("clearance-unknown", message, "clearance").slot(b"re"));
            return problems;
        };
        let Some(ho) = self.message(&entry.id) else {
            return problems;
        };
        let ho = ho.twin();
        let ho_id = ho.id.as_deref().unwrap_or_default().to_vec();
        let ho_exp = ho.slot(b"exp");
        if expired(ho_exp, &self.now_rw) {
            let exp_s = s(ho_exp);
            let message = [
                &b"the handoff "[..],
                &ho_id,
                b" expired at ",
                &exp_s,
                b" (now ",
                &self.now_rw,
                b")",
            ]
            .concat();
            problems.push(
                p("clearance-expired", message, "clearance")
                    .slot(b"exp")
                    .expected(Some(&exp_s)),
            );
        }
        if !self.open(&entry) {
            let message = [
                &b"the handoff "[..],
                &ho_id,
                b" is closed, cancelled or superseded",
            ]
            .concat();
            problems.push(p("clearance-closed", message, "clearance").slot(b"re"));
        }
        if let Some(cleared) = entry.cleared_by.as_ref().filter(|c| **c != rb.id) {
            let message = [
                &b"the handoff "[..],
                &ho_id,
                b" was already cleared for the statement ",
                cleared,
                b": one clearance per handoff (answering the same readback again is allowed)",
            ]
            .concat();
            problems.push(
                p("clearance-second-statement", message, "clearance")
                    .slot(b"re")
                    .expected(Some(cleared))
                    .got(Some(&rb.id)),
            );
        }
        problems
    }

    // ---------------------------------------------------------------- DN, UN, FL, CX, AQ

    fn on_dn(&mut self, dn: &'a Twin<'a>) -> Outcome {
        let id = dn.id.as_deref().unwrap_or_default();
        let re = text_of(dn.re.as_ref()).unwrap_or_default();
        let Some(entry) = self.env.handoff(re) else {
            return self.hold_or(reason::UNKNOWN_HANDOFF, unknown_handoff(dn), Verdict::Alert);
        };
        let Some(ho) = self.message(&entry.id) else {
            return self.dead(reason::CHECK_DN, vec![]);
        };
        let ho = ho.twin();
        let ho_id = ho.id.as_deref().unwrap_or_default().to_vec();
        let plan_id = entry.cleared_by.clone().or_else(|| entry.passed_rb.clone());
        let plan = match &plan_id {
            Some(rb) => self.message(rb),
            None => None,
        };
        let result =
            rw1::checks::dn_check(ho, dn, self.route.grammar, plan.as_ref().map(|p| p.twin()));
        let mut problems = findings(result.problems);
        if plan_id.is_none() {
            problems.extend(self.resolved_problems(
                ho,
                dn,
                entry.record.as_deref().map(|r| &r.resolved[..]),
                b"executed",
                b"DN",
                "executed",
            ));
        }
        let ran = s(dn.slot(b"out")).as_ref() != b"NOOP";
        if entry.exec_ask && asks_exec(ho) && ran && entry.cleared_by.is_none() {
            let message = [
                id,
                b" reports the act done, but no affirmative answer cleared a readback of ",
                &ho_id,
            ]
            .concat();
            problems.push(p("done-not-cleared", message, "executed").slot(b"out"));
        }
        let ho_exp = ho.slot(b"exp");
        if ran && expired(ho_exp, &self.now_rw) {
            let exp_s = s(ho_exp);
            let message = [
                id,
                b" reports the act of ",
                &ho_id,
                b" done at ",
                &self.now_rw,
                b", after the handoff's exp=",
                &exp_s,
                b" (never act past exp=)",
            ]
            .concat();
            problems.push(
                p("acted-after-expiry", message, "executed")
                    .slot(b"exp")
                    .expected(Some(&exp_s))
                    .got(Some(&self.now_rw)),
            );
        }
        let levels = has_level(&rb_levels(ho), &PLANNED_LEVELS);
        if ran && !levels.is_empty() && entry.passed_rb.is_none() {
            let message = [
                id,
                b" reports the act of ",
                &ho_id,
                b" done, but its rb=",
                &join(&levels, b"+"),
                b" readback never passed",
            ]
            .concat();
            problems.push(p("done-without-readback", message, "executed").slot(b"rb"));
        }
        problems.extend(self.thread_problems(dn));
        let effects = if ran { vec![] } else { self.release(&entry) };
        let notes = findings(result.notes);
        if !problems.is_empty() {
            return self.decision(
                Verdict::Alert,
                Some(reason::CHECK_DN),
                problems,
                notes,
                effects,
                false,
                false,
                true,
            );
        }
        self.forward(notes, effects, false)
    }

    fn close_without_act(&mut self, msg: &'a Twin<'a>) -> Outcome {
        let re = text_of(msg.re.as_ref()).unwrap_or_default();
        let Some(entry) = self.env.handoff(re) else {
            return self.hold_or(
                reason::UNKNOWN_HANDOFF,
                unknown_handoff(msg),
                Verdict::Alert,
            );
        };
        let problems = self.thread_problems(msg);
        let effects = self.release(&entry);
        if !problems.is_empty() {
            return self.decision(
                Verdict::Alert,
                Some(reason::CHECK_THREAD),
                problems,
                vec![],
                effects,
                false,
                false,
                true,
            );
        }
        self.forward(vec![], effects, false)
    }

    fn on_cx(&mut self, cx: &'a Twin<'a>) -> Outcome {
        let re = text_of(cx.re.as_ref()).unwrap_or_default();
        if self.env.handoff(re).is_none() {
            let message = [
                &b"CX "[..],
                cx.id.as_deref().unwrap_or_default(),
                b" re=",
                &s(cx.re.as_ref()),
                b" does not name an HO in this thread",
            ]
            .concat();
            let problem = p("thread-cancel-no-handoff", message, "thread");
            return self.hold_or(reason::CHECK_THREAD, problem, Verdict::DeadLetter);
        }
        self.forward(vec![], vec![], false)
    }

    /// An AN or a UN to a question: once per question, and an AN's `val` within what the question allows.
    fn answer(&mut self, msg: &'a Twin<'a>, target: &LineInfo) -> Outcome {
        let Some(text) = &target.text else {
            return self.forward(vec![], vec![], false);
        };
        let Some(aq) = self.stored(text) else {
            return self.forward(vec![], vec![], false);
        };
        let aq = aq.twin();
        let id = msg.id.as_deref().unwrap_or_default();
        let aq_id = aq.id.as_deref().unwrap_or_default();
        let mut problems = Vec::new();
        if let Some(answered) = &target.answered {
            let message = [
                msg.typ.as_deref().unwrap_or_default(),
                b" ",
                id,
                b": question ",
                aq_id,
                b" was already answered by ",
                answered,
            ]
            .concat();
            problems.push(
                p("thread-question-answered", message, "thread")
                    .slot(b"re")
                    .got(Some(answered)),
            );
        }
        if msg.typ.as_deref() == Some(b"AN") {
            let need = match aq.slot(b"need") {
                Some(v) if v.truthy() => v.py_str().into_owned(),
                _ => Vec::new(),
            };
            let val = msg
                .slot(b"val")
                .map_or(Cow::Borrowed(&b"None"[..]), Value::show);
            let allowed: Vec<Vec<u8>> = match aq.slot(b"opts") {
                Some(v) if v.truthy() => {
                    v.items().iter().map(|x| x.py_str().into_owned()).collect()
                }
                _ => vec![],
            };
            let allowed: Vec<&[u8]> = allowed.iter().map(|a| &a[..]).collect();
            let tail = msg.tail.as_deref();
            if let Some(wants) = crate::rules::answer_wants(&need, &val, &allowed, tail) {
                problems.push(crate::rules::answer_problem(id, aq_id, &need, &val, &wants).into());
            }
        }
        if !problems.is_empty() {
            return self.dead(reason::CHECK_THREAD, problems);
        }
        let effect = Effect::AnswerQuestion {
            aq: aq_id.to_vec(),
            by: id.to_vec(),
        };
        self.forward(vec![], vec![effect], false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{StoredHandoff, StoredLine, StoredReadback};
    use proptest::prelude::*;
    use rw1::Vocabulary;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn grammar() -> Grammar {
        let b = |s: &str| -> Box<[u8]> { s.as_bytes().into() };
        let slots = [
            ("re", "msgid"),
            ("from", "agent"),
            ("to", "agent"),
            ("item", "ref"),
            ("ask", "enum:ask"),
            ("amt", "money"),
            ("rb", "list:token"),
            ("h", "token"),
            ("exp", "time"),
            ("out", "enum:out"),
            ("val", "token"),
            ("why", "token"),
        ];
        let all: Vec<Box<[u8]>> = slots.iter().map(|(k, _)| b(k)).collect();
        let ty =
            |code: &str, req: &[&str]| (b(code), req.iter().map(|s| b(s)).collect(), all.clone());
        Grammar::new(Vocabulary {
            types: vec![
                ty("HO", &["from", "to", "ask"]),
                ty("RB", &["re", "from", "to"]),
                ty("AN", &["re", "from", "to", "val"]),
                ty("DN", &["re", "from", "to", "out"]),
                ty("CX", &["re", "from", "to"]),
            ],
            slots: slots.iter().map(|(k, t)| (b(k), b(t))).collect(),
            enums: vec![
                (b("ask"), vec![b("PAY"), b("DRAFT")]),
                (b("out"), vec![b("OK"), b("NOOP")]),
            ],
            tail_max: 300,
            exec: vec![(b("PAY"), vec![b("amt")])],
            ..Vocabulary::default()
        })
        .unwrap_or_else(|e| panic!("{}", String::from_utf8_lossy(&e)))
    }

    /// The state and the records as maps: what the bindings read from Python, held here.
    #[derive(Default)]
    struct MapEnv {
        grammar: Option<Arc<Grammar>>,
        lines: HashMap<Vec<u8>, LineInfo>,
        handoffs: HashMap<Vec<u8>, StoredHandoff>,
        readbacks: HashMap<Vec<u8>, StoredReadback>,
        records: HashMap<(Vec<u8>, Vec<u8>), RecordInfo>,
        bindings: HashMap<(Vec<u8>, Vec<u8>), Vec<u8>>,
    }

    impl Env for MapEnv {
        fn line(&self, id: &[u8]) -> Option<LineInfo> {
            self.lines.get(id).cloned()
        }
        fn handoff(&self, id: &[u8]) -> Option<HandoffInfo> {
            self.handoffs.get(id).map(|h| HandoffInfo {
                id: id.to_vec(),
                entry: Arc::new(h.clone()),
            })
        }
        fn readback(&self, id: &[u8]) -> Option<ReadbackInfo> {
            self.readbacks.get(id).map(|r| ReadbackInfo {
                id: id.to_vec(),
                entry: Arc::new(r.clone()),
            })
        }
        fn flags(&self, _ho: &[u8]) -> Option<(bool, bool)> {
            None
        }
        fn probe(&mut self, _msg: &Twin<'_>, _line_no: i64) -> Vec<rw1::Problem> {
            vec![]
        }
        fn seq(&self) -> i64 {
            0
        }
        fn record(&mut self, item: &[u8], ask: &[u8]) -> Option<RecordInfo> {
            self.records.get(&(item.to_vec(), ask.to_vec())).cloned()
        }
        fn binding(&mut self, item: &[u8], ask: &[u8]) -> Option<Vec<u8>> {
            self.bindings.get(&(item.to_vec(), ask.to_vec())).cloned()
        }
        fn record_check(&mut self) -> Option<Finding> {
            None
        }
        fn stored(&mut self, text: &[u8]) -> Option<Stored> {
            let g = self.grammar.clone()?;
            let parsed = rw1::parse(text, &g, |_| Err(Vec::new()));
            parsed
                .errors
                .is_empty()
                .then(|| Arc::new(owned_twin(parsed.twin)) as Stored)
        }
    }

    fn run(env: &mut MapEnv, line: &str, now: f64, first_seen: Option<f64>) -> Outcome {
        let g = env.grammar.clone().unwrap_or_else(|| Arc::new(grammar()));
        env.grammar = Some(g.clone());
        let route = Route {
            name: b"agents.pay",
            profile: b"core",
            grammar: &g,
            senders: None,
            hold_seconds: 30.0,
            sender_auth: false,
            state_ttl_seconds: 86_400.0,
            refuse_unverified_comprehension: false,
        };
        let parsed = rw1::parse(line.as_bytes(), &g, |_| Err(Vec::new()));
        let l = if parsed.errors.is_empty() {
            Line::Parsed(&parsed.twin)
        } else {
            Line::Invalid(RawFields::default())
        };
        decide(
            line.as_bytes(),
            Some(b"c1"),
            None,
            l,
            env,
            &route,
            now,
            first_seen,
            false,
            None,
        )
        .expect("decided")
    }

    fn decided(o: Outcome) -> Decision {
        match o {
            Outcome::Decided(d) => d,
            Outcome::Repeat { .. } => panic!("a repeat"),
        }
    }

    fn codes(d: &Decision) -> Vec<String> {
        match &d.problems {
            Problems::Own(ps) => ps.iter().map(|p| p.code.to_string()).collect(),
            other => vec![format!("{other:?}")],
        }
    }

    const HO: &str = "RW1 HO a-1 from=a to=b item=i:1 ask=PAY amt=5.00 rb=exec";

    fn with_record() -> MapEnv {
        let mut env = MapEnv::default();
        let rec = RecordInfo {
            values: vec![
                (b"to".to_vec(), b"b".to_vec()),
                (b"amt".to_vec(), b"5.00".to_vec()),
            ],
            ..RecordInfo::default()
        };
        env.records.insert((b"i:1".to_vec(), b"PAY".to_vec()), rec);
        env
    }

    #[test]
    fn a_handoff_on_its_record_is_forwarded_and_binds_the_approval() {
        let mut env = with_record();
        let d = decided(run(&mut env, HO, 1_790_000_000.0, None));
        assert_eq!((d.verdict, codes(&d)), (Verdict::Forward, vec![]));
        let holder = [
            &b"agents.pay/c1/a-1#"[..],
            &line_digest(HO.as_bytes()),
            b"@1790000000",
        ]
        .concat();
        assert!(d.effects.contains(&Effect::Bind {
            item: b"i:1".to_vec(),
            ask: b"PAY".to_vec(),
            holder,
            ho: b"a-1".to_vec()
        }));
        assert!(
            matches!(d.effects[0], Effect::RememberLine { .. })
                && d.effects.last() == Some(&Effect::FeedThread)
        );
    }

    #[test]
    fn one_approval_one_act() {
        let mut env = with_record();
        env.bindings.insert(
            (b"i:1".to_vec(), b"PAY".to_vec()),
            b"agents.pay/c0/a-1#0123456789abcdef@1790000000".to_vec(),
        );
        let d = decided(run(&mut env, HO, 1_790_000_000.0, None));
        assert_eq!(
            (d.verdict, codes(&d)),
            (Verdict::DeadLetter, vec!["record-used".to_string()])
        );
        let mut bare = MapEnv::default();
        let d = decided(run(&mut bare, HO, 1_790_000_000.0, None));
        assert_eq!(codes(&d), ["no-record"]);
    }

    #[test]
    fn a_reply_to_nothing_is_held_then_refused() {
        let rb = "RW1 RB b-1 re=a-9 from=b to=a";
        let d = decided(run(&mut MapEnv::default(), rb, 100.0, Some(90.0)));
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::Hold, Some(reason::AWAITING_HANDOFF))
        );
        let d = decided(run(&mut MapEnv::default(), rb, 100.0, Some(10.0)));
        assert_eq!(
            (d.verdict, codes(&d)),
            (Verdict::DeadLetter, vec!["unknown-handoff".to_string()])
        );
    }

    #[test]
    fn only_the_handoffs_receiver_reads_it_back() {
        let mut env = with_record();
        let ho = decided(run(&mut env, HO, 1_790_000_000.0, None));
        assert_eq!(ho.verdict, Verdict::Forward);
        env.lines.insert(
            b"a-1".to_vec(),
            LineInfo::new(StoredLine {
                digest: line_digest(HO.as_bytes()),
                typ: b"HO".to_vec(),
                verdict: b"forward".to_vec(),
                text: Some(HO.as_bytes().to_vec()),
                ..StoredLine::default()
            }),
        );
        env.handoffs.insert(
            b"a-1".to_vec(),
            StoredHandoff {
                item: b"i:1".to_vec(),
                ask: b"PAY".to_vec(),
                exec_ask: true,
                ..StoredHandoff::default()
            },
        );
        let d = decided(run(
            &mut env,
            "RW1 RB m-1 re=a-1 from=m to=a",
            1_790_000_000.0,
            None,
        ));
        assert_eq!(codes(&d), ["receipt-route"]);
        assert!(d.effects.iter().all(|e| !matches!(e, Effect::FeedThread)));
    }

    #[test]
    fn rw_time_is_utc() {
        assert_eq!(rw_time(0.0), b"19700101T0000Z");
        assert_eq!(rw_time(1_790_000_019.9), b"20260921T1413Z");
        assert_eq!(rw_time(951_782_400.0), b"20000229T0000Z");
    }

    proptest! {
        /// The times and digests written without the formatter are what the formatter writes.
        #[test]
        fn times_and_digests_as_the_formatter_writes_them(epoch in -1.0e11f64..1.0e12, raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let secs = epoch.floor() as i64;
            let (y, m, d) = civil(secs.div_euclid(86_400));
            let rem = secs.rem_euclid(86_400);
            let want = format!("{y:04}{m:02}{d:02}T{:02}{:02}Z", rem / 3600, (rem % 3600) / 60);
            prop_assert_eq!(rw_time(epoch), want.into_bytes());
            let hash = <sha2::Sha256 as sha2::Digest>::digest(&raw);
            let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(line_digest(&raw), hex.into_bytes());
        }
    }

    /// The effects a decision changes the map state by, as `policy.apply` does for the fields a decision reads.
    fn apply(env: &mut MapEnv, line: &str, d: &Decision) {
        for e in &d.effects {
            match e {
                Effect::RememberLine { id, entry } => {
                    let info = LineInfo::new(StoredLine {
                        digest: entry.digest.clone(),
                        typ: entry.typ.clone(),
                        verdict: entry.verdict.code().as_bytes().to_vec(),
                        reason: entry.reason.map(|r| r.as_bytes().to_vec()),
                        re: entry.re.clone(),
                        text: entry.keep_text.then(|| line.as_bytes().to_vec()),
                        ..StoredLine::default()
                    });
                    env.lines.insert(id.clone(), info);
                }
                Effect::OpenHandoff {
                    id,
                    item,
                    ask,
                    exec_ask,
                    bound,
                    holder,
                    ..
                } => {
                    let h = StoredHandoff {
                        item: item.clone(),
                        ask: ask.clone(),
                        exec_ask: *exec_ask,
                        bound: *bound,
                        holder: holder.clone(),
                        ..StoredHandoff::default()
                    };
                    env.handoffs.insert(id.clone(), h);
                }
                Effect::RecordReadback {
                    id,
                    ho,
                    passed,
                    exp,
                } => {
                    let rb = StoredReadback {
                        ho: ho.clone(),
                        passed: *passed,
                        exp: exp.clone(),
                        refused: false,
                    };
                    env.readbacks.insert(id.clone(), rb);
                }
                Effect::PassReadback { ho, rb } => {
                    if let Some(h) = env.handoffs.get_mut(ho) {
                        h.passed_rb = Some(rb.clone());
                    }
                }
                Effect::Clear { ho, rb } => {
                    if let Some(h) = env.handoffs.get_mut(ho) {
                        h.cleared_by = Some(rb.clone());
                    }
                }
                Effect::Supersede { ho, by } => {
                    if let Some(h) = env.handoffs.get_mut(ho) {
                        h.superseded_by = Some(by.clone());
                    }
                }
                Effect::Bind {
                    item, ask, holder, ..
                } => {
                    env.bindings
                        .insert((item.clone(), ask.clone()), holder.clone());
                }
                _ => {}
            }
        }
    }

    proptest! {
        #[test]
        fn any_conversation_is_decided_without_panic(
            lines in proptest::collection::vec(
                "RW1 (HO|RB|AN|DN|CX|UN) [ab]-[1-4]( re=[ab]-[1-4])? from=[ab] to=[ab]( item=i:1)?( ask=(PAY|DRAFT))?( amt=5.00)?( rb=exec)?( val=(Y|N))?( out=(OK|NOOP))?( why=REVOKED)?",
                1..12,
            )
        ) {
            let mut env = with_record();
            let mut now = 1_790_000_000.0;
            for line in &lines {
                if let Outcome::Decided(d) = run(&mut env, line, now, Some(now - 60.0)) {
                    apply(&mut env, line, &d);
                }
                now += 1.0;
            }
        }

        #[test]
        fn any_line_is_decided_without_panic(line in "RW1 (HO|RB|AN|DN|CX|ST) [a-c]-[0-9]{1,3}( (re|from|to|item|ask|amt|val|why|out)=[a-cPAYOK0-9.:-]{0,6}){0,7}") {
            let mut env = with_record();
            let _ = run(&mut env, &line, 1_790_000_000.0, None);
        }
    }
}
