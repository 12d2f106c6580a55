use super::*;
use crate::path::Captures;
use crate::policy::RoutePolicy;
use crate::route::tests::policy;
use crate::template::{FieldPath, Template};
use bytes::Bytes;
use sha2::{Digest, Sha256};

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
        mcp: None,
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

/// The staging buffer in `Prefixed` changes how the bytes reach SHA-256, never which
/// bytes: fields of every size around the buffer's edges give sha2's digest of the same
/// length-prefixed stream.
#[test]
fn staged_hashing_matches_one_stream() {
    let sizes = [
        0, 1, 7, 8, 100, 239, 240, 247, 248, 255, 256, 257, 300, 1000, 5000,
    ];
    for &first in &sizes {
        for &second in &sizes {
            let a: Vec<u8> = (0..first).map(|i| i as u8).collect();
            let b: Vec<u8> = (0..second).map(|i| (i * 7) as u8).collect();
            let mut h = super::Prefixed::new();
            h.tag(b'x');
            h.field(&a);
            h.count(3);
            h.field(&b);
            h.tag(b'y');
            let mut oracle = Sha256::new();
            oracle.update([b'x']);
            oracle.update((a.len() as u64).to_be_bytes());
            oracle.update(&a);
            oracle.update(3u64.to_be_bytes());
            oracle.update((b.len() as u64).to_be_bytes());
            oracle.update(&b);
            oracle.update([b'y']);
            let expected: [u8; 32] = oracle.finalize().into();
            assert_eq!(h.finish(), expected, "fields of {first} and {second} bytes");
        }
    }
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
    let wildcard = crate::path::PathTemplate::parse("/{p*}").unwrap();
    let everything = Template::parse("{query.a}{query.%}{body.a.0}{body_hash}").unwrap();
    let p = policy("r", &[Method::POST], "/{id}", &["{header.idempotency-key}"]);
    for s in &inputs {
        let _ = Template::parse(s);
        let _ = FieldPath::parse(s);
        if let Ok(t) = crate::path::PathTemplate::parse(&format!("/{s}")) {
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
            mcp: None,
        };
        let _ = everything.render(&view);
        let _ = fingerprint(&spec(BodyFingerprint::Whole), &Method::POST, s, &b);
    }
    assert_eq!(inputs.len(), 1 + 13 + 169 + 2197 + 28561);
}
