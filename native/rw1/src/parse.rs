//! The parser: one RW1 line to its JSON twin and its findings. It never fails on a line: everything it finds is a
//! [`Problem`] with a stable code and the reference's wording, in the reference's order (the tokens' form, the
//! `p=` switch, the values in token order, the required slots, then the rules over the whole line).
//!
//! The parser borrows the line: every string in the twin is a slice of it.

use std::borrow::Cow;
use std::sync::Arc;

use crate::grammar::{Check, Envelope, Grammar, Slot, SlotSet, TypeDef, Validator, Whole};
use crate::problem::cat;
pub use crate::problem::Problem;
use crate::pytext;
pub use crate::value::Value;

/// The protocol's version token.
pub const VERSION: &[u8] = b"RW1";

/// A line's JSON twin: what the parser decoded, as far as it got.
#[derive(Debug, Default, Clone)]
pub struct Twin<'a> {
    pub v: Option<Cow<'a, [u8]>>,
    pub typ: Option<Cow<'a, [u8]>>,
    pub id: Option<Cow<'a, [u8]>>,
    pub re: Option<Value<'a>>,
    pub from: Option<Value<'a>>,
    pub to: Option<Value<'a>>,
    pub item: Option<Value<'a>>,
    /// every other slot, in the order the twin holds them
    pub slots: Vec<(Cow<'a, [u8]>, Value<'a>)>,
    pub tail: Option<Cow<'a, [u8]>>,
}

impl<'a> Twin<'a> {
    /// A slot's value (the last of that key, as a dict built from the slots holds it).
    pub fn slot(&self, key: &[u8]) -> Option<&Value<'a>> {
        self.slots
            .iter()
            .rev()
            .find(|(k, _)| &k[..] == key)
            .map(|(_, v)| v)
    }
}

/// What a parse gives: the twin, the errors (any: the line is invalid), the warnings, and the grammar a `p=` slot
/// switched to (None: the one given validated the line).
#[derive(Debug)]
pub struct Parsed<'a> {
    pub twin: Twin<'a>,
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
    pub switched: Option<Arc<Grammar>>,
}

