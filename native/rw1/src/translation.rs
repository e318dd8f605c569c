//! Translation rules: when the lines are the record, a line about a source document must carry its facts.
//!
//! Only the `pay` profile has rules (rwcore's `_translation.py` says why): an `ST` about an invoice
//! (`item=inv:<id>`) carries `src=`, `amt`, `cur` and `kind`, and with `kind=GROSS`, when `net`, `vat` and `amt`
//! are all given, `net + vat = amt` in exact decimal arithmetic.

use std::cmp::Ordering;

use crate::parse::Twin;
use crate::problem::{cat, Problem};
use crate::value::Value;

const TIER: &str = "translation";
const INVOICE_SLOTS: [&[u8]; 3] = [b"amt", b"cur", b"kind"];

/// The profiles that have translation rules.
pub const PROFILES: [&str; 1] = ["pay"];

/// The translation rules for a message under the profile `profile` (its name): the problems, none when the line
/// passes or no rules apply.
pub fn translation_check(msg: &Twin<'_>, profile: &[u8]) -> Vec<Problem> {
    if profile == PROFILES[0].as_bytes() {
        pay(msg)
    } else {
        Vec::new()
    }
}

fn present(v: Option<&Value<'_>>) -> bool {
    match v {
        None | Some(Value::None) => false,
        Some(Value::Text(t)) => !t.is_empty(),
        Some(Value::List(items)) => !items.is_empty(),
        Some(_) => true,
    }
}

