//! A message's canonical form, what its digest (`h=`) is taken over: the JSON twin with its keys sorted, no
//! whitespace, text as UTF-8 (not escaped to ASCII), lists in written order. Python's
//! `json.dumps(twin, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`, byte for byte.

use crate::parse::Twin;
use crate::value::Value;

/// The canonical JSON of a twin (`v` defaults to `RW1` as the twin of a message has it).
pub fn canonical(t: &Twin<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let text = |out: &mut Vec<u8>, s: Option<&[u8]>| match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    };
    let val = |out: &mut Vec<u8>, v: Option<&Value<'_>>| match v {
        Some(v) => value(out, v),
        None => out.extend_from_slice(b"null"),
    };
    out.extend_from_slice(b"{\"from\":");
    val(&mut out, t.from.as_ref());
    out.extend_from_slice(b",\"id\":");
    text(&mut out, t.id.as_deref());
    out.extend_from_slice(b",\"item\":");
    val(&mut out, t.item.as_ref());
    out.extend_from_slice(b",\"re\":");
    val(&mut out, t.re.as_ref());
    out.extend_from_slice(b",\"slots\":{");
    let mut slots: Vec<&(std::borrow::Cow<'_, [u8]>, Value<'_>)> = t.slots.iter().collect();
    slots.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, (k, v)) in slots.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(&mut out, k);
        out.push(b':');
        value(&mut out, v);
    }
    out.extend_from_slice(b"},\"tail\":");
    text(&mut out, t.tail.as_deref());
    out.extend_from_slice(b",\"to\":");
    val(&mut out, t.to.as_ref());
    out.extend_from_slice(b",\"type\":");
    text(&mut out, t.typ.as_deref());
    out.extend_from_slice(b",\"v\":");
    text(
        &mut out,
        Some(t.v.as_deref().unwrap_or(crate::parse::VERSION)),
    );
    out.push(b'}');
    out
}

/// The digest of a twin: the first 12 hex digits of the SHA-256 of its canonical JSON.
pub fn digest(t: &Twin<'_>) -> String {
    crate::digest(&canonical(t))
}

fn value(out: &mut Vec<u8>, v: &Value<'_>) {
    match v {
        Value::Text(t) => string(out, t),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::BigInt(d) => out.extend_from_slice(d.as_bytes()),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::None => out.extend_from_slice(b"null"),
        Value::Float(f, repr) => match (f.is_nan(), f.is_infinite(), *f > 0.0) {
            (true, _, _) => out.extend_from_slice(b"NaN"),
            (_, true, true) => out.extend_from_slice(b"Infinity"),
            (_, true, false) => out.extend_from_slice(b"-Infinity"),
            _ => out.extend_from_slice(repr),
        },
        Value::List(items) => {
            out.push(b'[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(out, x);
            }
            out.push(b']');
        }
    }
}

/// A JSON string as `json.dumps(..., ensure_ascii=False)` writes it (and orjson: only `"`, `\` and control
/// characters escaped). The runs between escapes are copied whole: a line's text, stored with every line it
/// decides, has none, and copying it byte by byte was a few per cent of a line's instructions.
pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut run = 0;
    for (i, &b) in s.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&s[run..i]);
        run = i + 1;
        escape(out, b);
    }
    out.extend_from_slice(&s[run..]);
    out.push(b'"');
}

/// The escape of a byte JSON does not write as itself: `"`, `\` or a control character.
fn escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0C => out.extend_from_slice(b"\\f"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::borrow::Cow;

    /// The escapes written byte by byte, each byte on its own: what `string` must write. (The escapes themselves
    /// are held to Python's `json.dumps` by rwcore's `test_the_canonical_form_equals_the_json_encoders`.)
    fn byte_by_byte(out: &mut Vec<u8>, s: &[u8]) {
        out.push(b'"');
        for &b in s {
            match b {
                b'"' | b'\\' | 0x00..=0x1F => escape(out, b),
                _ => out.push(b),
            }
        }
        out.push(b'"');
    }

    proptest! {
        #[test]
        fn a_string_is_escaped_as_byte_by_byte_after_what_the_buffer_held(
            before in proptest::collection::vec(any::<u8>(), 0..8),
            s in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'"'), Just(b'\\'), 0u8..0x20], 0..300),
        ) {
            let (mut got, mut want) = (before.clone(), before);
            string(&mut got, &s);
            byte_by_byte(&mut want, &s);
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn the_canonical_form_is_pythons_json() {
        let t = Twin {
            typ: Some(Cow::Borrowed(b"HO")),
            id: Some(Cow::Borrowed(b"a-1")),
            from: Some(Value::text(b"a")),
            to: Some(Value::text(b"b")),
            slots: vec![
                (
                    Cow::Borrowed(b"z"),
                    Value::List(vec![Value::text(b"x\"\n\x01"), Value::Int(-2)]),
                ),
                (Cow::Borrowed(b"ask"), Value::Bool(true)),
            ],
            tail: Some(Cow::Borrowed("é".as_bytes())),
            ..Twin::default()
        };
        let want = "{\"from\":\"a\",\"id\":\"a-1\",\"item\":null,\"re\":null,\"slots\":{\"ask\":true,\"z\":[\"x\\\"\\n\\u0001\",-2]},\"tail\":\"é\",\"to\":\"b\",\"type\":\"HO\",\"v\":\"RW1\"}";
        assert_eq!(String::from_utf8_lossy(&canonical(&t)), want);
    }
}
