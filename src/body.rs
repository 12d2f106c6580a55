//! The buffered request body of a protected route, parsed as JSON at most once.
//!
//! # Why "exact"
//! `serde_json::Value` stores a number that does not fit `u64`/`i64`, or a float with
//! more digits than `f64` holds, as a rounded `f64`: `12345678901234567890123` and
//! `12345678901234567890124` parse to the same value. Canonical JSON of such a body
//! would make two different requests look identical (a wrong replay), so a body with a
//! number that does not survive parsing exactly is flagged, and fingerprints fall back
//! to its raw bytes.
//!
//! # Duplicate members
//! JSON parsers disagree on `{"amount":100,"amount":1}`: serde_json keeps the last, many
//! others the first. idem and the upstream must read the same request, so the parse
//! idem already does ([`BodyView::json`]) refuses duplicates at any depth: such a body
//! is not JSON to idem, and [`BodyView::has_duplicate_member`] says why, for the 400
//! `invalid_body` of the routes that read the body (issue 46 §8). The check is the
//! return value of the map insert the parse makes anyway: no second pass.

use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use bytes::Bytes;
use serde_json::Value;

use crate::canonical;

/// A request body read up to the route's `max_request_bytes`.
#[derive(Debug, Default)]
pub struct BodyView {
    raw: Bytes,
    json: OnceLock<Parsed>,
    /// Computed on first use: every number token survives parsing unchanged.
    exact: OnceLock<bool>,
    /// Canonical JSON of an exact JSON body, computed on first use.
    canonical: OnceLock<Option<Vec<u8>>>,
}

impl BodyView {
    pub fn new(raw: Bytes) -> Self {
        BodyView {
            raw,
            ..BodyView::default()
        }
    }

    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The body as JSON, or `None` if it is empty or not valid JSON (including nesting
    /// deeper than serde_json's recursion limit of 128, and an object with a duplicate
    /// member: see the module doc).
    pub fn json(&self) -> Option<&Value> {
        match self.parsed() {
            Parsed::Json(value) => Some(value),
            Parsed::NotJson | Parsed::Duplicate => None,
        }
    }

    /// Whether the body is JSON but for an object with a duplicate member, at any depth.
    pub fn has_duplicate_member(&self) -> bool {
        matches!(self.parsed(), Parsed::Duplicate)
    }

    fn parsed(&self) -> &Parsed {
        self.json.get_or_init(|| {
            if self.raw.is_empty() {
                Parsed::NotJson
            } else {
                parse_unique(&self.raw)
            }
        })
    }

    /// Whether every number in the (JSON) body is represented exactly by [`Self::json`]
    /// (see the module doc). `true` for a body that is not JSON.
    pub fn is_exact(&self) -> bool {
        *self
            .exact
            .get_or_init(|| self.json().is_none() || numbers_are_exact(&self.raw))
    }

    /// Canonical JSON bytes of the body: `None` when it is not JSON or not exact.
    pub fn canonical(&self) -> Option<&[u8]> {
        self.canonical
            .get_or_init(|| {
                let value = self.json()?;
                self.is_exact().then(|| canonical::to_vec(value))
            })
            .as_deref()
    }

    /// What identifies the body's content: canonical JSON when that is faithful, the raw
    /// bytes otherwise. The flag says which (`true`: canonical).
    pub fn identity_bytes(&self) -> (bool, &[u8]) {
        match self.canonical() {
            Some(bytes) => (true, bytes),
            None => (false, &self.raw),
        }
    }
}

// === duplicate members ===

/// The body parsed once: JSON, not JSON, or JSON with a duplicate member.
#[derive(Debug)]
enum Parsed {
    Json(Value),
    NotJson,
    Duplicate,
}

/// The message of the one data error [`Unique`] raises (serde_json's own errors for a
/// `Value` are syntax or end-of-input errors).
const DUPLICATE: &str = "duplicate member";

/// Parse `raw` as serde_json's `Value` would, refusing an object with a duplicate member.
fn parse_unique(raw: &[u8]) -> Parsed {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let value = match Unique.deserialize(&mut de) {
        Ok(value) => value,
        Err(e) if e.classify() == serde_json::error::Category::Data => return Parsed::Duplicate,
        Err(_) => return Parsed::NotJson,
    };
    match de.end() {
        Ok(()) => Parsed::Json(value),
        Err(_) => Parsed::NotJson,
    }
}

/// A `serde_json::Value`, built the way its own `Deserialize` builds it, but failing on
/// a member name seen twice in one object.
struct Unique;

impl<'de> DeserializeSeed<'de> for Unique {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Unique.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(Unique)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = serde_json::Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value_seed(Unique)?;
            if members.insert(name, value).is_some() {
                return Err(de::Error::custom(DUPLICATE));
            }
        }
        Ok(Value::Object(members))
    }
}