fn pay(msg: &Twin<'_>) -> Vec<Problem> {
    let item = msg.item.as_ref().filter(|i| i.truthy());
    let about_invoice = item
        .and_then(Value::as_text)
        .is_some_and(|i| i.starts_with(b"inv:"));
    if msg.typ.as_deref() != Some(b"ST") || !about_invoice {
        return Vec::new();
    }
    let item_text = item.map(Value::py_str).unwrap_or_default();
    let where_: Vec<u8> = cat(&[
        b"ST ",
        msg.id.as_deref().unwrap_or(b"None"),
        b" about ",
        &item_text,
    ]);
    let mut problems = Vec::new();
    if !present(msg.slot(b"src")) {
        let text = cat(&[
            b"translation: ",
            &where_,
            b" carries no src=; every ST about a source document names where its facts came from \
              (email:<n>, bank:<YYYYMMDD>, po:<id>)",
        ]);
        problems.push(Problem::new(
            "translation-missing-src",
            TIER,
            text,
            Some(b"src"),
            Some(b"src=<source>"),
            None,
        ));
    }
    for k in INVOICE_SLOTS {
        if !present(msg.slot(k)) {
            let text = cat(&[
                b"translation: ",
                &where_,
                b" carries no ",
                k,
                b"=; an invoice line carries amt, cur and kind",
            ]);
            let expected = cat(&[k, b"=<value>"]);
            problems.push(Problem::new(
                "translation-missing-slot",
                TIER,
                text,
                Some(k),
                Some(&expected),
                None,
            ));
        }
    }
    let gross = msg
        .slot(b"kind")
        .is_some_and(|k| k.py_eq(&Value::text(b"GROSS")));
    let (net, vat, amt) = (msg.slot(b"net"), msg.slot(b"vat"), msg.slot(b"amt"));
    let (Some(net), Some(vat), Some(amt)) = (net, vat, amt) else {
        return problems;
    };
    if !gross || [net, vat, amt].iter().any(|v| matches!(v, Value::None)) {
        return problems;
    }
    let named = [(&b"net"[..], net), (&b"vat"[..], vat), (&b"amt"[..], amt)];
    let bad: Vec<(&[u8], &Value<'_>)> = named
        .iter()
        .copied()
        .filter(|(_, v)| Decimal::of(v).is_none())
        .collect();
    if let Some(&(first, first_value)) = bad.first() {
        let shown: Vec<Vec<u8>> = bad
            .iter()
            .map(|(k, v)| cat(&[k, b"=", &v.py_str()]))
            .collect();
        let text = cat(&[
            b"translation: ",
            &where_,
            b": net + vat cannot be checked against amt: ",
            &shown.join(&b", "[..]),
            b" is not a number",
        ]);
        problems.push(Problem::new(
            "translation-net-vat",
            TIER,
            text,
            Some(first),
            Some(b"a decimal number"),
            Some(&first_value.py_str()),
        ));
        return problems;
    }
    let (Some(d_net), Some(d_vat), Some(d_amt)) =
        (Decimal::of(net), Decimal::of(vat), Decimal::of(amt))
    else {
        return problems;
    };
    let total = d_net.add(&d_vat);
    if total.cmp_value(&d_amt) != Ordering::Equal {
        let total_text = total.to_python_str();
        let text = cat(&[
            b"translation: ",
            &where_,
            b": net ",
            &net.py_str(),
            b" + vat ",
            &vat.py_str(),
            b" = ",
            total_text.as_bytes(),
            b", not amt ",
            &amt.py_str(),
            b"; with kind=GROSS net + vat must equal amt",
        ]);
        problems.push(Problem::new(
            "translation-net-vat",
            TIER,
            text,
            Some(b"amt"),
            Some(total_text.as_bytes()),
            Some(&amt.py_str()),
        ));
    }
    problems
}

/// A decimal number as Python's `decimal.Decimal` holds one: a sign, the digits of its coefficient (no leading
/// zero; zero is "0") and the exponent of its last digit. Plain notation only, as a line writes money.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// `-?[0-9]+(\.[0-9]+)?`, the whole text, read; None for anything else.
    fn of(v: &Value<'_>) -> Option<Decimal> {
        let s = v.as_text()?;
        let (negative, s) = match s.strip_prefix(b"-") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (whole, frac) = match s.iter().position(|&b| b == b'.') {
            Some(at) => (&s[..at], Some(&s[at + 1..])),
            None => (s, None),
        };
        let ascii_digits = |x: &[u8]| !x.is_empty() && x.iter().all(u8::is_ascii_digit);
        if !ascii_digits(whole) || frac.is_some_and(|f| !ascii_digits(f)) {
            return None;
        }
        let frac = frac.unwrap_or_default();
        let mut digits: Vec<u8> = whole.iter().chain(frac).map(|b| b - b'0').collect();
        let lead = digits
            .iter()
            .take_while(|&&d| d == 0)
            .count()
            .min(digits.len() - 1);
        digits.drain(..lead);
        let exponent = -i64::try_from(frac.len()).ok()?;
        Some(Decimal {
            negative,
            digits,
            exponent,
        })
    }

    fn is_zero(&self) -> bool {
        self.digits == [0]
    }

    /// The coefficient's digits scaled to `exponent` (not above this one's).
    fn scaled(&self, exponent: i64) -> Vec<u8> {
        let extra = usize::try_from(self.exponent - exponent).unwrap_or(0);
        let mut d = self.digits.clone();
        d.extend(std::iter::repeat_n(0, extra));
        d
    }

    /// `self + other`, exactly, with Python's signs (x + -x is +0).
    fn add(&self, other: &Decimal) -> Decimal {
        let exponent = self.exponent.min(other.exponent);
        let (a, b) = (self.scaled(exponent), other.scaled(exponent));
        let (negative, digits) = if self.negative == other.negative {
            (self.negative, add_digits(&a, &b))
        } else {
            match cmp_digits(&a, &b) {
                Ordering::Equal => (self.negative && other.negative, vec![0]),
                Ordering::Greater => (self.negative, sub_digits(&a, &b)),
                Ordering::Less => (other.negative, sub_digits(&b, &a)),
            }
        };
        Decimal {
            negative,
            digits,
            exponent,
        }
    }

    /// Compare values (`Decimal('1.0') == Decimal('1.00')`).
    fn cmp_value(&self, other: &Decimal) -> Ordering {
        if self.is_zero() && other.is_zero() {
            return Ordering::Equal;
        }
        let exponent = self.exponent.min(other.exponent);
        let magnitude = cmp_digits(&self.scaled(exponent), &other.scaled(exponent));
        match (
            self.negative && !self.is_zero(),
            other.negative && !other.is_zero(),
        ) {
            (false, false) => magnitude,
            (true, true) => magnitude.reverse(),
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
        }
    }

    /// `str(Decimal)`: plain notation, or scientific when the number is very small (adjusted exponent below -6).
    fn to_python_str(&self) -> String {
        let digits: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let n = i64::try_from(digits.len()).unwrap_or(i64::MAX);
        let adjusted = self.exponent + n - 1;
        let sign = if self.negative { "-" } else { "" };
        let body = if self.exponent <= 0 && adjusted >= -6 {
            if self.exponent == 0 {
                digits
            } else {
                let point = n + self.exponent; // digits before the point
                if point > 0 {
                    let at = usize::try_from(point).unwrap_or(0);
                    format!("{}.{}", &digits[..at], &digits[at..])
                } else {
                    let zeros = usize::try_from(-point).unwrap_or(0);
                    format!("0.{}{}", "0".repeat(zeros), digits)
                }
            }
        } else {
            let (first, rest) = digits.split_at(1);
            let mantissa = if rest.is_empty() {
                first.to_string()
            } else {
                format!("{first}.{rest}")
            };
            format!(
                "{mantissa}E{}{adjusted}",
                if adjusted >= 0 { "+" } else { "" }
            )
        };
        format!("{sign}{body}")
    }
}

