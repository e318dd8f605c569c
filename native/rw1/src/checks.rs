//! The three program-run checks, over decoded messages: the HO against the record (check 1), the readback
//! against the HO in five tiers plus expiry (check 2), and the done report against the plan (check 3).
//!
//! Each gives (problems, notes): any problem means stop; a note is worth logging. Every finding carries a stable
//! code, its tier, the slot, what was expected (the HO's, the record's or the plan's value) and what was got, in
//! the reference's words. Values are compared as the reference (Python) compares them ([`Value::py_eq`]).

use std::borrow::Cow;

use crate::acc::{compare, split_constraint, RB_LEVELS};
use crate::canon;
use crate::grammar::Grammar;
use crate::parse::{is_time, Twin};
use crate::problem::{cat, Problem};
use crate::pytext;
use crate::value::Value;

/// What a readback echoes unless the HO asks `rb=all`: these, and any slot `rb=` names.
const DEFAULT_RB: [&[u8]; 3] = [b"item", b"ask", b"due"];
/// What a readback adds for itself; never part of the plan.
const RB_OWN: [&[u8]; 8] = [b"h", b"eta", b"acc", b"do", b"not", b"asm", b"p", b"exp"];
/// The HO's slots that are not part of the plan.
const NOT_PLAN: [&[u8]; 4] = [b"rb", b"acc", b"keys", b"p"];
/// The HO's slots `rb=all` does not echo.
const NOT_ALL: [&[u8]; 4] = [b"rb", b"p", b"acc", b"exp"];

static NONE: Value<'static> = Value::None;

/// The findings of one check.
#[derive(Debug, Default)]
pub struct Findings {
    pub problems: Vec<Problem>,
    pub notes: Vec<Problem>,
}

/// Where a finding goes.
#[derive(Clone, Copy)]
enum To {
    Problems,
    Notes,
}

impl Findings {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        to: To,
        code: &'static str,
        tier: &'static str,
        message: Vec<u8>,
        slot: Option<&[u8]>,
        expected: Option<&[u8]>,
        got: Option<&[u8]>,
    ) {
        let p = Problem::new(code, tier, message, slot, expected, got);
        match to {
            To::Problems => self.problems.push(p),
            To::Notes => self.notes.push(p),
        }
    }
}

/// A value as a finding's `expected` or `got` shows it: None stays None, anything else as a line shows it.
fn shown<'v>(v: &'v Value<'_>) -> Option<Cow<'v, [u8]>> {
    match v {
        Value::None => None,
        _ => Some(v.show()),
    }
}

fn envelope<'v, 'a>(v: &'v Option<Value<'a>>) -> &'v Value<'a> {
    v.as_ref().unwrap_or(&NONE)
}

fn text_of<'v>(t: &'v Option<Cow<'_, [u8]>>) -> &'v [u8] {
    t.as_deref().unwrap_or(b"None")
}

/// A dict's view of `(key, value)` pairs: a later pair of a key replaces the earlier's value in its place.
struct Flat<'v, 'a> {
    pairs: Vec<(&'v [u8], &'v Value<'a>)>,
}

impl<'v, 'a> Flat<'v, 'a> {
    fn new() -> Self {
        Flat { pairs: Vec::new() }
    }

    fn set(&mut self, k: &'v [u8], v: &'v Value<'a>) {
        match self.pairs.iter_mut().find(|(key, _)| *key == k) {
            Some(pair) => pair.1 = v,
            None => self.pairs.push((k, v)),
        }
    }

    fn get(&self, k: &[u8]) -> Option<&'v Value<'a>> {
        self.pairs
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| *v)
    }

    fn slots(mut self, t: &'v Twin<'a>) -> Self {
        for (k, v) in &t.slots {
            self.set(k, v);
        }
        self
    }
}

fn wrong_type(f: &mut Findings, which: &[u8], t: &Twin<'_>, want: &[u8]) {
    let got = text_of(&t.typ);
    let msg = cat(&[which, b" line is ", got, b", expected ", want]);
    f.add(
        To::Problems,
        "wrong-type",
        "form",
        msg,
        None,
        Some(want),
        Some(got),
    );
}

/// The execution slots the profile names for an ask (`str(ask or "")`).
fn exec_slots<'g>(g: &'g Grammar, ask: Option<&Value<'_>>) -> &'g [Box<[u8]>] {
    let ask = ask
        .filter(|a| a.truthy())
        .map(|a| a.py_str().into_owned())
        .unwrap_or_default();
    g.exec_map.get(&ask[..]).map_or(&[], |v| &v[..])
}