// === number exactness ===

/// Scan valid JSON text and check that each number token reads back unchanged from
/// serde_json's own parse (compared as normalised decimals, so `1.50` and `1.5` are
/// equal, `1e2` and `100` are not — and neither are they after parsing).
fn numbers_are_exact(raw: &[u8]) -> bool {
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'"' => i = skip_string(raw, i + 1),
            b'-' | b'0'..=b'9' => {
                let end = raw[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(raw.len(), |n| i + n);
                if !token_is_exact(&raw[i..end]) {
                    return false;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    true
}

/// Index just past the closing quote of a string whose content starts at `i`.
fn skip_string(raw: &[u8], mut i: usize) -> usize {
    while i < raw.len() {
        match raw[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    raw.len()
}

fn token_is_exact(token: &[u8]) -> bool {
    // Fast path: up to 18 digits always fit an i64/u64 exactly.
    let digits = token.strip_prefix(b"-").unwrap_or(token);
    if digits.len() <= 18 && digits.iter().all(u8::is_ascii_digit) {
        return true;
    }
    let Ok(text) = std::str::from_utf8(token) else {
        return false;
    };
    let Ok(parsed) = serde_json::from_str::<serde_json::Number>(text) else {
        return false;
    };
    match (Decimal::parse(text), Decimal::parse(&parsed.to_string())) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A decimal number as `±0.DIGITS × 10^exp`, with no leading or trailing zero digits
/// (zero: no digits, exponent 0, positive), so equal values compare equal.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Decimal {
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, text) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exp) = match text.split_once(['e', 'E']) {
            Some((m, e)) => (m, parse_exponent(e)?),
            None => (text, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let all: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
        let lead = all.iter().take_while(|&&b| b == b'0').count();
        let digits = &all[lead..];
        let trail = digits.iter().rev().take_while(|&&b| b == b'0').count();
        let digits = digits[..digits.len() - trail].to_vec();
        if digits.is_empty() {
            return Some(Decimal {
                negative: false,
                digits,
                exp: 0,
            });
        }
        // Value = 0.DIGITS × 10^(int digits after the leading zeros + exp).
        let point = i64::try_from(int.len()).ok()? - i64::try_from(lead).ok()?;
        Some(Decimal {
            negative,
            digits,
            exp: point.saturating_add(exp),
        })
    }
}

/// `+12`, `-3`, `7`; saturating, so an absurd exponent cannot overflow.
fn parse_exponent(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.bytes().fold(0i64, |acc, b| {
        acc.saturating_mul(10).saturating_add(i64::from(b - b'0'))
    });
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> BodyView {
        BodyView::new(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn json_or_not() {
        assert!(body(r#"{"a":1}"#).json().is_some());
        assert!(body("").json().is_none());
        assert!(body("  ").json().is_none());
        assert!(body("a=1&b=2").json().is_none());
        assert!(body(r#"{"a":1"#).json().is_none());
    }

    #[test]
    fn duplicate_members_at_any_depth_are_refused() {
        for text in [
            r#"{"amount":100,"amount":1}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"[{"x":[{"k":1,"k":2}]}]"#,
            r#"{"a\u0062":1,"ab":2}"#,
        ] {
            let b = body(text);
            assert!(b.json().is_none(), "{text}");
            assert!(b.has_duplicate_member(), "{text}");
        }
        for text in [
            r#"{"a":1,"b":{"a":2}}"#,
            r#"[{"a":1},{"a":2}]"#,
            "not json",
            "",
        ] {
            assert!(!body(text).has_duplicate_member(), "{text}");
        }
        // The same value serde_json's own `Value` gives.
        let text = r#"{"a":[1,-2,2.5,1e-3,"s",null,true,{"b":{}}],"c":18446744073709551615}"#;
        let b = body(text);
        let plain: Option<Value> = serde_json::from_str(text).ok();
        assert_eq!(b.json(), plain.as_ref());
    }

    #[test]
    fn deep_nesting_is_not_json_and_does_not_crash() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let b = body(&deep);
        assert!(b.json().is_none());
        assert!(b.is_exact());
        assert_eq!(b.identity_bytes(), (false, deep.as_bytes()));
        let unclosed = "[".repeat(10_000);
        assert!(body(&unclosed).json().is_none());
        let objects = r#"{"a":"#.repeat(10_000);
        assert!(body(&objects).json().is_none());
    }

    #[test]
    fn ordinary_numbers_are_exact() {
        for text in [
            "0",
            "-0",
            "1",
            "-17",
            "1999",
            "19.99",
            "1.50",
            "0.30000000000000004",
            "1e2",
            "1.5E-3",
            "18446744073709551615",
            "-9223372036854775808",
            "100000000000000000000",
            r#"{"a":[1,2.5,{"b":-3e10}],"s":"12345678901234567890123"}"#,
        ] {
            let b = body(text);
            assert!(b.json().is_some(), "{text}");
            assert!(b.is_exact(), "{text}");
        }
    }

    #[test]
    fn rounded_numbers_are_not_exact() {
        for text in [
            "12345678901234567890123",
            "-9223372036854775809",
            "0.1000000000000000001",
            "1e-400",
            r#"{"account":12345678901234567890123}"#,
            r#"[1, 2, 0.12345678901234567890]"#,
        ] {
            let b = body(text);
            assert!(b.json().is_some(), "{text}");
            assert!(!b.is_exact(), "{text}");
            assert_eq!(b.canonical(), None, "{text}");
            assert_eq!(b.identity_bytes(), (false, text.as_bytes()));
        }
    }

    #[test]
    fn strings_that_look_like_numbers_are_skipped() {
        let b = body(r#"{"a":"1e-400 \" 12345678901234567890123","b\\":1}"#);
        assert!(b.is_exact());
    }

    #[test]
    fn identity_is_canonical_for_exact_json() {
        let b = body(r#"{ "b": 1, "a": [true, null] }"#);
        assert_eq!(
            b.identity_bytes(),
            (true, &br#"{"a":[true,null],"b":1}"#[..])
        );
        let raw = body("not json");
        assert_eq!(raw.identity_bytes(), (false, &b"not json"[..]));
    }

    #[test]
    fn decimal_normalisation() {
        let d = |t: &str| Decimal::parse(t).unwrap();
        assert_eq!(d("1.50"), d("1.5"));
        assert_eq!(d("150e-2"), d("1.5"));
        assert_eq!(d("0.0015e3"), d("1.5"));
        assert_eq!(d("0"), d("-0.000e5"));
        assert_ne!(d("1"), d("-1"));
        assert_ne!(d("1"), d("10"));
        assert_eq!(d("1e999999999999999999999999").exp, i64::MAX);
        assert_eq!(Decimal::parse("1e"), None);
        assert_eq!(Decimal::parse(".5"), None);
        assert_eq!(Decimal::parse("1.x"), None);
    }
}
