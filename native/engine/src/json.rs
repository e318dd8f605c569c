//! The state's JSON as the gatekeeper has always written it: compact, keys in the order written, strings as UTF-8
//! with only `"`, `\` and control characters escaped, floats in their shortest round-trip digits (the form orjson
//! writes: `1733280000.123`, `1.0`, `0.00001`, `1e-6`, `1e+16`). A stored entry written here is byte for byte what
//! the Python codec wrote, so a conversation stored by an earlier release reads and writes back unchanged.
//!
//! Written by hand over serde_json's values because the bytes are the contract (the Redis save script and the
//! collection rule read them, and earlier releases' entries must keep their digests): a serializer's float or
//! escape rules are not ours to change.

use std::cell::Cell;

use serde_json::Value as Json;

/// `s` as a JSON string (the protocol's canonical form writes strings the same way).
pub use rw1::canon::string;

/// The shortest decimal digits that read back as `f` (no sign), and the exponent of the first: `1.5e-5` is
/// `("15", -5)`. `f` is finite. Of two shortest candidates equally near `f`, the even one (`562949953421312.25`
/// is `...312.2`), as Python's `repr` and orjson choose: Ryu's choice (the `ryu` crate), where Rust's own
/// formatting picks the odd one.
fn shortest(f: f64) -> (Vec<u8>, i32) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(f.abs()); // "1.5e-5", "562949953421312.2", "1e16", "0.0"
    let (mantissa, exp) = text.split_once('e').unwrap_or((text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    let lead = all.iter().take_while(|&&b| b == b'0').count();
    if lead == all.len() {
        return (b"0".to_vec(), 0); // zero
    }
    let mut digits = all[lead..].to_vec();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    // the first significant digit's power of ten: the integer part's digits, less the leading zeros
    let first = int.len() as i32 - 1 - lead as i32 + exp;
    (digits, first)
}

fn fixed(out: &mut Vec<u8>, digits: &[u8], exp: i32) {
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', point.unsigned_abs() as usize));
        out.extend_from_slice(digits);
    } else if point as usize >= digits.len() {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', point as usize - digits.len()));
        out.extend_from_slice(b".0");
    } else {
        let (int, frac) = digits.split_at(point as usize);
        out.extend_from_slice(int);
        out.push(b'.');
        out.extend_from_slice(frac);
    }
}

fn scientific(out: &mut Vec<u8>, digits: &[u8], exp: i32, pad: bool) {
    out.push(digits[0]);
    if digits.len() > 1 {
        out.push(b'.');
        out.extend_from_slice(&digits[1..]);
    }
    out.push(b'e');
    out.push(if exp < 0 { b'-' } else { b'+' });
    if pad && exp.unsigned_abs() < 10 {
        out.push(b'0');
    }
    out.extend_from_slice(exp.unsigned_abs().to_string().as_bytes());
}

/// A float as JSON (orjson's form: fixed from 1e-5 up to 1e16, else `1e-6`, `1e+16`); not finite: `null`.
///
/// The last float written is remembered (by its bits, per thread): the floats of a save are nearly all its batch's
/// decision time, written once for every line it decided.
pub fn float(out: &mut Vec<u8>, f: f64) {
    thread_local! {
        static LAST: Cell<Option<(u64, [u8; 32], u8)>> = const { Cell::new(None) };
    }
    let bits = f.to_bits();
    if let Some((b, text, n)) = LAST.get() {
        if b == bits {
            out.extend_from_slice(&text[..usize::from(n)]);
            return;
        }
    }
    let start = out.len();
    write_float(out, f);
    let written = &out[start..];
    if written.len() <= 32 {
        let mut text = [0u8; 32];
        text[..written.len()].copy_from_slice(written);
        LAST.set(Some((bits, text, written.len() as u8)));
    }
}

fn write_float(out: &mut Vec<u8>, f: f64) {
    if !f.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if f.is_sign_negative() {
        out.push(b'-');
    }
    let (digits, exp) = shortest(f);
    if (-5..16).contains(&exp) {
        fixed(out, &digits, exp);
    } else {
        scientific(out, &digits, exp, false);
    }
}

/// A float as Python's `repr` writes it (fixed from 1e-4 up to 1e16, else `1e-05`, `1e+16`).
pub fn py_float(f: f64) -> Vec<u8> {
    let mut out = Vec::new();
    if f.is_nan() {
        return b"nan".to_vec();
    }
    if f.is_sign_negative() {
        out.push(b'-');
    }
    if f.is_infinite() {
        out.extend_from_slice(b"inf");
        return out;
    }
    let (digits, exp) = shortest(f);
    if (-4..16).contains(&exp) {
        fixed(&mut out, &digits, exp);
    } else {
        scientific(&mut out, &digits, exp, true);
    }
    out
}

/// Python's `round(f, 3)`: the float nearest the decimal rounded at the third place (the exact value rounded, so
/// no double rounding).
///
/// The last one is remembered (per thread), as [`float`]'s: a batch's lines are remembered at its decision time.
pub fn round3(f: f64) -> f64 {
    thread_local! {
        static LAST: Cell<Option<(u64, f64)>> = const { Cell::new(None) };
    }
    if !f.is_finite() {
        return f;
    }
    let bits = f.to_bits();
    if let Some((b, rounded)) = LAST.get() {
        if b == bits {
            return rounded;
        }
    }
    let rounded = format!("{f:.3}").parse().unwrap_or(f);
    LAST.set(Some((bits, rounded)));
    rounded
}