/// The items of a slot value (None: none), each as `str` writes it.
fn texts<'v>(v: Option<&'v Value<'_>>) -> Vec<Cow<'v, [u8]>> {
    v.map(|v| v.items().iter().map(Value::py_str).collect())
        .unwrap_or_default()
}

fn refs<'v>(v: &'v [Cow<'_, [u8]>]) -> Vec<&'v [u8]> {
    v.iter().map(|x| &x[..]).collect()
}

// ---------------------------------------------------------------- check 1: the HO against the record

/// Check 1, before sending: every value the record holds (`(key, value as written)`) is on the HO unchanged, and
/// an exec ask asks `rb=exec`.
pub fn ho_check(ho: &Twin<'_>, record: &[(&[u8], &[u8])], g: &Grammar) -> Findings {
    let mut f = Findings::default();
    if ho.typ.as_deref() != Some(b"HO") {
        wrong_type(&mut f, b"first", ho, b"HO");
        return f;
    }
    let mut flat = Flat::new();
    flat.set(b"from", envelope(&ho.from));
    flat.set(b"to", envelope(&ho.to));
    flat.set(b"item", envelope(&ho.item));
    let flat = flat.slots(ho);
    for &(k, want) in record {
        match flat.get(k) {
            None => {
                let msg = cat(&[
                    b"record: HO does not carry ",
                    k,
                    b" (record has ",
                    k,
                    b"=",
                    want,
                    b")",
                ]);
                f.add(
                    To::Problems,
                    "record-missing",
                    "record",
                    msg,
                    Some(k),
                    Some(want),
                    None,
                );
            }
            Some(v) => {
                let got = v.show();
                if &got[..] != want {
                    let msg = cat(&[
                        b"record: ",
                        k,
                        b" mismatch: record ",
                        want,
                        b" vs HO ",
                        &got,
                    ]);
                    f.add(
                        To::Problems,
                        "record-mismatch",
                        "record",
                        msg,
                        Some(k),
                        Some(want),
                        Some(&got),
                    );
                }
            }
        }
    }
    let ask = ho.slot(b"ask");
    let exec = exec_slots(g, ask);
    if !exec.is_empty() {
        let rb = ho.slot(b"rb");
        let asks_exec = rb.is_some_and(|rb| {
            rb.items()
                .iter()
                .any(|x| pytext::lower(&x.py_str()) == b"exec")
        });
        if !asks_exec {
            let ask_text = ask.map_or(Cow::Borrowed(&b"None"[..]), Value::py_str);
            let declared: &[u8] = g.declared.as_deref().unwrap_or(b"None");
            let msg = cat(&[
                b"ask ",
                &ask_text,
                b" is an irreversible act under profile ",
                declared,
                b": the HO must ask rb=exec",
            ]);
            f.add(
                To::Problems,
                "rb-level",
                "record",
                msg,
                Some(b"rb"),
                Some(b"exec"),
                rb.and_then(shown).as_deref(),
            );
        }
        for k in exec {
            let in_record = record.iter().any(|(r, _)| *r == &k[..]);
            match flat.get(k) {
                Some(v) if !in_record => {
                    let s = v.show();
                    let msg = cat(&[k, b"=", &s, b" has no value in the record to check against"]);
                    f.add(
                        To::Notes,
                        "record-no-value",
                        "record",
                        msg,
                        Some(k),
                        None,
                        shown(v).as_deref(),
                    );
                }
                None if !in_record => {
                    let msg = cat(&[k, b" is in neither the HO nor the record; the receiver resolves it and the readback carries it"]);
                    f.add(
                        To::Notes,
                        "record-unresolved",
                        "record",
                        msg,
                        Some(k),
                        None,
                        None,
                    );
                }
                _ => {}
            }
        }
    }
    f
}

// ---------------------------------------------------------------- check 2: the readback, five tiers

fn route_text(from: &Value<'_>, to: &Value<'_>) -> Vec<u8> {
    cat(&[b"from=", &from.py_str(), b" to=", &to.py_str()])
}

/// Check 2: the readback (or a tool's statement) against the HO, five tiers plus expiry. `expect_acc` is the
/// sender's withheld criteria (tier 4); `now` the clock as `YYYYMMDDTHHMMZ`.
pub fn rb_check(
    ho: &Twin<'_>,
    rb: &Twin<'_>,
    g: &Grammar,
    expect_acc: Option<&[&[u8]]>,
    now: &[u8],
) -> Findings {
    let mut f = Findings::default();
    if ho.typ.as_deref() != Some(b"HO") {
        wrong_type(&mut f, b"first", ho, b"HO");
    }
    if rb.typ.as_deref() != Some(b"RB") {
        wrong_type(&mut f, b"second", rb, b"RB");
    }
    if !f.problems.is_empty() {
        return f;
    }
    let ho_id = Value::Text(Cow::Borrowed(text_of(&ho.id)));
    // tier 1, receipt
    let re = envelope(&rb.re);
    if !re.py_eq(&ho_id) {
        let msg = cat(&[
            b"tier1 receipt: RB re=",
            &re.py_str(),
            b" does not point at HO id ",
            &ho_id.py_str(),
        ]);
        f.add(
            To::Problems,
            "receipt-re",
            "receipt",
            msg,
            Some(b"re"),
            shown(&ho_id).as_deref(),
            shown(re).as_deref(),
        );
    }
    receipt_route(&mut f, ho, rb, b"tier1 receipt: RB", "receipt-route");
    // expiry
    let (h_exp, r_exp) = (ho.slot(b"exp"), rb.slot(b"exp"));
    if h_exp.is_some() || r_exp.is_some() {
        expiry(&mut f, h_exp.unwrap_or(&NONE), r_exp.unwrap_or(&NONE), now);
    }
    // tier 2, integrity
    if let Some(h) = rb.slot(b"h") {
        let want = canon::digest(ho);
        if !h.py_eq(&Value::text(want.as_bytes())) {
            let msg = cat(&[
                b"tier2 integrity: h=",
                &h.py_str(),
                b" but digest of the HO is ",
                want.as_bytes(),
            ]);
            f.add(
                To::Problems,
                "integrity-digest",
                "integrity",
                msg,
                Some(b"h"),
                Some(want.as_bytes()),
                shown(h).as_deref(),
            );
        }
    }
    // tier 3, echo
    let named: Vec<Vec<u8>> = ho
        .slot(b"rb")
        .map(|v| {
            v.items()
                .iter()
                .map(|x| pytext::lower(&x.py_str()))
                .collect()
        })
        .unwrap_or_default();
    let level = |l: &[u8]| named.iter().any(|x| &x[..] == l);
    let (ho_flat, rb_flat, keys): (Flat, Flat, Vec<&[u8]>) = if level(b"all") {
        let mut h = Flat::new();
        h.set(b"item", envelope(&ho.item));
        let h = h.slots(ho);
        let mut r = Flat::new();
        r.set(b"item", envelope(&rb.item));
        let r = r.slots(rb);
        let keys = h
            .pairs
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| !NOT_ALL.contains(k))
            .collect();
        (h, r, keys)
    } else {
        let (mut h, mut r) = (Flat::new().slots(ho), Flat::new().slots(rb));
        h.set(b"item", envelope(&ho.item));
        r.set(b"item", envelope(&rb.item));
        let others = named
            .iter()
            .map(|x| &x[..])
            .filter(|x| !RB_LEVELS.contains(x) && !DEFAULT_RB.contains(x));
        (h, r, DEFAULT_RB.iter().copied().chain(others).collect())
    };
    for k in keys {
        let Some(hv) = ho_flat.get(k) else { continue };
        match rb_flat.get(k) {
            None => {
                let msg = cat(&[
                    b"tier3 echo: RB does not echo ",
                    k,
                    b" (HO has ",
                    k,
                    b"=",
                    &hv.show(),
                    b")",
                ]);
                f.add(
                    To::Problems,
                    "echo-missing",
                    "echo",
                    msg,
                    Some(k),
                    shown(hv).as_deref(),
                    None,
                );
            }
            Some(rv) if !rv.py_eq(hv) => {
                mismatch(&mut f, "echo-mismatch", "echo", b"tier3 echo: ", k, hv, rv)
            }
            Some(_) => {}
        }
    }
    // tier 4, comprehension
    if level(b"acc") || level(b"plan") {
        comprehension(&mut f, ho, rb, g, expect_acc, level(b"plan"));
    }
    // tier 5, execution
    if level(b"exec") {
        let ask = ho
            .slot(b"ask")
            .filter(|a| a.truthy())
            .map(|a| a.py_str().into_owned())
            .unwrap_or_default();
        let exec = g.exec_map.get(&ask[..]).map_or(&[][..], |v| &v[..]);
        if exec.is_empty() {
            let shown_ask: &[u8] = if ask.is_empty() { b"?" } else { &ask };
            let msg = cat(&[
                b"tier5 execution: the profile names no execution slots for ask ",
                shown_ask,
                b"; nothing checked beyond the echo",
            ]);
            f.add(
                To::Notes,
                "exec-none",
                "execution",
                msg,
                Some(b"ask"),
                None,
                (!ask.is_empty()).then_some(&ask[..]),
            );
        }
        for k in exec {
            match (rb_flat.get(k), ho_flat.get(k)) {
                (None, hv) => {
                    let msg = cat(&[
                        b"tier5 execution: RB does not carry ",
                        k,
                        b", which the act needs",
                    ]);
                    f.add(
                        To::Problems,
                        "exec-missing",
                        "execution",
                        msg,
                        Some(k),
                        hv.and_then(shown).as_deref(),
                        None,
                    );
                }
                (Some(rv), Some(hv)) if !rv.py_eq(hv) => mismatch(
                    &mut f,
                    "exec-mismatch",
                    "execution",
                    b"tier5 execution: ",
                    k,
                    hv,
                    rv,
                ),
                _ => {}
            }
        }
    }
    f
}