fn cmp_digits(a: &[u8], b: &[u8]) -> Ordering {
    let strip = |x: &[u8]| -> usize {
        x.iter()
            .take_while(|&&d| d == 0)
            .count()
            .min(x.len().saturating_sub(1))
    };
    let (a, b) = (&a[strip(a)..], &b[strip(b)..]);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn trimmed(mut d: Vec<u8>) -> Vec<u8> {
    let lead = d
        .iter()
        .take_while(|&&x| x == 0)
        .count()
        .min(d.len().saturating_sub(1));
    d.drain(..lead);
    if d.is_empty() {
        d.push(0);
    }
    d
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let (mut i, mut j, mut carry) = (a.len(), b.len(), 0u8);
    while i > 0 || j > 0 || carry > 0 {
        let x = if i > 0 {
            i -= 1;
            a[i]
        } else {
            0
        };
        let y = if j > 0 {
            j -= 1;
            b[j]
        } else {
            0
        };
        let s = x + y + carry;
        out.push(s % 10);
        carry = s / 10;
    }
    out.reverse();
    trimmed(out)
}

/// `a - b` for `a >= b`.
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let (mut i, mut j, mut borrow) = (a.len(), b.len(), 0i8);
    while i > 0 {
        i -= 1;
        let y = if j > 0 {
            j -= 1;
            b[j]
        } else {
            0
        };
        let mut s = i8::try_from(a[i]).unwrap_or(0) - i8::try_from(y).unwrap_or(0) - borrow;
        borrow = i8::from(s < 0);
        if s < 0 {
            s += 10;
        }
        out.push(u8::try_from(s).unwrap_or(0));
    }
    out.reverse();
    trimmed(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(s: &str) -> Decimal {
        Decimal::of(&Value::text(s.as_bytes())).unwrap_or(Decimal {
            negative: false,
            digits: vec![9, 9],
            exponent: 99,
        })
    }

    #[test]
    fn sums_are_written_as_python_writes_them() {
        assert_eq!(d("100.00").add(&d("20.00")).to_python_str(), "120.00");
        assert_eq!(d("0.0000001").add(&d("0")).to_python_str(), "1E-7");
        assert_eq!(d("0.0000000").add(&d("0.0")).to_python_str(), "0E-7");
        assert_eq!(d("-5.5").add(&d("5.50")).to_python_str(), "0.00");
        assert_eq!(d("-5.5").add(&d("-0.50")).to_python_str(), "-6.00");
        assert_eq!(d("007.5").add(&d("0.25")).to_python_str(), "7.75");
        assert_eq!(d("0.001").add(&d("0.002")).to_python_str(), "0.003");
        assert_eq!(d("1.0").cmp_value(&d("1.00")), Ordering::Equal);
        assert_eq!(d("-0").cmp_value(&d("0.0")), Ordering::Equal);
        assert!(
            Decimal::of(&Value::text(b"1e5")).is_none()
                && Decimal::of(&Value::text("١".as_bytes())).is_none()
        );
    }

    proptest! {
        #[test]
        fn sums_agree_with_integer_arithmetic(a in -1_000_000_000i64..1_000_000_000, b in -1_000_000_000i64..1_000_000_000) {
            let cents = |x: i64| format!("{}{}.{:02}", if x < 0 { "-" } else { "" }, x.abs() / 100, x.abs() % 100);
            let sum = d(&cents(a)).add(&d(&cents(b)));
            prop_assert_eq!(sum.cmp_value(&d(&cents(a + b))), Ordering::Equal);
            if a + b != 0 {
                prop_assert_eq!(sum.to_python_str(), cents(a + b));
            }
        }
    }
}