/// Parse `line` under `grammar`. Under the bare core a `p=` slot names the profile that validates the line:
/// `switch` finds it (or says, in the reference's words, why it cannot).
pub fn parse<'a, F>(line: &'a [u8], grammar: &Grammar, switch: F) -> Parsed<'a>
where
    F: FnOnce(&[u8]) -> Result<Arc<Grammar>, Vec<u8>>,
{
    let mut p = Parser {
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let mut twin = Twin::default();
    let mut line = line;
    while let [rest @ .., b'\n'] = line {
        line = rest;
    }
    let stripped = pytext::strip(line);
    if stripped.len() != line.len() {
        p.warn(
            "whitespace",
            b"leading or trailing whitespace".to_vec(),
            None,
            None,
        );
        line = stripped;
    }
    if let Some(cut) = tail_separator(line) {
        twin.tail = Some(Cow::Borrowed(&line[cut + 4..]));
        line = &line[..cut];
    } else if let Some(head) = line.strip_suffix(b" //") {
        twin.tail = Some(Cow::Borrowed(b""));
        line = head;
    }
    let mut toks: Vec<&[u8]> = split_spaces(line);
    if toks.iter().any(|t| t.is_empty()) {
        p.warn(
            "multiple-spaces",
            b"multiple consecutive spaces; separators are single spaces".to_vec(),
            None,
            None,
        );
        toks.retain(|t| !t.is_empty());
    }
    let done = |twin, p: Parser| Parsed {
        twin,
        errors: p.errors,
        warnings: p.warnings,
        switched: None,
    };
    let [v, mtype, mid, ref rest @ ..] = toks[..] else {
        p.error(
            "too-short",
            b"a message needs at least: RW1 <TYPE> <id>".to_vec(),
            None,
            None,
        );
        return done(twin, p);
    };
    (twin.v, twin.typ, twin.id) = (
        Some(Cow::Borrowed(v)),
        Some(Cow::Borrowed(mtype)),
        Some(Cow::Borrowed(mid)),
    );
    if v != VERSION {
        let msg = cat(&[
            b"version token ",
            &repr(v),
            b" is not RW1 (rule 2: reply UN why=VER)",
        ]);
        p.error("bad-version", msg, None, Some(v));
        return done(twin, p);
    }
    let Some(mut tdef) = grammar.typedef(mtype) else {
        let types: Vec<&[u8]> = grammar.types.iter().map(|t| &t.code[..]).collect();
        let msg = cat(&[
            b"type ",
            &repr(mtype),
            b" unknown; types are ",
            &types.join(&b' '),
            b" (rule 2: reply UN why=UNK)",
        ]);
        p.error("unknown-type", msg, None, Some(mtype));
        return done(twin, p);
    };
    if !is_id(mid) {
        p.error(
            "bad-id",
            cat(&[b"id ", &repr(mid), b" must match [A-Za-z0-9._-]+"]),
            None,
            Some(mid),
        );
    }
    // findings about the values come after the form's and the p= switch's: collected apart, joined below
    let mut values = Parser {
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let two_pass = grammar.declared.is_none() && find(line, b" p=").is_some();
    // the line's key=value tokens in order (a duplicate or an empty value left out), the grammar's slots among
    // them as a set (keys it does not know are looked for by name: there are seldom any)
    let mut seen: Vec<Seen<'_, '_>> = Vec::with_capacity(rest.len());
    let mut has = SlotSet::of_size(grammar.slots.len());
    twin.slots.reserve(rest.len());
    for &tok in rest {
        let Some(eq) = tok.iter().position(|&b| b == b'=') else {
            // a short token: no SIMD set-up
            let msg = cat(&[
                &repr(tok),
                b": expected key=value (positional slots are only RW1, TYPE and id)",
            ]);
            p.error("not-key-value", msg, None, Some(tok));
            continue;
        };
        let (k, val) = (&tok[..eq], &tok[eq + 1..]);
        let slot = grammar.slots.get(k);
        if slot.is_none() && !is_key(k) {
            p.error(
                "bad-key",
                cat(&[b"key ", &repr(k), b" must be lowercase [a-z][a-z0-9_]*"]),
                None,
                Some(k),
            );
            continue;
        }
        let again = match slot {
            Some(s) => has.contains(s.index),
            None => seen.iter().any(|s| s.slot.is_none() && s.key == k),
        };
        if again {
            p.error(
                "duplicate-key",
                cat(&[b"duplicate key ", k]),
                Some(k),
                Some(val),
            );
            continue;
        }
        if val.is_empty() {
            p.error(
                "empty-value",
                cat(&[k, b"= has an empty value; omit the slot instead"]),
                Some(k),
                None,
            );
            continue;
        }
        if let Some(s) = slot {
            has.insert(s.index);
        }
        seen.push(Seen {
            key: k,
            value: val,
            slot,
        });
        if !two_pass {
            values.decode(&mut twin, tdef, grammar, slot, k, val);
        }
    }
    let mut switched = None;
    if let Some(pv) = seen.iter().find(|s| s.key == b"p").map(|s| s.value) {
        match &grammar.declared {
            Some(declared) if &declared[..] != pv => {
                let msg = cat(&[
                    b"message names profile p=",
                    pv,
                    b" but validation used profile ",
                    declared,
                ]);
                p.warn("profile-mismatch", msg, Some(b"p"), Some(pv));
            }
            Some(_) => {}
            None => match switch(pv) {
                Err(msg) => p.error("unknown-profile", msg, Some(b"p"), Some(pv)),
                Ok(g) => switched = Some(g),
            },
        }
    }
    let used: &Grammar = switched.as_deref().unwrap_or(grammar);
    if switched.is_some() {
        tdef = used.typedef(mtype).unwrap_or(tdef);
    }
    if two_pass {
        for s in &seen {
            // the profile switched to has slots of its own: the keys are looked up in it
            values.decode(&mut twin, tdef, used, used.slots.get(s.key), s.key, s.value);
        }
    }
    p.errors.append(&mut values.errors);
    p.warnings.append(&mut values.warnings);
    // the required slots, by the set when the grammar that found the keys is the type's (with no switch, or a
    // switch the set was not made for: then by name)
    let by_set = switched.is_none();
    for (k, at) in tdef.required.iter().zip(&tdef.required_at) {
        let present = match at {
            Some(i) if by_set => has.contains(*i),
            _ => seen.iter().any(|s| s.key == &k[..]),
        };
        if !present {
            p.error(
                "missing-slot",
                cat(&[mtype, b" requires ", k]),
                Some(k),
                None,
            );
        }
    }
    let from = twin.from.as_ref().and_then(Value::as_text);
    let to = twin.to.as_ref().and_then(Value::as_text);
    line_rules(
        &mut p,
        used,
        &seen,
        mtype,
        mid,
        from,
        to,
        twin.tail.as_deref(),
    );
    Parsed {
        twin,
        errors: p.errors,
        warnings: p.warnings,
        switched,
    }
}

/// The rules over the whole line, after the slots (`seen`: the raw values by key): AQ opts, AN tail, from and
/// to, the id rule, the closed answer vocabulary, the tail's length.
#[allow(clippy::too_many_arguments)]
fn line_rules(
    p: &mut Parser,
    g: &Grammar,
    seen: &[Seen<'_, '_>],
    mtype: &[u8],
    mid: &[u8],
    from: Option<&[u8]>,
    to: Option<&[u8]>,
    tail: Option<&[u8]>,
) {
    let get = |key: &[u8]| seen.iter().find(|s| s.key == key).map(|s| s.value);
    let enum_question = mtype == b"AQ" && get(b"need") == Some(b"ENUM");
    if enum_question {
        if get(b"opts").is_none() {
            p.error(
                "missing-slot",
                b"AQ with need=ENUM requires opts".to_vec(),
                Some(b"opts"),
                None,
            );
        }
    } else if mtype == b"AN" && get(b"val") == Some(b"tail") && tail.is_none_or(<[u8]>::is_empty) {
        p.error(
            "tail-required",
            b"AN with val=tail needs a tail".to_vec(),
            Some(b"val"),
            Some(b"tail"),
        );
    }
    if let Some(frm) = from.filter(|f| !f.is_empty()) {
        if Some(frm) == to {
            p.warn(
                "same-agent",
                b"from and to are the same agent".to_vec(),
                Some(b"to"),
                Some(frm),
            );
        }
        if !id_fits(mid, frm) {
            let msg = cat(&[
                b"id ",
                &repr(mid),
                b" must be <from>-<n>: ",
                frm,
                b"-1, ",
                frm,
                b"-2, ... unique in the conversation",
            ]);
            p.error("id-shape", msg, None, Some(mid));
        }
    }
    if let Some((ans, ans_text)) = &g.ans {
        if enum_question {
            for o in get(b"opts").unwrap_or_default().split(|&b| b == b'+') {
                if !o.is_empty() && !ans.contains(o) {
                    let msg = cat(&[
                        b"opts=",
                        o,
                        b": not in the profile's answer vocabulary ",
                        ans_text,
                        b" (do not invent options)",
                    ]);
                    p.error("not-in-answer-vocabulary", msg, Some(b"opts"), Some(o));
                }
            }
        } else if mtype == b"AN" {
            if let Some(val) = get(b"val") {
                let passes = matches!(val, b"tail" | b"Y" | b"N")
                    || is_answer_number(val)
                    || ans.contains(val);
                if !passes {
                    let msg = cat(&[
                        b"val=",
                        val,
                        b": not in the profile's answer vocabulary ",
                        ans_text,
                    ]);
                    p.error("not-in-answer-vocabulary", msg, Some(b"val"), Some(val));
                }
            }
        }
    }
    if let Some(tail) = tail {
        let n = pytext::char_len(tail);
        if n > g.tail_max {
            let (n, max) = (n.to_string(), g.tail_max.to_string());
            let msg = cat(&[
                b"tail is ",
                n.as_bytes(),
                b" characters; limit is ",
                max.as_bytes(),
                b" (rule 4: move it to an artifact and reference with art=)",
            ]);
            p.error("tail-too-long", msg, None, Some(n.as_bytes()));
        }
    }
}

/// One `key=value` of a line, kept for the rules over the whole line: the key, the value as written, and the slot
/// of the grammar that parsed it (None: a key it does not declare).
struct Seen<'a, 'g> {
    key: &'a [u8],
    value: &'a [u8],
    slot: Option<&'g Slot>,
}

/// The findings of one list, and how they are made.
struct Parser {
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl Parser {
    fn error(
        &mut self,
        code: &'static str,
        message: Vec<u8>,
        slot: Option<&[u8]>,
        got: Option<&[u8]>,
    ) {
        self.errors.push(problem(code, message, slot, None, got));
    }

    fn warn(
        &mut self,
        code: &'static str,
        message: Vec<u8>,
        slot: Option<&[u8]>,
        got: Option<&[u8]>,
    ) {
        self.warnings.push(problem(code, message, slot, None, got));
    }

    /// One `key=value` of a line of type `tdef`, its slot in `g` looked up: an unknown key kept (`x_`) or warned
    /// about, a known one decoded into the twin (its findings in these lists).
    fn decode<'a>(
        &mut self,
        twin: &mut Twin<'a>,
        tdef: &TypeDef,
        g: &Grammar,
        slot: Option<&Slot>,
        k: &'a [u8],
        val: &'a [u8],
    ) {
        let Some(slot) = slot else {
            if k.starts_with(b"x_") {
                twin.slots.push((Cow::Borrowed(k), Value::text(val)));
            } else {
                let msg = cat(&[
                    b"unknown key ",
                    &repr(k),
                    b" ignored (extension keys start with x_)",
                ]);
                self.warn("unknown-key", msg, Some(k), Some(val));
            }
            return;
        };
        if !tdef.allowed.contains(slot.index) {
            let msg = cat(&[b"slot ", k, b" is not defined for type ", &tdef.code]);
            self.warn("slot-not-for-type", msg, Some(k), Some(val));
        }
        let decoded = match slot.validator.check {
            Check::Text => Value::text(val), // most slots: no call for a value taken as written
            _ => self.check(&slot.validator, val, g),
        };
        match slot.envelope {
            Some(Envelope::Re) => twin.re = Some(decoded),
            Some(Envelope::From) => twin.from = Some(decoded),
            Some(Envelope::To) => twin.to = Some(decoded),
            Some(Envelope::Item) => twin.item = Some(decoded),
            None => twin.slots.push((Cow::Borrowed(k), decoded)),
        }
    }

    /// A value decoded and checked by its slot's validator; a value that does not decode stays as written.
    fn check<'a>(&mut self, v: &Validator, raw: &'a [u8], g: &Grammar) -> Value<'a> {
        let key = &v.key[..];
        let bad = |p: &mut Parser, code: &'static str, parts: &[&[u8]]| {
            let mut msg = cat(&[key, b"=", raw]);
            for part in parts {
                msg.extend_from_slice(part);
            }
            p.errors
                .push(problem(code, msg, Some(key), Some(&v.typ), Some(raw)));
        };
        match &v.check {
            Check::Text => {}
            Check::List(inner) => {
                let items = raw
                    .split(|&b| b == b'+')
                    .filter(|x| !x.is_empty())
                    .map(|x| self.check(inner, x, g));
                return Value::List(items.collect());
            }
            Check::Enum { name, codes } => {
                if !codes.contains(raw) {
                    bad(
                        self,
                        "unknown-code",
                        &[
                            b": not a known ",
                            name,
                            b" code (rule 2: reply UN why=UNK, do not guess)",
                        ],
                    );
                }
            }
            Check::Int {
                lo,
                hi,
                lo_text,
                hi_text,
            } => {
                let (negative, digits) = match raw.strip_prefix(b"-") {
                    Some(d) => (true, d),
                    None => (false, raw),
                };
                if !pytext::is_decimal(digits) {
                    bad(self, "bad-int", &[b": expected an integer"]);
                    return Value::text(raw);
                }
                let out_of_range: &[&[u8]] = &[b": out of range ", lo_text, b"-", hi_text];
                if too_many_digits(digits, g) {
                    bad(self, "out-of-range", out_of_range);
                    return Value::text(raw);
                }
                let n = Whole::from_digits(negative, digits).unwrap_or_else(|| Whole {
                    negative,
                    digits: "0".into(),
                });
                if n < *lo || n > *hi {
                    bad(self, "out-of-range", out_of_range);
                }
                return whole_value(n);
            }
            Check::Date => {
                if !dated(raw, false) {
                    bad(self, "bad-date", &[b": dates are YYYYMMDD"]);
                }
            }
            Check::Time => {
                if !dated(raw, true) {
                    bad(
                        self,
                        "bad-time",
                        &[b": times are YYYYMMDDTHHMMZ in UTC, e.g. 20261002T1405Z"],
                    );
                }
            }
            Check::Money => {
                if !is_money(raw) {
                    bad(self, "bad-money", &[b": money is digits with exactly two decimals, no separators, e.g. 5400.00"]);
                }
            }
            Check::Num => {
                if !is_num(raw) {
                    bad(
                        self,
                        "bad-num",
                        &[b": num is a number as written (7.2, 148/88), no units, no separators"],
                    );
                }
            }
            Check::Days => {
                let digits = raw.strip_suffix(b"d").unwrap_or(raw);
                let message: &[&[u8]] = &[b": expected a number of days, e.g. 14 or 14d"];
                if !pytext::is_decimal(digits) || too_many_digits(digits, g) {
                    bad(self, "bad-days", message);
                    return Value::text(raw);
                }
                return whole_value(Whole::from_digits(false, digits).unwrap_or_else(|| Whole {
                    negative: false,
                    digits: "0".into(),
                }));
            }
            Check::Bool => match raw {
                b"Y" => return Value::Bool(true),
                b"N" => return Value::Bool(false),
                _ => bad(self, "bad-bool", &[b": booleans are Y or N"]),
            },
            Check::Id { agents } => {
                if !is_id(raw) {
                    bad(self, "bad-agent", &[b": must match [A-Za-z0-9._-]+"]);
                }
                if let Some(agents) = agents {
                    if !agents.contains(raw) {
                        let name: &[u8] = g.declared.as_deref().unwrap_or(b"None");
                        bad(
                            self,
                            "unknown-agent",
                            &[b": not an agent named in profile ", name],
                        );
                    }
                }
            }
            Check::Unknown => {
                let msg = cat(&[key, b": unknown slot type ", &v.typ, b" in spec"]);
                self.errors.push(problem(
                    "bad-slot-type",
                    msg,
                    Some(key),
                    Some(&v.typ),
                    Some(raw),
                ));
            }
        }
        Value::text(raw)
    }
}