/// A slot the readback holds with another value than the HO's.
fn mismatch(
    f: &mut Findings,
    code: &'static str,
    tier: &'static str,
    lead: &[u8],
    k: &[u8],
    hv: &Value<'_>,
    rv: &Value<'_>,
) {
    let msg = cat(&[
        lead,
        k,
        b" mismatch: HO ",
        &hv.show(),
        b" vs RB ",
        &rv.show(),
    ]);
    f.add(
        To::Problems,
        code,
        tier,
        msg,
        Some(k),
        shown(hv).as_deref(),
        shown(rv).as_deref(),
    );
}

/// The receipt's route: the reply travels from the HO's receiver to its sender.
fn receipt_route(
    f: &mut Findings,
    ho: &Twin<'_>,
    reply: &Twin<'_>,
    lead: &[u8],
    code: &'static str,
) {
    let (hf, ht, rf, rt) = (
        envelope(&ho.from),
        envelope(&ho.to),
        envelope(&reply.from),
        envelope(&reply.to),
    );
    if !rf.py_eq(ht) || !rt.py_eq(hf) {
        let msg = cat(&[
            lead,
            b" must come from ",
            &ht.py_str(),
            b" to ",
            &hf.py_str(),
            b"; got ",
            &route_text(rf, rt),
        ]);
        f.add(
            To::Problems,
            code,
            "receipt",
            msg,
            Some(b"from"),
            Some(&route_text(ht, hf)),
            Some(&route_text(rf, rt)),
        );
    }
}

