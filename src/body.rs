//! The buffered request body of a protected route, parsed as JSON at most once.
//!
//! # Why "exact"
//! `serde_json::Value` stores a number that does not fit `u64`/`i64`, or a float with
//! more digits than `f64` holds, as a rounded `f64`: `12345678901234567890123` and
//! `12345678901234567890124` parse to the same value. Canonical JSON of such a body
//! would make two different requests look identical (a wrong replay), so a body with a
//! number that does not survive parsing exactly is flagged, and fingerprints fall back
//! to its raw bytes.

use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::Value;

use crate::canonical;

/// A request body read up to the route's `max_request_bytes`.
#[derive(Debug, Default)]
pub struct BodyView {
    raw: Bytes,
    json: OnceLock<Option<Value>>,
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
    /// deeper than serde_json's recursion limit of 128).
    pub fn json(&self) -> Option<&Value> {
        self.json
            .get_or_init(|| {
                if self.raw.is_empty() {
                    None
                } else {
                    serde_json::from_slice(&self.raw).ok()
                }
            })
            .as_ref()
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