fn problem(
    code: &'static str,
    message: Vec<u8>,
    slot: Option<&[u8]>,
    expected: Option<&[u8]>,
    got: Option<&[u8]>,
) -> Problem {
    Problem::new(code, "form", message, slot, expected, got)
}

fn whole_value(n: Whole) -> Value<'static> {
    match n.to_i64() {
        Some(i) => Value::Int(i),
        None => Value::BigInt(if n.negative {
            format!("-{}", n.digits)
        } else {
            n.digits
        }),
    }
}

/// Whether `int()` refuses these digits for their number (`sys.get_int_max_str_digits()`).
fn too_many_digits(digits: &[u8], g: &Grammar) -> bool {
    g.int_max_digits > 0 && pytext::char_len(digits) > g.int_max_digits
}

fn repr(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    pytext::repr(s, &mut out);
    out
}

/// Where `needle` first occurs in `hay` (memchr's SIMD search: a line was scanned a byte at a time for its ` // `).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// Where the tail's separator ` // ` first occurs in `line` (the parser's cut, and the gate's): its searcher made
/// once (making one was a tenth of a line's parse).
pub fn tail_separator(line: &[u8]) -> Option<usize> {
    static TAIL: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b" // "));
    TAIL.find(line)
}

/// The line's tokens between single spaces, empty ones included (`split(' ')`), found with memchr.
fn split_spaces(line: &[u8]) -> Vec<&[u8]> {
    let mut toks = Vec::with_capacity(32);
    let mut start = 0;
    for at in memchr::memchr_iter(b' ', line) {
        toks.push(&line[start..at]);
        start = at + 1;
    }
    toks.push(&line[start..]);
    toks
}