/// `exp=` as a time the clock passed: (its text, whether it has passed).
fn expired<'v>(exp: &'v Value<'_>, now: &[u8]) -> (Cow<'v, [u8]>, bool) {
    let text = if exp.truthy() {
        exp.py_str()
    } else {
        Cow::Borrowed(&b""[..])
    };
    let passed = !text.is_empty() && now >= &text[..] && is_time(&text);
    (text, passed)
}

/// Expiry: a handoff or a prepared statement past its `exp=` cannot be confirmed, and a statement may not outlive
/// its handoff.
fn expiry(f: &mut Findings, h_exp: &Value<'_>, r_exp: &Value<'_>, now: &[u8]) {
    if expired(h_exp, now).1 {
        let msg = cat(&[
            b"expired: the HO expired at ",
            &h_exp.py_str(),
            b" (now ",
            now,
            b"); send a new HO from the record",
        ]);
        f.add(
            To::Problems,
            "expired-ho",
            "expiry",
            msg,
            Some(b"exp"),
            Some(now),
            shown(h_exp).as_deref(),
        );
    }
    if expired(r_exp, now).1 {
        let msg = cat(&[
            b"expired: the statement expired at ",
            &r_exp.py_str(),
            b" (now ",
            now,
            b"); prepare again",
        ]);
        f.add(
            To::Problems,
            "expired-rb",
            "expiry",
            msg,
            Some(b"exp"),
            Some(now),
            shown(r_exp).as_deref(),
        );
    }
    if h_exp.truthy() && r_exp.truthy() && r_exp.py_str() > h_exp.py_str() {
        let msg = cat(&[
            b"expired: the statement's exp=",
            &r_exp.py_str(),
            b" outlives the HO's exp=",
            &h_exp.py_str(),
        ]);
        f.add(
            To::Problems,
            "rb-outlives-ho",
            "expiry",
            msg,
            Some(b"exp"),
            shown(h_exp).as_deref(),
            shown(r_exp).as_deref(),
        );
    }
}

