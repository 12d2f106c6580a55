//! Pure key derivation: route policy + request view → rendered key, store key,
//! fingerprint, credential hash. No I/O.
//!
//! Every hash here feeds its fields through [`Prefixed`] (u64 big-endian length, then
//! the bytes), so no two different field lists hash the same input:
//! `("a", "bc")` and `("ab", "c")` never collide.

use std::fmt;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use percent_encoding::{utf8_percent_encode, CONTROLS};
use sha2::{Digest, Sha256};

use crate::body::BodyView;
use crate::config::{BodyFingerprint, FingerprintSpec, KeyFormat, RoutePolicy};
use crate::template::{self, RenderError, RequestView};

/// The store's identity for an intent: SHA-256 over length-prefixed (route, scope, key),
/// so `("a", "bc")` and `("ab", "c")` never collide. Hex only when printed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey(pub [u8; 32]);

/// Why no usable key could be derived. Maps to 400 `idempotency_key_invalid` and 400
/// `body_not_json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The message says what is wrong, never the raw value.
    #[error("invalid idempotency key: {0}")]
    Invalid(String),
    #[error("the key uses the request body, but the body is not JSON")]
    BodyNotJson,
}

impl From<RenderError> for KeyError {
    fn from(err: RenderError) -> Self {
        match err {
            RenderError::BodyNotJson => KeyError::BodyNotJson,
            RenderError::Invalid(why) => KeyError::Invalid(why),
        }
    }
}

// === impl StoreKey ===

impl StoreKey {
    pub fn new(route: &str, scope: &str, key: &str) -> StoreKey {
        let mut h = Prefixed::new();
        h.field(route.as_bytes());
        h.field(scope.as_bytes());
        h.field(key.as_bytes());
        StoreKey(h.finish())
    }
}

impl StoreKey {
    /// The 64 lowercase hex characters of `Display`, without allocating.
    pub fn hex(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        // 64 bytes of room for 32 bytes of input: cannot fail.
        let _ = hex::encode_to_slice(self.0, &mut out);
        out
    }
}

impl fmt::Display for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreKey({self})")
    }
}

// === keys and scope ===

/// The route's key: alternatives in order, the first that renders wins; `Ok(None)`
/// when none resolves. The winner must be 1..=`max_key_length` bytes of printable
/// ASCII.
///
/// An error from an alternative (a body placeholder on a non-JSON body, a
/// present-but-empty `Idempotency-Key`) stops the search instead of falling through:
/// the caller sent something malformed and should hear about it (SPEC §2) rather than
/// have a later alternative — or no protection at all — silently chosen. Alternatives
/// after the winner are never evaluated.
pub fn render_key(
    policy: &RoutePolicy,
    view: &RequestView<'_>,
) -> Result<Option<String>, KeyError> {
    for alternative in &policy.key {
        if let Some(key) = alternative.render(view)? {
            validate_key(&key, policy.max_key_length)?;
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// The route's scope: `Some("")` for the empty template, `None` when it does not
/// resolve (the caller treats that like a missing key).
pub fn render_scope(
    policy: &RoutePolicy,
    view: &RequestView<'_>,
) -> Result<Option<String>, KeyError> {
    if policy.scope.is_empty() {
        return Ok(Some(String::new()));
    }
    Ok(policy.scope.render(view)?)
}

/// 1..=`max` bytes, printable ASCII (0x20..=0x7E).
fn validate_key(key: &str, max: usize) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Invalid("the key is empty".to_owned()));
    }
    if key.len() > max {
        return Err(KeyError::Invalid(format!(
            "the key is {} bytes long; the limit is {max}",
            key.len()
        )));
    }
    if let Some(at) = key.bytes().position(|b| !(0x20..=0x7E).contains(&b)) {
        return Err(KeyError::Invalid(format!(
            "the key contains a non-printable or non-ASCII character at byte {at}; \
             keys are printable ASCII"
        )));
    }
    Ok(())
}

// === fingerprint and credentials ===