/// `s` without the one newline a regex's `$` lets end it.
fn before_dollar(s: &[u8]) -> &[u8] {
    s.strip_suffix(b"\n").unwrap_or(s)
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// `^[A-Za-z0-9._-]+$`: an id, an agent, a message id.
pub fn is_id(s: &[u8]) -> bool {
    let s = before_dollar(s);
    !s.is_empty() && s.iter().all(|&b| is_id_byte(b))
}

/// `^[a-z][a-z0-9_]*$`: a key.
fn is_key(s: &[u8]) -> bool {
    match before_dollar(s) {
        [first, rest @ ..] => {
            first.is_ascii_lowercase()
                && rest
                    .iter()
                    .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        }
        [] => false,
    }
}

/// The id rule: an id is `<from>-<n>`.
fn id_fits(mid: &[u8], frm: &[u8]) -> bool {
    mid.strip_prefix(frm)
        .and_then(|r| r.strip_prefix(b"-"))
        .is_some_and(pytext::is_decimal)
}

/// `^\d{8}T\d{4}Z$`: a time as the protocol writes it (`exp=`).
pub fn is_time(s: &[u8]) -> bool {
    dated(s, true)
}

/// `^\d{8}$`, or with `time` `^\d{8}T\d{4}Z$`.
fn dated(s: &[u8], time: bool) -> bool {
    let s = before_dollar(s);
    let mut it = pytext::chars(s);
    let digits = |n: usize, it: &mut dyn Iterator<Item = u32>| {
        (0..n).all(|_| it.next().and_then(pytext::digit).is_some())
    };
    if !digits(8, &mut it) {
        return false;
    }
    if time
        && !(it.next() == Some(u32::from(b'T'))
            && digits(4, &mut it)
            && it.next() == Some(u32::from(b'Z')))
    {
        return false;
    }
    it.next().is_none()
}

/// The length of the run of `\d` at the start of `s`, in bytes.
fn digits_at(s: &[u8]) -> usize {
    let mut i = 0;
    while i < s.len() {
        let (c, n) = pytext::decode(s, i);
        if pytext::digit(c).is_none() {
            break;
        }
        i += n;
    }
    i
}

/// `\d+(?:\.\d+)?` at the start of `s`: its length in bytes (0: none).
fn decimal_at(s: &[u8]) -> usize {
    let n = digits_at(s);
    if n == 0 {
        return 0;
    }
    match s[n..].strip_prefix(b".") {
        Some(r) if digits_at(r) > 0 => n + 1 + digits_at(r),
        _ => n,
    }
}

/// `-?\d+\.\d{2}`, the whole text.
fn is_money(s: &[u8]) -> bool {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let n = digits_at(s);
    n > 0
        && s[n..]
            .strip_prefix(b".")
            .is_some_and(|r| digits_at(r) == r.len() && pytext::char_len(r) == 2)
}

/// `-?\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?`, the whole text.
fn is_num(s: &[u8]) -> bool {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let n = decimal_at(s);
    if n == 0 {
        return false;
    }
    match &s[n..] {
        [] => true,
        [b'/', r @ ..] => {
            let m = decimal_at(r);
            m > 0 && m == r.len()
        }
        _ => false,
    }
}

/// `-?\d+(\.\d+)?|\d{8}`, the whole text: an answer that is a number passes the closed vocabulary.
fn is_answer_number(s: &[u8]) -> bool {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let n = decimal_at(s);
    n > 0 && n == s.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Vocabulary;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_tokens_and_the_tail_are_found_as_a_byte_by_byte_scan_finds_them(
            line in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'/'), Just(b'='), any::<u8>()], 0..200),
        ) {
            let by_byte: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            prop_assert_eq!(split_spaces(&line), by_byte);
            for needle in [&b" // "[..], b" p="] {
                prop_assert_eq!(find(&line, needle), line.windows(needle.len()).position(|w| w == needle));
            }
            prop_assert_eq!(tail_separator(&line), find(&line, b" // "));
        }
    }

    fn b(s: &str) -> Box<[u8]> {
        s.as_bytes().into()
    }

    fn core() -> Grammar {
        let all = [
            "re", "from", "to", "item", "ask", "amt", "n", "due", "ok", "p", "opts", "need", "val",
            "ttl",
        ];
        let ty = |code: &str, req: &[&str]| {
            (
                b(code),
                req.iter().map(|s| b(s)).collect(),
                all.iter().map(|s| b(s)).collect(),
            )
        };
        Grammar::new(Vocabulary {
            declared: None,
            types: vec![
                ty("HO", &["from", "to", "ask"]),
                ty("AQ", &["from", "to", "need"]),
                ty("AN", &["from", "to", "val"]),
            ],
            slots: [
                ("re", "msgid"),
                ("from", "agent"),
                ("to", "agent"),
                ("item", "ref"),
                ("ask", "enum:ask"),
                ("amt", "money"),
                ("n", "int:1-10"),
                ("due", "date"),
                ("ok", "bool"),
                ("p", "token"),
                ("opts", "list:token"),
                ("need", "enum:need"),
                ("val", "token"),
                ("ttl", "days"),
            ]
            .iter()
            .map(|(k, t)| (b(k), b(t)))
            .collect(),
            enums: vec![
                (b("ask"), vec![b("PAY"), b("HOLD")]),
                (b("need"), vec![b("ENUM"), b("FREE")]),
                (b("ans"), vec![b("A"), b("B")]),
            ],
            agents: None,
            tail_max: 10,
            int_max_digits: 4300,
            ..Vocabulary::default()
        })
        .unwrap_or_else(|e| panic!("{}", String::from_utf8_lossy(&e)))
    }

    fn codes(p: &Parsed) -> Vec<&'static str> {
        p.errors.iter().chain(&p.warnings).map(|e| e.code).collect()
    }

    fn no_switch(_: &[u8]) -> Result<Arc<Grammar>, Vec<u8>> {
        Err(b"no profiles here".to_vec())
    }

    /// A grammar of 70 slots `s0`..`s69` (the set of a line's slots spans two words), one type requiring `s3`,
    /// `s66` and `undeclared` (a slot the grammar does not know: looked for by name).
    fn wide() -> Grammar {
        let keys: Vec<String> = (0..70).map(|i| format!("s{i}")).collect();
        Grammar::new(Vocabulary {
            declared: Some(b("wide")),
            types: vec![(
                b("HO"),
                vec![b("s3"), b("s66"), b("undeclared")],
                keys.iter().take(68).map(|k| b(k)).collect(),
            )],
            slots: keys.iter().map(|k| (b(k), b("token"))).collect(),
            tail_max: 10,
            ..Vocabulary::default()
        })
        .unwrap_or_else(|e| panic!("{}", String::from_utf8_lossy(&e)))
    }

    #[test]
    fn slots_past_the_sixty_fourth_are_counted_as_the_first() {
        let g = wide();
        let p = parse(b"RW1 HO a-1 s3=x s66=y undeclared=z s69=w", &g, no_switch);
        assert_eq!(codes(&p), ["unknown-key", "slot-not-for-type"]);
        let p = parse(b"RW1 HO a-1 s66=y s66=y s67=", &g, no_switch);
        assert_eq!(
            codes(&p),
            [
                "duplicate-key",
                "empty-value",
                "missing-slot",
                "missing-slot"
            ]
        );
        let missing: Vec<_> = p.errors.iter().filter_map(|e| e.slot.as_deref()).collect();
        assert_eq!(missing, [&b"s66"[..], b"s67", b"s3", b"undeclared"]);
        // an empty value is not the slot: the same key after it is not a duplicate
        let p = parse(b"RW1 HO a-1 s3= s3=x s66=y undeclared=z", &g, no_switch);
        assert_eq!(codes(&p), ["empty-value", "unknown-key"]);
    }

    #[test]
    fn a_clean_line_decodes() {
        let g = core();
        let p = parse(
            b"RW1 HO a-1 from=a to=b ask=PAY amt=10.00 n=3 ok=Y opts=x+y ttl=14d // hi",
            &g,
            no_switch,
        );
        assert!(
            p.errors.is_empty() && p.warnings.is_empty(),
            "{:?}",
            codes(&p)
        );
        assert_eq!(p.twin.from, Some(Value::text(b"a")));
        assert_eq!(p.twin.tail.as_deref(), Some(&b"hi"[..]));
        let slots: Vec<(&[u8], Value)> = p
            .twin
            .slots
            .iter()
            .map(|(k, v)| (&k[..], v.clone()))
            .collect();
        assert_eq!(slots[2], (&b"n"[..], Value::Int(3)));
        assert_eq!(slots[3], (&b"ok"[..], Value::Bool(true)));
        assert_eq!(
            slots[4],
            (
                &b"opts"[..],
                Value::List(vec![Value::text(b"x"), Value::text(b"y")])
            )
        );
        assert_eq!(slots[5], (&b"ttl"[..], Value::Int(14)));
    }

    #[test]
    fn findings_come_in_the_references_order() {
        let g = core();
        let p = parse(
            b" RW1 HO a-x from=a from=b to=a ask=NO n=99 zz=1 bare  amt=1.0 //",
            &g,
            no_switch,
        );
        assert_eq!(
            codes(&p),
            [
                "duplicate-key",
                "not-key-value",
                "unknown-code",
                "out-of-range",
                "bad-money",
                "id-shape",
                "whitespace",
                "multiple-spaces",
                "unknown-key",
                "same-agent"
            ]
        );
        assert_eq!(
            p.errors[1].message,
            b"'bare': expected key=value (positional slots are only RW1, TYPE and id)"
        );
        assert_eq!(p.twin.tail.as_deref(), Some(&b""[..]));
    }

    #[test]
    fn python_semantics_hold_at_the_edges() {
        let g = core();
        // Unicode digits are digits; $ lets one newline end a date; a big int stays exact
        let p = parse(
            "RW1 HO a-1 from=a to=b ask=PAY due=2026010١\n x=1 n=١٠".as_bytes(),
            &g,
            no_switch,
        );
        assert_eq!(codes(&p), ["unknown-key"]);
        assert_eq!(
            (&p.twin.slots[2].0[..], &p.twin.slots[2].1),
            (&b"n"[..], &Value::Int(10))
        );
        let p = parse(
            b"RW1 HO a-1 from=a to=b ask=PAY n=-000123456789012345678901234567890",
            &g,
            no_switch,
        );
        assert_eq!(
            p.twin.slots[1].1,
            Value::BigInt("-123456789012345678901234567890".into())
        );
        assert_eq!(codes(&p), ["out-of-range"]);
        let p = parse(
            "RW1 HO a-1 from=a to=b ask=PAY // 12345678901".as_bytes(),
            &g,
            no_switch,
        );
        assert_eq!(codes(&p), ["tail-too-long"]);
        assert_eq!(p.errors[0].got.as_deref(), Some(&b"11"[..]));
    }

    #[test]
    fn p_switches_profile_under_the_core() {
        let g = core();
        let p = parse(b"RW1 HO a-1 p=nope from=a to=b ask=PAY", &g, no_switch);
        assert_eq!(codes(&p), ["unknown-profile"]);
        assert_eq!(p.errors[0].message, b"no profiles here");
        let p = parse(b"RW1 HO a-1 p=other from=a to=b ask=PAY", &g, |_| {
            Ok(Arc::new(core()))
        });
        assert!(p.switched.is_some() && p.errors.is_empty());
    }

    #[test]
    fn answer_rules() {
        let g = core();
        let p = parse(b"RW1 AQ a-1 from=a to=b need=ENUM opts=A+C", &g, no_switch);
        assert_eq!(codes(&p), ["not-in-answer-vocabulary"]);
        let p = parse(b"RW1 AN a-1 from=a to=b val=-2.5", &g, no_switch);
        assert!(codes(&p).is_empty());
        let p = parse(b"RW1 AN a-1 from=a to=b val=tail", &g, no_switch);
        assert_eq!(codes(&p), ["tail-required"]);
    }

    proptest! {
        #[test]
        fn any_bytes_parse_without_panic(line in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&line, &core(), no_switch);
        }

        #[test]
        fn any_rw_like_text_parses_without_panic(line in "(RW1|rw1|) ?(HO|AQ|AN|XX)? ?[a-z0-9-]{0,4}( [a-z_]{0,5}=?[A-Za-z0-9.+/١\\-]{0,6}){0,8}( //.{0,12})?") {
            let p = parse(line.as_bytes(), &core(), |_| Ok(Arc::new(core())));
            for e in p.errors.iter().chain(&p.warnings) {
                prop_assert!(!e.message.is_empty());
            }
        }
    }
}