/// Tier 4: the receiver's criteria (`acc=`, `not=`) against the sender's (withheld, or the HO's `acc=`), and
/// `do=` under `rb=plan`.
fn comprehension(
    f: &mut Findings,
    ho: &Twin<'_>,
    rb: &Twin<'_>,
    g: &Grammar,
    expect_acc: Option<&[&[u8]]>,
    plan: bool,
) {
    let derived = rb.slot(b"acc").filter(|d| d.truthy());
    let ho_acc = ho.slot(b"acc").filter(|a| !matches!(a, Value::None));
    match derived {
        None => {
            let level: &[u8] = if plan { b"plan" } else { b"acc" };
            let msg = cat(&[
                b"tier4 comprehension: HO asked for rb=",
                level,
                b" but RB carries no acc=",
            ]);
            f.add(
                To::Problems,
                "acc-missing",
                "comprehension",
                msg,
                Some(b"acc"),
                None,
                None,
            );
        }
        Some(derived) => {
            let held = texts(ho_acc);
            let expected: Option<Vec<&[u8]>> = match expect_acc {
                Some(e) => Some(e.to_vec()),
                None => ho_acc.map(|_| refs(&held)),
            };
            match expected {
                None => {
                    let msg = b"tier4: no expected criteria supplied (withheld set missing and HO sent none); acc= recorded but not compared".to_vec();
                    f.add(
                        To::Notes,
                        "acc-not-compared",
                        "comprehension",
                        msg,
                        Some(b"acc"),
                        None,
                        shown(derived).as_deref(),
                    );
                }
                Some(expected) => {
                    let (d, k, n) = (
                        texts(Some(derived)),
                        texts(ho.slot(b"keys")),
                        texts(rb.slot(b"not")),
                    );
                    let (p4, n4) = compare(&expected, &refs(&d), &refs(&k), &refs(&n), &g.acc);
                    f.problems.extend(p4);
                    f.notes.extend(n4);
                }
            }
        }
    }
    if plan && !rb.slot(b"do").is_some_and(Value::truthy) {
        let msg = b"tier4 comprehension: rb=plan requires do= on the RB".to_vec();
        f.add(
            To::Problems,
            "plan-do-missing",
            "comprehension",
            msg,
            Some(b"do"),
            None,
            None,
        );
    }
    let not_list = rb.slot(b"not").map(Value::items).unwrap_or_default();
    if !not_list.is_empty() {
        let held = texts(ho_acc.filter(|a| a.truthy()));
        let source: Vec<&[u8]> = match expect_acc {
            Some(e) if !e.is_empty() => e.to_vec(),
            _ => refs(&held),
        };
        let must: Vec<Vec<u8>> = source
            .iter()
            .map(|t| split_constraint(t))
            .filter(|(k, _)| k == b"must")
            .map(|(_, v)| v)
            .collect();
        for t in not_list {
            let text = t.py_str();
            if must.iter().any(|v| g.acc.same_value(&text, v) == 1) {
                let msg = cat(&[
                    b"tier4 comprehension: receiver excludes ",
                    &text,
                    b" which the sender requires",
                ]);
                f.add(
                    To::Problems,
                    "acc-excluded",
                    "comprehension",
                    msg,
                    Some(b"not"),
                    None,
                    shown(t).as_deref(),
                );
            }
        }
    }
}

// ---------------------------------------------------------------- check 3: the done report

/// The type and receipt part of check 3: the findings, and whether the types let the check go on.
pub fn dn_receipt(ho: &Twin<'_>, dn: &Twin<'_>) -> (Findings, bool) {
    let mut f = Findings::default();
    if ho.typ.as_deref() != Some(b"HO") {
        wrong_type(&mut f, b"first", ho, b"HO");
    }
    if dn.typ.as_deref() != Some(b"DN") {
        wrong_type(&mut f, b"second", dn, b"DN");
    }
    if !f.problems.is_empty() {
        return (f, false);
    }
    let ho_id = Value::Text(Cow::Borrowed(text_of(&ho.id)));
    let re = envelope(&dn.re);
    if !re.py_eq(&ho_id) {
        let msg = cat(&[
            b"receipt: DN re=",
            &re.py_str(),
            b" does not point at HO id ",
            &ho_id.py_str(),
        ]);
        f.add(
            To::Problems,
            "dn-receipt-re",
            "receipt",
            msg,
            Some(b"re"),
            shown(&ho_id).as_deref(),
            shown(re).as_deref(),
        );
    }
    receipt_route(&mut f, ho, dn, b"receipt: DN", "dn-receipt-route");
    let (hi, di) = (envelope(&ho.item), envelope(&dn.item));
    if !di.py_eq(hi) {
        let msg = cat(&[
            b"receipt: DN item ",
            &di.py_str(),
            b" is not the HO's ",
            &hi.py_str(),
        ]);
        f.add(
            To::Problems,
            "dn-item",
            "receipt",
            msg,
            Some(b"item"),
            shown(hi).as_deref(),
            shown(di).as_deref(),
        );
    }
    (f, true)
}