/// What must be identical for a repeat to count as the same request: SHA-256 over the
/// enabled parts, each tagged and length-prefixed. `path_and_query` is the request
/// target as sent (the query is part of the request).
///
/// The body part is canonical JSON when the body is JSON (key order and whitespace do
/// not matter), raw bytes otherwise — and also for JSON with a number serde_json would
/// round (see [`BodyView::is_exact`]), so two different amounts never look alike.
pub fn fingerprint(
    spec: &FingerprintSpec,
    method: &Method,
    path_and_query: &str,
    body: &BodyView,
) -> [u8; 32] {
    let mut h = Prefixed::new();
    if spec.method {
        h.tag(b'm');
        h.field(method.as_str().as_bytes());
    }
    if spec.path {
        h.tag(b'p');
        h.field(path_and_query.as_bytes());
    }
    match &spec.body {
        BodyFingerprint::Ignore => {}
        BodyFingerprint::Whole => body_whole(&mut h, body),
        BodyFingerprint::Fields(paths) => body_fields(&mut h, body, paths),
    }
    h.finish()
}

fn body_whole(h: &mut Prefixed, body: &BodyView) {
    let (canonical, bytes) = body.identity_bytes();
    h.tag(if canonical { b'j' } else { b'r' });
    h.field(bytes);
}

/// Canonical JSON of each listed field (missing → `null`); raw bytes when the body is
/// not JSON or not exact, so nothing about it is ignored that could differ.
fn body_fields(h: &mut Prefixed, body: &BodyView, paths: &[template::FieldPath]) {
    let json = body.json().filter(|_| body.is_exact());
    let Some(json) = json else {
        h.tag(b'r');
        h.field(body.raw());
        return;
    };
    h.tag(b'f');
    for path in paths {
        let value = template::lookup(json, path).unwrap_or(&serde_json::Value::Null);
        h.field(&crate::canonical::to_vec(value));
    }
}

/// Binds a record to its caller: each header name, then how many values it has, then
/// each value. An absent header (0 values) differs from an empty one (1 empty value).
pub fn credential_hash(names: &[HeaderName], headers: &HeaderMap) -> [u8; 32] {
    let mut h = Prefixed::new();
    for name in names {
        h.field(name.as_str().as_bytes());
        let values = headers.get_all(name);
        h.count(values.iter().count());
        for value in values {
            h.field(value.as_bytes());
        }
    }
    h.finish()
}

// === what goes upstream ===

/// The key sent upstream: `key` for the first attempt, `<key>:attempt-<n>` from the
/// second on (providers answer a reused key with the stored error; SPEC §1).
pub fn upstream_key(key: &str, attempt: u32) -> String {
    if attempt <= 1 {
        key.to_owned()
    } else {
        format!("{key}:attempt-{attempt}")
    }
}