/// Any JSON value, as written by the gatekeeper's codec.
pub fn value(out: &mut Vec<u8>, v: &Json) {
    match v {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.extend_from_slice(i.to_string().as_bytes()),
            (_, Some(u), _) => out.extend_from_slice(u.to_string().as_bytes()),
            (_, _, Some(f)) => float(out, f),
            _ => out.extend_from_slice(b"null"),
        },
        Json::String(s) => string(out, s.as_bytes()),
        Json::Array(items) => {
            out.push(b'[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(out, x);
            }
            out.push(b']');
        }
        Json::Object(map) => object(out, map),
    }
}

/// A JSON object as [`value`] writes it, from the map itself (no `Json::Object` made around a copy of it).
pub fn object(out: &mut Vec<u8>, map: &serde_json::Map<String, Json>) {
    out.push(b'{');
    for (i, (k, x)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, k.as_bytes());
        out.push(b':');
        value(out, x);
    }
    out.push(b'}');
}

/// Python's `str()` of a JSON value as `orjson.loads` gives it: `True`, `None`, `1.5`, `['a', 1]`, `{'k': 'v'}`.
pub fn py_str(v: &Json) -> Vec<u8> {
    match v {
        Json::String(s) => s.as_bytes().to_vec(),
        other => py_repr(other),
    }
}

fn py_repr(v: &Json) -> Vec<u8> {
    match v {
        Json::Null => b"None".to_vec(),
        Json::Bool(b) => {
            if *b {
                b"True".to_vec()
            } else {
                b"False".to_vec()
            }
        }
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string().into_bytes(),
            (_, Some(u), _) => u.to_string().into_bytes(),
            (_, _, Some(f)) => py_float(f),
            _ => b"None".to_vec(),
        },
        Json::String(s) => {
            let mut out = Vec::new();
            rw1::pytext::repr(s.as_bytes(), &mut out);
            out
        }
        Json::Array(items) => {
            let mut out = b"[".to_vec();
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                out.extend_from_slice(&py_repr(x));
            }
            out.push(b']');
            out
        }
        Json::Object(map) => {
            let mut out = b"{".to_vec();
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                rw1::pytext::repr(k.as_bytes(), &mut out);
                out.extend_from_slice(b": ");
                out.extend_from_slice(&py_repr(x));
            }
            out.push(b'}');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f64) -> String {
        let mut out = Vec::new();
        float(&mut out, x);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn floats_are_written_as_orjson_writes_them() {
        for (x, want) in [
            (1e16, "1e+16"),
            (1.5e-5, "0.000015"),
            (1_733_280_000.123, "1733280000.123"),
            (0.1, "0.1"),
            (1e-7, "1e-7"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (5e-324, "5e-324"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1e-5, "0.00001"),
            (1e-6, "1e-6"),
            (-1.5e-7, "-1.5e-7"),
            (123.456, "123.456"),
            // a tie between two shortest forms takes the even digit, as Python's repr and orjson do
            (2f64.powi(49) + 0.25, "562949953421312.2"),
            (1.5e15 + 0.25, "1500000000000000.2"),
        ] {
            assert_eq!(f(x), want, "{x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_float_reads_back(x in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            let back: f64 = serde_json::from_str(&f(x)).unwrap();
            proptest::prop_assert_eq!(back, x);
        }
    }

    #[test]
    fn floats_are_shown_as_python_shows_them() {
        for (x, want) in [
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (1e22, "1e+22"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(String::from_utf8(py_float(x)).unwrap(), want, "{x}");
        }
    }

    #[test]
    fn round3_rounds_the_exact_value() {
        assert_eq!(round3(1_733_280_000.123_456), 1_733_280_000.123);
        assert_eq!(round3(2.0005), 2.001); // 2.0005 is a little over: Python's round(2.0005, 3) is 2.001
        assert_eq!(round3(2.675), 2.675);
        assert_eq!(round3(0.0015), 0.002); // a little over too
        assert_eq!(round3(1.0625), 1.062); // an exact tie goes to the even digit, as in Python
    }

    proptest::proptest! {
        /// What `float` and `round3` remember of the last value is only that value's: any sequence of values, some
        /// repeated, gives what each alone gives.
        #[test]
        fn a_remembered_float_is_only_its_own(xs in proptest::collection::vec(
            proptest::prop_oneof![proptest::num::f64::ANY, proptest::sample::select(vec![0.0, -0.0, 1.5, 1e16])], 1..12)
        ) {
            for x in xs.iter().chain(xs.iter().rev()) {
                let mut alone = Vec::new();
                write_float(&mut alone, *x);
                proptest::prop_assert_eq!(f(*x).into_bytes(), alone);
                let rounded = if x.is_finite() { format!("{x:.3}").parse().unwrap_or(*x) } else { *x };
                proptest::prop_assert_eq!(round3(*x).to_bits(), rounded.to_bits());
            }
        }
    }
}