/// Check 3, after the act: the DN answers the HO and carries every execution slot with the value the plan held.
/// `plan_rb` is a readback the caller vouches passed; its slots, less the RB's own, join the plan.
pub fn dn_check(ho: &Twin<'_>, dn: &Twin<'_>, g: &Grammar, plan_rb: Option<&Twin<'_>>) -> Findings {
    let (mut f, go_on) = dn_receipt(ho, dn);
    if !go_on {
        return f;
    }
    // the plan: the HO's slots (less rb acc keys p), joined by a passing readback's (less its own)
    let mut plan = Flat::new();
    for (k, v) in ho.slots.iter().filter(|(k, _)| !NOT_PLAN.contains(&&k[..])) {
        plan.set(k, v);
    }
    for (k, v) in plan_rb
        .map(|rb| &rb.slots[..])
        .unwrap_or_default()
        .iter()
        .filter(|(k, _)| !RB_OWN.contains(&&k[..]))
    {
        plan.set(k, v);
    }
    let done = Flat::new().slots(dn);
    let ask = ho.slot(b"ask");
    let exec = exec_slots(g, ask);
    let out = done.get(b"out");
    let out_is = |s: &[u8]| out.is_some_and(|o| o.py_eq(&Value::text(s)));
    let keys: Vec<&[u8]> = if exec.is_empty() {
        let shown_ask = match ask.filter(|a| a.truthy()) {
            Some(a) => a.py_str(),
            None => Cow::Borrowed(&b"?"[..]),
        };
        let msg = cat(&[
            b"the profile names no execution slots for ask ",
            &shown_ask,
            b"; only the slots the DN carries are compared",
        ]);
        f.add(
            To::Notes,
            "dn-no-exec",
            "executed",
            msg,
            Some(b"ask"),
            None,
            ask.and_then(shown).as_deref(),
        );
        done.pairs
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| plan.get(k).is_some())
            .collect()
    } else {
        exec.iter().map(|k| &k[..]).collect()
    };
    for k in keys {
        match (done.get(k), plan.get(k)) {
            (None, planned) => {
                if out_is(b"OK") {
                    let msg = cat(&[b"executed: DN does not carry ", k, b", which the act used"]);
                    f.add(
                        To::Problems,
                        "dn-missing",
                        "executed",
                        msg,
                        Some(k),
                        planned.and_then(shown).as_deref(),
                        None,
                    );
                } else if out_is(b"PARTIAL") {
                    let msg = cat(&[b"executed: DN does not carry ", k]);
                    f.add(
                        To::Notes,
                        "dn-partial-missing",
                        "executed",
                        msg,
                        Some(k),
                        planned.and_then(shown).as_deref(),
                        None,
                    );
                }
            }
            (Some(d), Some(p)) => {
                if !p.py_eq(d) {
                    let msg = cat(&[
                        b"executed: ",
                        k,
                        b" mismatch: plan ",
                        &p.show(),
                        b" vs DN ",
                        &d.show(),
                    ]);
                    f.add(
                        To::Problems,
                        "dn-mismatch",
                        "executed",
                        msg,
                        Some(k),
                        shown(p).as_deref(),
                        shown(d).as_deref(),
                    );
                }
            }
            (Some(d), None) => {
                let msg = cat(&[b"executed: ", k, b"=", &d.show(), b" was resolved by the receiver and is not in the plan; check it against the record"]);
                f.add(
                    To::Notes,
                    "dn-resolved",
                    "executed",
                    msg,
                    Some(k),
                    None,
                    shown(d).as_deref(),
                );
            }
        }
    }
    if out_is(b"NOOP") && exec.iter().any(|k| done.get(k).is_some()) {
        let msg = b"out=NOOP but the DN carries execution values".to_vec();
        f.add(
            To::Notes,
            "dn-noop-values",
            "executed",
            msg,
            Some(b"out"),
            None,
            out.and_then(shown).as_deref(),
        );
    }
    f
}

// ---------------------------------------------------------------- the checks of lines (the reference's functions)

/// An invalid line's parse errors as a check's problems (the reference's `ho-invalid`, `rb-invalid`,
/// `dn-invalid`): "<label>: <the parser's message>", the slot, and the parse code as what was got.
pub fn invalid_line(label: &[u8], code: &'static str, errors: &[Problem]) -> Vec<Problem> {
    errors
        .iter()
        .map(|e| Problem {
            code,
            tier: "form",
            message: cat(&[label, b": ", &e.message]),
            slot: e.slot.clone(),
            expected: None,
            got: Some(e.code.as_bytes().to_vec()),
        })
        .collect()
}