/// The forwarded header value, plain or as an RFC 8941 sf-string (`"` and `\` escaped).
///
/// Keys are validated printable ASCII before they get here. Should a control or non-ASCII
/// character slip through anyway, it is percent-encoded rather than panicking.
pub fn forward_key_value(key: &str, format: KeyFormat) -> HeaderValue {
    let safe = utf8_percent_encode(key, CONTROLS).to_string();
    let text = match format {
        KeyFormat::Plain => safe,
        KeyFormat::SfString => {
            let mut quoted = String::with_capacity(safe.len() + 2);
            quoted.push('"');
            for c in safe.chars() {
                if matches!(c, '"' | '\\') {
                    quoted.push('\\');
                }
                quoted.push(c);
            }
            quoted.push('"');
            quoted
        }
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

// === hashing helper ===

/// SHA-256 fed with length-prefixed fields.
struct Prefixed(Sha256);

impl Prefixed {
    fn new() -> Self {
        Prefixed(Sha256::new())
    }

    fn field(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.0.update(bytes);
    }

    fn count(&mut self, n: usize) {
        self.0.update((n as u64).to_be_bytes());
    }

    /// A one-byte marker naming the part that follows.
    fn tag(&mut self, tag: u8) {
        self.0.update([tag]);
    }

    fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RoutePolicy;
    use crate::route::tests::policy;
    use crate::route::Captures;
    use crate::template::{FieldPath, Template};
    use bytes::Bytes;

    fn body(text: &str) -> BodyView {
        BodyView::new(Bytes::copy_from_slice(text.as_bytes()))
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    /// Render `policy`'s key and scope against a POST with these headers and body.
    fn derive(
        policy: &RoutePolicy,
        hdrs: &HeaderMap,
        body_text: &str,
    ) -> (
        Result<Option<String>, KeyError>,
        Result<Option<String>, KeyError>,
    ) {
        let captures: Captures = [("id", "inv_1")].into_iter().collect();
        let body = body(body_text);
        let view = RequestView {
            method: &Method::POST,
            route: &policy.name,
            captures: &captures,
            query: Some("q=1"),
            headers: hdrs,
            body: &body,
        };
        (render_key(policy, &view), render_scope(policy, &view))
    }

    fn key(
        keys: &[&str],
        hdrs: &[(&'static str, &str)],
        body: &str,
    ) -> Result<Option<String>, KeyError> {
        let p = policy("r", &[Method::POST], "/i/{id}", keys);
        derive(&p, &headers(hdrs), body).0
    }

    fn invalid_message(result: Result<Option<String>, KeyError>) -> String {
        match result {
            Err(KeyError::Invalid(msg)) => msg,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    // --- StoreKey ---

    #[test]
    fn store_key_is_length_prefixed() {
        assert_ne!(StoreKey::new("r", "a", "bc"), StoreKey::new("r", "ab", "c"));
        assert_ne!(StoreKey::new("a", "bc", ""), StoreKey::new("ab", "c", ""));
        assert_ne!(StoreKey::new("r", "", "k"), StoreKey::new("", "r", "k"));
        assert_eq!(StoreKey::new("r", "s", "k"), StoreKey::new("r", "s", "k"));
    }

    #[test]
    fn store_key_prints_as_hex() {
        let k = StoreKey::new("charge", "", "charge:inv_1");
        let hex = k.to_string();
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(format!("{k:?}"), format!("StoreKey({hex})"));
        // Pinned: a change here orphans every record already stored.
        let mut h = Sha256::new();
        for field in ["charge", "", "charge:inv_1"] {
            h.update((field.len() as u64).to_be_bytes());
            h.update(field.as_bytes());
        }
        assert_eq!(k.0, <[u8; 32]>::from(h.finalize()));
    }

    // --- render_key ---

    #[test]
    fn first_resolving_alternative_wins() {
        let keys = [
            "t:{header.x-task-id}:{header.x-step}",
            "{header.idempotency-key}",
        ];
        let both = [
            ("x-task-id", "t1"),
            ("x-step", "2"),
            ("idempotency-key", "k"),
        ];
        assert_eq!(key(&keys, &both, ""), Ok(Some("t:t1:2".into())));
        let only_caller = [("x-task-id", "t1"), ("idempotency-key", "k")];
        assert_eq!(key(&keys, &only_caller, ""), Ok(Some("k".into())));
        assert_eq!(key(&keys, &[("x-task-id", "t1")], ""), Ok(None));
        assert_eq!(key(&["c:{path.id}"], &[], ""), Ok(Some("c:inv_1".into())));
    }

    #[test]
    fn errors_stop_the_search() {
        let keys = ["{header.idempotency-key}", "{header.x-task-id}"];
        let r = key(&keys, &[("idempotency-key", ""), ("x-task-id", "t")], "");
        assert!(invalid_message(r).contains("present but empty"));
        let keys = ["{body.id}", "{header.idempotency-key}"];
        let r = key(&keys, &[("idempotency-key", "k")], "not json");
        assert_eq!(r, Err(KeyError::BodyNotJson));
        // A missing field (on a JSON body) falls through normally.
        let r = key(&keys, &[("idempotency-key", "k")], r#"{"other":1}"#);
        assert_eq!(r, Ok(Some("k".into())));
        // Later alternatives are never evaluated once one wins.
        let keys = ["{header.x-task-id}", "{header.idempotency-key}"];
        let r = key(&keys, &[("x-task-id", "t"), ("idempotency-key", "")], "");
        assert_eq!(r, Ok(Some("t".into())));
    }

    #[test]
    fn rendered_keys_are_validated() {
        let mut p = policy("r", &[Method::POST], "/", &["{body.k}"]);
        p.max_key_length = 8;
        let run = |text: &str| derive(&p, &HeaderMap::new(), text).0;
        assert_eq!(run(r#"{"k":"12345678"}"#), Ok(Some("12345678".into())));
        let msg = invalid_message(run(r#"{"k":"123456789"}"#));
        assert!(
            msg.contains("9 bytes") && msg.contains("limit is 8"),
            "{msg}"
        );
        let msg = invalid_message(run(r#"{"k":"a\nb"}"#));
        assert!(
            msg.contains("non-printable") && msg.contains("byte 1"),
            "{msg}"
        );
        let msg = invalid_message(run(r#"{"k":"é"}"#));
        assert!(msg.contains("non-ASCII"), "{msg}");
        assert_eq!(run(r#"{"k":" ~"}"#), Ok(Some(" ~".into())));
        // A template that renders to nothing at all is an empty key.
        let empty = policy("r", &[Method::POST], "/", &[""]);
        let msg = invalid_message(derive(&empty, &HeaderMap::new(), "").0);
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn key_error_messages() {
        let err = KeyError::from(RenderError::Invalid("why".into()));
        assert_eq!(err.to_string(), "invalid idempotency key: why");
        assert_eq!(
            KeyError::from(RenderError::BodyNotJson),
            KeyError::BodyNotJson
        );
    }

    // --- render_scope ---

    #[test]
    fn scope() {
        let mut p = policy("r", &[Method::POST], "/", &["{header.idempotency-key}"]);
        let hdrs = headers(&[("x-tenant-id", "acme")]);
        assert_eq!(derive(&p, &hdrs, "").1, Ok(Some(String::new())));
        p.scope = Template::parse("{header.x-tenant-id}").unwrap();
        assert_eq!(derive(&p, &hdrs, "").1, Ok(Some("acme".into())));
        assert_eq!(derive(&p, &HeaderMap::new(), "").1, Ok(None));
        p.scope = Template::parse("{body.tenant}").unwrap();
        assert_eq!(derive(&p, &hdrs, "x").1, Err(KeyError::BodyNotJson));
    }

    // --- fingerprint ---

    fn spec(body: BodyFingerprint) -> FingerprintSpec {
        FingerprintSpec {
            method: true,
            path: true,
            body,
        }
    }

    fn fp(spec: &FingerprintSpec, body_text: &str) -> [u8; 32] {
        fingerprint(spec, &Method::POST, "/tickets?x=1", &body(body_text))
    }

    #[test]
    fn fingerprint_ignores_key_order_and_whitespace() {
        let s = spec(BodyFingerprint::Whole);
        let a = fp(
            &s,
            r#"{"amount":100,"currency":"eur","meta":{"b":1,"a":2}}"#,
        );
        let b = fp(
            &s,
            "{ \"meta\": {\"a\": 2, \"b\": 1},\n \"currency\": \"eur\", \"amount\": 100 }",
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            fp(
                &s,
                r#"{"amount":101,"currency":"eur","meta":{"b":1,"a":2}}"#
            )
        );
    }

    #[test]
    fn fingerprint_covers_method_and_path_when_enabled() {
        let s = spec(BodyFingerprint::Whole);
        let b = body("{}");
        let base = fingerprint(&s, &Method::POST, "/a?x=1", &b);
        assert_ne!(base, fingerprint(&s, &Method::PUT, "/a?x=1", &b));
        assert_ne!(base, fingerprint(&s, &Method::POST, "/a?x=2", &b));
        let off = FingerprintSpec {
            method: false,
            path: false,
            body: BodyFingerprint::Whole,
        };
        assert_eq!(
            fingerprint(&off, &Method::POST, "/a", &b),
            fingerprint(&off, &Method::PUT, "/b", &b)
        );
        let nothing = FingerprintSpec {
            method: false,
            path: false,
            body: BodyFingerprint::Ignore,
        };
        assert_eq!(
            fingerprint(&nothing, &Method::POST, "/a", &body("1")),
            fingerprint(&nothing, &Method::POST, "/a", &body("2"))
        );
    }

    #[test]
    fn fingerprint_of_non_json_uses_raw_bytes() {
        let s = spec(BodyFingerprint::Whole);
        assert_eq!(fp(&s, "a=1&b=2"), fp(&s, "a=1&b=2"));
        assert_ne!(fp(&s, "a=1&b=2"), fp(&s, "b=2&a=1"));
        assert_ne!(fp(&s, ""), fp(&s, " "));
        // A non-JSON body never equals a JSON body with the same canonical text.
        assert_ne!(fp(&s, "{\"a\":1"), fp(&s, "{\"a\":1}"));
    }

    #[test]
    fn fingerprint_never_merges_rounded_numbers() {
        let s = spec(BodyFingerprint::Whole);
        let a = fp(&s, r#"{"acct":12345678901234567890123}"#);
        let b = fp(&s, r#"{"acct":12345678901234567890124}"#);
        assert_ne!(a, b);
        let fields = spec(BodyFingerprint::Fields(vec![
            FieldPath::parse("acct").unwrap()
        ]));
        assert_ne!(
            fp(&fields, r#"{"acct":12345678901234567890123}"#),
            fp(&fields, r#"{"acct":12345678901234567890124}"#)
        );
    }

    #[test]
    fn fingerprint_fields_ignore_other_fields() {
        let paths = ["amount", "currency", "items.0.sku"];
        let s = spec(BodyFingerprint::Fields(
            paths.iter().map(|p| FieldPath::parse(p).unwrap()).collect(),
        ));
        let a = fp(
            &s,
            r#"{"amount":100,"currency":"eur","items":[{"sku":"x","n":1}],"note":"a"}"#,
        );
        let b = fp(
            &s,
            r#"{"note":"b","currency":"eur","amount":100,"items":[{"n":2,"sku":"x"}]}"#,
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            fp(
                &s,
                r#"{"amount":200,"currency":"eur","items":[{"sku":"x"}]}"#
            )
        );
        assert_ne!(
            a,
            fp(
                &s,
                r#"{"amount":100,"currency":"usd","items":[{"sku":"x"}]}"#
            )
        );
        // Missing is null; a field moving between listed paths is a change.
        assert_eq!(
            fp(&s, r#"{"amount":100}"#),
            fp(&s, r#"{"amount":100,"currency":null}"#)
        );
        assert_ne!(fp(&s, r#"{"amount":1}"#), fp(&s, r#"{"currency":1}"#));
        // Not JSON: raw bytes.
        assert_ne!(fp(&s, "amount=1"), fp(&s, "amount=2"));
    }

    // --- credentials ---

    #[test]
    fn credential_hash_distinguishes_absent_empty_and_values() {
        let names = [
            http::header::AUTHORIZATION,
            HeaderName::from_static("x-api-key"),
        ];
        let h = |pairs: &[(&'static str, &str)]| credential_hash(&names, &headers(pairs));
        let alice = h(&[("authorization", "Bearer alice")]);
        assert_eq!(
            alice,
            h(&[("authorization", "Bearer alice"), ("x-other", "1")])
        );
        assert_ne!(alice, h(&[("authorization", "Bearer bob")]));
        assert_ne!(h(&[]), h(&[("authorization", "")]));
        assert_ne!(h(&[("authorization", "")]), h(&[("x-api-key", "")]));
        assert_ne!(
            h(&[("authorization", "a"), ("authorization", "b")]),
            h(&[("authorization", "ab")])
        );
        assert_ne!(
            h(&[("authorization", "a"), ("authorization", "b")]),
            h(&[("authorization", "b"), ("authorization", "a")])
        );
        assert_eq!(
            credential_hash(&[], &headers(&[("authorization", "x")])),
            credential_hash(&[], &HeaderMap::new())
        );
    }

    // --- upstream ---

    #[test]
    fn upstream_keys_by_attempt() {
        assert_eq!(upstream_key("k", 0), "k");
        assert_eq!(upstream_key("k", 1), "k");
        assert_eq!(upstream_key("k", 2), "k:attempt-2");
        assert_eq!(upstream_key("k", 10), "k:attempt-10");
    }

    #[test]
    fn forward_key_values() {
        assert_eq!(forward_key_value("abc 1", KeyFormat::Plain), "abc 1");
        assert_eq!(forward_key_value("abc", KeyFormat::SfString), "\"abc\"");
        assert_eq!(
            forward_key_value(r#"a"b\c"#, KeyFormat::SfString),
            r#""a\"b\\c""#
        );
        // Not reachable with validated keys, but never a panic.
        assert_eq!(forward_key_value("a\nb", KeyFormat::Plain), "a%0Ab");
        assert_eq!(forward_key_value("é", KeyFormat::SfString), "\"%C3%A9\"");
    }

    #[test]
    fn sf_string_round_trips_through_the_header_parser() {
        for k in ["abc", r#"a"b"#, r#"a\b"#, r#"\""#, " x "] {
            let value = forward_key_value(k, KeyFormat::SfString);
            let hdrs = {
                let mut m = HeaderMap::new();
                m.insert("idempotency-key", value);
                m
            };
            let p = policy("r", &[Method::POST], "/", &["{header.idempotency-key}"]);
            assert_eq!(derive(&p, &hdrs, "").0, Ok(Some(k.to_owned())), "{k}");
        }
    }

    /// Every string up to 4 characters over an alphabet of troublemakers: parsing,
    /// matching and rendering never panic (a stand-in until the fuzz target exists).
    #[test]
    fn never_panics_on_odd_input() {
        const ALPHABET: [&str; 13] = [
            "{", "}", ".", "%", "/", "*", "\"", "\\", "a", "0", "é", "+", "\t",
        ];
        let mut inputs = vec![String::new()];
        let mut level = inputs.clone();
        for _ in 0..4 {
            level = level
                .iter()
                .flat_map(|s| ALPHABET.iter().map(move |c| format!("{s}{c}")))
                .collect();
            inputs.extend(level.iter().cloned());
        }
        let wildcard = crate::route::PathTemplate::parse("/{p*}").unwrap();
        let everything = Template::parse("{query.a}{query.%}{body.a.0}{body_hash}").unwrap();
        let p = policy("r", &[Method::POST], "/{id}", &["{header.idempotency-key}"]);
        for s in &inputs {
            let _ = Template::parse(s);
            let _ = FieldPath::parse(s);
            if let Ok(t) = crate::route::PathTemplate::parse(&format!("/{s}")) {
                let _ = t.matches(&format!("/{s}"));
                let _ = t.matches(s);
            }
            let _ = wildcard.matches(s);
            let _ = wildcard.matches(&format!("/{s}"));
            if let Ok(value) = HeaderValue::from_str(s) {
                let mut hdrs = HeaderMap::new();
                hdrs.insert("idempotency-key", value);
                let _ = derive(&p, &hdrs, s);
            }
            let b = body(s);
            let view = RequestView {
                method: &Method::POST,
                route: "r",
                captures: &Captures::default(),
                query: Some(s),
                headers: &HeaderMap::new(),
                body: &b,
            };
            let _ = everything.render(&view);
            let _ = fingerprint(&spec(BodyFingerprint::Whole), &Method::POST, s, &b);
        }
        assert_eq!(inputs.len(), 1 + 13 + 169 + 2197 + 28561);
    }
}
