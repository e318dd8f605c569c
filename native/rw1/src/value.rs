//! A decoded slot value, and what Python does with one: equality, `str`, truth, and the protocol's way of showing
//! it on a line (a list joined with `+`, a boolean `Y` or `N`).
//!
//! The checks compare values as the reference (Python) compares them, so a value keeps Python's semantics here:
//! `True == 1`, a list equals a list of equal items, text is compared as text.

use std::borrow::Cow;

use crate::pytext;

/// A decoded slot value. (`==` is structural: `Bool(true) != Int(1)`; [`Value::py_eq`] is Python's.)
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// text as written (borrowed from the line where it can be)
    Text(Cow<'a, [u8]>),
    /// an integer that fits i64
    Int(i64),
    /// an integer beyond i64: its decimal digits, `-` first when negative, no leading zero
    BigInt(String),
    /// a boolean
    Bool(bool),
    /// a list's items
    List(Vec<Value<'a>>),
    /// Python's None (the parser never makes one; a message made by hand may hold one)
    None,
    /// a float, with the text Python's `repr` writes for it (never made by the parser, as None)
    Float(f64, Box<[u8]>),
}

impl<'a> Value<'a> {
    /// Text borrowed from `s`.
    pub fn text(s: &'a [u8]) -> Value<'a> {
        Value::Text(Cow::Borrowed(s))
    }

    /// The text, when the value is text.
    pub fn as_text(&self) -> Option<&[u8]> {
        match self {
            Value::Text(t) => Some(t),
            _ => None,
        }
    }

    /// The value, owning its text.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Text(t) => Value::Text(Cow::Owned(t.into_owned())),
            Value::Int(i) => Value::Int(i),
            Value::BigInt(d) => Value::BigInt(d),
            Value::Bool(b) => Value::Bool(b),
            Value::List(items) => Value::List(items.into_iter().map(Value::into_owned).collect()),
            Value::None => Value::None,
            Value::Float(f, r) => Value::Float(f, r),
        }
    }

    /// Python's `==`.
    pub fn py_eq(&self, other: &Value<'_>) -> bool {
        match (self, other) {
            (Value::Text(a), Value::Text(b)) => a == b,
            (Value::BigInt(a), Value::BigInt(b)) => a == b,
            (Value::List(a), Value::List(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.py_eq(y))
            }
            (Value::None, Value::None) => true,
            (Value::Float(a, _), Value::Float(b, _)) => a == b,
            (Value::Float(f, _), v) | (v, Value::Float(f, _)) => {
                v.as_int().is_some_and(|i| whole(*f) == Some(i))
            }
            _ => match (self.as_int(), other.as_int()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
        }
    }

    /// An integer or a boolean as the integer Python takes it for.
    fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// Python's truth.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Text(t) => !t.is_empty(),
            Value::Int(i) => *i != 0,
            Value::BigInt(_) => true,
            Value::Bool(b) => *b,
            Value::List(items) => !items.is_empty(),
            Value::None => false,
            Value::Float(f, _) => *f != 0.0,
        }
    }

    /// Python's `str` (a list is shown as the tuple a message holds).
    pub fn py_str(&self) -> Cow<'_, [u8]> {
        match self {
            Value::Text(t) => Cow::Borrowed(t),
            Value::Int(i) => Cow::Owned(i.to_string().into_bytes()),
            Value::BigInt(d) => Cow::Borrowed(d.as_bytes()),
            Value::Bool(b) => Cow::Borrowed(if *b { b"True" } else { b"False" }),
            Value::None => Cow::Borrowed(b"None"),
            Value::Float(_, repr) => Cow::Borrowed(repr),
            Value::List(items) => {
                let mut out = vec![b'('];
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b", ");
                    }
                    match x {
                        Value::Text(t) => pytext::repr(t, &mut out),
                        _ => out.extend_from_slice(&x.py_str()),
                    }
                }
                if items.len() == 1 {
                    out.push(b',');
                }
                out.push(b')');
                Cow::Owned(out)
            }
        }
    }

    /// The value as a line shows it: a list's items (each as `str` writes it) joined with `+`, a boolean `Y` or
    /// `N`, anything else as `str` writes it.
    pub fn show(&self) -> Cow<'_, [u8]> {
        match self {
            Value::List(items) => {
                let mut out = Vec::new();
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b'+');
                    }
                    out.extend_from_slice(&x.py_str());
                }
                Cow::Owned(out)
            }
            Value::Bool(b) => Cow::Borrowed(if *b { b"Y" } else { b"N" }),
            _ => self.py_str(),
        }
    }

    /// The items of a list; None has none; any other value is a list of itself (the reference's `_seq`).
    pub fn items(&self) -> &[Value<'a>] {
        match self {
            Value::List(items) => items,
            Value::None => &[],
            _ => std::slice::from_ref(self),
        }
    }
}

/// A float's value as an i64 when it is a whole number in i64's range.
fn whole(f: f64) -> Option<i64> {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63, exactly
    if f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) {
        format!("{f:.0}").parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_behave_as_pythons() {
        let t = |s: &'static str| Value::text(s.as_bytes());
        assert!(Value::Bool(true).py_eq(&Value::Int(1)) && !Value::Bool(true).py_eq(&t("True")));
        assert!(Value::List(vec![t("a"), Value::Int(0)])
            .py_eq(&Value::List(vec![t("a"), Value::Bool(false)])));
        assert_eq!(
            &*Value::List(vec![t("a'"), Value::Int(2)]).py_str(),
            b"(\"a'\", 2)"
        );
        assert_eq!(&*Value::List(vec![t("a")]).py_str(), b"('a',)");
        assert_eq!(
            &*Value::List(vec![t("a"), Value::Bool(true)]).show(),
            b"a+True"
        );
        assert_eq!(&*Value::Bool(false).show(), b"N");
        assert!(
            !Value::List(vec![]).truthy() && Value::BigInt("-99999999999999999999".into()).truthy()
        );
    }
}