/// Check 3 with the readback that made the plan given as a line, parsed (`check_dn(ho, dn, rb_line=...)`): the
/// readback joins the plan only if it passes check 2 at `now`. One that is invalid, is not an RB or fails is a
/// problem of its own after the receipt's (`rb-invalid`, `wrong-type`, `rb-not-plan`: the readback's first
/// problem), and the plan is not checked.
pub fn dn_check_planned(
    ho: &Twin<'_>,
    dn: &Twin<'_>,
    g: &Grammar,
    rb: &crate::Parsed<'_>,
    now: &[u8],
) -> Findings {
    let (receipt, go_on) = dn_receipt(ho, dn);
    let mut f = Findings {
        problems: receipt.problems,
        notes: Vec::new(),
    };
    if !go_on {
        return f;
    }
    if !rb.errors.is_empty() {
        f.problems
            .extend(invalid_line(b"RB", "rb-invalid", &rb.errors));
        return f;
    }
    let t = &rb.twin;
    if t.typ.as_deref() != Some(b"RB") {
        let got = text_of(&t.typ);
        let msg = cat(&[b"third line is ", got, b", expected RB"]);
        f.problems.push(Problem::new(
            "wrong-type",
            "form",
            msg,
            None,
            Some(b"RB"),
            Some(got),
        ));
        return f;
    }
    let failed = rb_check(ho, t, g, None, now);
    if let Some(first) = failed.problems.first() {
        let msg = cat(&[
            b"the readback did not pass the sender's check, so it is not the plan: ",
            &first.message,
        ]);
        f.problems.push(Problem {
            code: "rb-not-plan",
            tier: "executed",
            message: msg,
            slot: first.slot.clone(),
            expected: None,
            got: Some(first.code.as_bytes().to_vec()),
        });
        return f;
    }
    dn_check(ho, dn, g, Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Vocabulary;
    use crate::parse::{parse, Parsed};
    use proptest::prelude::*;
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
            ("acc", "list:token"),
            ("not", "list:token"),
            ("out", "enum:out"),
        ];
        let all: Vec<Box<[u8]>> = slots.iter().map(|(k, _)| b(k)).collect();
        let ty =
            |code: &str, req: &[&str]| (b(code), req.iter().map(|s| b(s)).collect(), all.clone());
        Grammar::new(Vocabulary {
            types: vec![
                ty("HO", &["from", "to", "ask"]),
                ty("RB", &["re", "from", "to"]),
                ty("DN", &["re", "from", "to", "out"]),
            ],
            slots: slots.iter().map(|(k, t)| (b(k), b(t))).collect(),
            enums: vec![
                (b("ask"), vec![b("PAY")]),
                (b("out"), vec![b("OK"), b("PARTIAL"), b("NOOP")]),
            ],
            tail_max: 300,
            exec: vec![(b("PAY"), vec![b("amt")])],
            constraint_keys: vec![b("must"), b("no")],
            constraint_set_keys: vec![b("must"), b("no")],
            ..Vocabulary::default()
        })
        .unwrap_or_else(|e| panic!("{}", String::from_utf8_lossy(&e)))
    }

    fn read<'a>(line: &'a str, g: &Grammar) -> Parsed<'a> {
        let p = parse(line.as_bytes(), g, |_| Err::<Arc<Grammar>, _>(Vec::new()));
        assert!(p.errors.is_empty(), "{line}: {:?}", p.errors);
        p
    }

    fn codes(f: &Findings) -> Vec<&'static str> {
        f.problems.iter().chain(&f.notes).map(|p| p.code).collect()
    }

    #[test]
    fn a_readback_is_held_to_its_handoff() {
        let g = grammar();
        let ho = read(
            "RW1 HO a-1 from=a to=b item=i:1 ask=PAY amt=5.00 rb=exec exp=20261013T1100Z",
            &g,
        );
        let h = canon::digest(&ho.twin);
        let good = format!("RW1 RB b-1 re=a-1 from=b to=a item=i:1 ask=PAY amt=5.00 h={h}");
        assert!(codes(&rb_check(
            &ho.twin,
            &read(&good, &g).twin,
            &g,
            None,
            b"20261012T1000Z"
        ))
        .is_empty());
        let bad = "RW1 RB b-2 re=a-1 from=b to=a item=i:1 ask=PAY amt=6.00 h=000000000000";
        let f = rb_check(&ho.twin, &read(bad, &g).twin, &g, None, b"20261014T1000Z");
        assert_eq!(
            codes(&f),
            ["expired-ho", "integrity-digest", "exec-mismatch"]
        );
        assert_eq!(
            f.problems[2].message,
            b"tier5 execution: amt mismatch: HO 5.00 vs RB 6.00"
        );
    }

    #[test]
    fn a_done_report_is_held_to_the_plan() {
        let g = grammar();
        let ho = read("RW1 HO a-1 from=a to=b item=i:1 ask=PAY amt=5.00", &g);
        let dn = read("RW1 DN b-2 re=a-1 from=b to=a item=i:1 out=OK", &g);
        let f = dn_check(&ho.twin, &dn.twin, &g, None);
        assert_eq!(codes(&f), ["dn-missing"]);
        assert_eq!(f.problems[0].expected.as_deref(), Some(&b"5.00"[..]));
        let f = ho_check(&ho.twin, &[(b"amt", b"5.00"), (b"to", b"c")], &g);
        assert_eq!(codes(&f), ["record-mismatch", "rb-level"]);
    }

    #[test]
    fn a_plan_readback_given_as_a_line_joins_the_plan_only_when_it_passes() {
        let g = grammar();
        let none = |_: &[u8]| Err::<Arc<Grammar>, _>(Vec::new());
        let ho = read(
            "RW1 HO a-1 from=a to=b item=i:1 ask=PAY amt=5.00 rb=exec",
            &g,
        );
        let dn = read("RW1 DN b-2 re=a-1 from=b to=a item=i:1 out=OK amt=5.00", &g);
        let h = canon::digest(&ho.twin);
        let now = b"20261012T1000Z";
        let good = format!("RW1 RB b-1 re=a-1 from=b to=a item=i:1 ask=PAY amt=5.00 h={h}");
        let planned = dn_check_planned(&ho.twin, &dn.twin, &g, &read(&good, &g), now);
        assert_eq!(
            codes(&planned),
            codes(&dn_check(
                &ho.twin,
                &dn.twin,
                &g,
                Some(&read(&good, &g).twin)
            ))
        );
        let wrong = format!("RW1 RB b-1 re=a-1 from=b to=a item=i:1 ask=PAY amt=6.00 h={h}");
        let f = dn_check_planned(&ho.twin, &dn.twin, &g, &read(&wrong, &g), now);
        assert_eq!(codes(&f), ["rb-not-plan"]);
        assert!(f.problems[0]
            .message
            .starts_with(b"the readback did not pass the sender's check"));
        let f = dn_check_planned(
            &ho.twin,
            &dn.twin,
            &g,
            &read("RW1 DN b-3 re=a-1 from=b to=a out=OK", &g),
            now,
        );
        assert_eq!(codes(&f), ["wrong-type"]);
        assert_eq!(f.problems[0].message, b"third line is DN, expected RB");
        let broken = parse(b"RW1 RB b-1 re=a-1 from=b", &g, none);
        let f = dn_check_planned(&ho.twin, &dn.twin, &g, &broken, now);
        assert!(!broken.errors.is_empty());
        assert!(
            codes(&f).iter().all(|c| *c == "rb-invalid"),
            "{:?}",
            codes(&f)
        );
        assert!(f.problems[0].message.starts_with(b"RB: "));
        assert_eq!(
            f.problems[0].got.as_deref(),
            Some(broken.errors[0].code.as_bytes())
        );
        // a receipt that fails is a problem, and the readback is still read; a line of the wrong type stops it
        let other = read("RW1 DN b-2 re=a-9 from=b to=a item=i:1 out=OK amt=5.00", &g);
        let f = dn_check_planned(&ho.twin, &other.twin, &g, &broken, now);
        assert_eq!(codes(&f)[..2], ["dn-receipt-re", "rb-invalid"]);
        let f = dn_check_planned(&ho.twin, &ho.twin, &g, &broken, now);
        assert_eq!(codes(&f), ["wrong-type"]);
    }

    proptest! {
        #[test]
        fn any_lines_checked_against_each_other_never_panic(
            a in "RW1 (HO|RB|DN) [ab]-[0-9]( (re|from|to|item|ask|amt|rb|h|exp|acc|not|out)=[A-Za-z0-9.:+-]{1,6}){0,8}",
            b in "RW1 (HO|RB|DN) [ab]-[0-9]( (re|from|to|item|ask|amt|rb|h|exp|acc|not|out)=[A-Za-z0-9.:+-]{1,6}){0,8}",
        ) {
            let g = grammar();
            let none = |_: &[u8]| Err::<Arc<Grammar>, _>(Vec::new());
            let (x, y) = (parse(a.as_bytes(), &g, none), parse(b.as_bytes(), &g, none));
            let _ = ho_check(&x.twin, &[(b"amt", b"1.00")], &g);
            let _ = rb_check(&x.twin, &y.twin, &g, Some(&[b"must:x"]), b"20261012T1000Z");
            let _ = dn_check(&x.twin, &y.twin, &g, Some(&y.twin));
            prop_assert!(canon::digest(&x.twin).len() == 12);
        }
    }
}
