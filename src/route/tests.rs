use super::*;
use crate::path::PathTemplate;
use crate::policy::{
    BodyFingerprint, FingerprintSpec, KeyFormat, OnAmbiguous, OnConcurrent, OnFailure, StatusSet,
};
use crate::template::Template;
use std::time::Duration;

/// A route with the SPEC's defaults, for tests across the crate.
pub(crate) fn policy(name: &str, methods: &[Method], path: &str, keys: &[&str]) -> RoutePolicy {
    RoutePolicy {
        name: name.to_owned(),
        methods: methods.to_vec(),
        path: PathTemplate::parse(path).unwrap(),
        key: keys.iter().map(|k| Template::parse(k).unwrap()).collect(),
        require_key: true,
        max_key_length: 255,
        scope: Template::empty(),
        fingerprint: FingerprintSpec {
            method: true,
            path: true,
            body: BodyFingerprint::Whole,
        },
        store_statuses: StatusSet::default(),
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(24 * 3600),
        on_concurrent: OnConcurrent::Conflict,
        wait_timeout: Duration::from_secs(10),
        on_failure: OnFailure::Replay,
        on_ambiguous: OnAmbiguous::Hold,
        on_unknown: crate::policy::OnUnknown::Retry,
        upstream_key_window: None,
        reconcile: None,
        breaker: None,
        store_headers: Default::default(),
        max_request_bytes: 1 << 20,
        max_response_bytes: 1 << 20,
        forward_key_header: http::header::HeaderName::from_static("idempotency-key"),
        forward_key_format: KeyFormat::Plain,
        bind_credentials: vec![http::header::AUTHORIZATION, http::header::COOKIE],
        credentials_absent: Default::default(),
        mcp: None,
    }
}

fn table() -> RouteTable {
    RouteTable::new(vec![
        Arc::new(policy(
            "charge",
            &[Method::POST],
            "/invoices/{id}/charge",
            &["c:{path.id}"],
        )),
        Arc::new(policy(
            "put_any",
            &[Method::PUT, Method::PATCH],
            "/{p*}",
            &["{header.idempotency-key}"],
        )),
        Arc::new(policy(
            "charge_too",
            &[Method::POST],
            "/invoices/{x}/charge",
            &["never"],
        )),
        Arc::new(policy(
            "all_post",
            &[Method::POST],
            "/{p*}",
            &["{header.idempotency-key}"],
        )),
    ])
}

#[test]
fn route_table_first_match_wins() {
    let t = table();
    let (route, captures) = t.find(&Method::POST, "/invoices/7/charge").unwrap();
    assert_eq!(route.name, "charge");
    assert_eq!(captures.get("id"), Some("7"));
    let (route, captures) = t.find(&Method::PATCH, "/invoices/7/charge").unwrap();
    assert_eq!(route.name, "put_any");
    assert_eq!(captures.get("p"), Some("invoices/7/charge"));
    assert_eq!(t.find(&Method::POST, "/emails").unwrap().0.name, "all_post");
    assert_eq!(t.find(&Method::POST, "/").unwrap().0.name, "all_post");
    assert_eq!(t.routes().len(), 4);
}

#[test]
fn route_table_misses() {
    let t = table();
    assert!(t.find(&Method::GET, "/invoices/7/charge").is_none());
    assert!(t.find(&Method::DELETE, "/").is_none());
    assert!(t.find(&Method::POST, "*").is_none());
    let ext = Method::from_bytes(b"PURGE").unwrap();
    assert!(t.find(&ext, "/x").is_none());
    assert!(RouteTable::default().find(&Method::POST, "/").is_none());
}

/// A path that matches a route only once `%2F` / `%5C` are decoded is found (issue 46
/// §6's variants, the escape a framework like Starlette decodes before routing); a path
/// without them, or that matches nothing decoded, is not.
#[test]
fn a_route_behind_an_encoded_slash_is_found() {
    let t = RouteTable::new(vec![Arc::new(policy(
        "charge",
        &[Method::POST],
        "/invoices/{id}/charge",
        &["c:{path.id}"],
    ))]);
    let post = Method::POST;
    for path in [
        "/invoices/X%2Fcharge",
        "/invoices/X%2fcharge",
        "/invoices%2FX%5Ccharge",
        "%2Finvoices/X/charge",
    ] {
        let found = t.behind_encoded_slash(&post, path);
        assert_eq!(found.map(|r| r.name.as_str()), Some("charge"), "{path}");
    }
    for path in [
        "/invoices/X/charge2",
        "/invoices/X%2Frefund%2Fnow",
        "/invoices/X%2",
    ] {
        assert!(t.behind_encoded_slash(&post, path).is_none(), "{path}");
    }
    assert!(t
        .behind_encoded_slash(&Method::GET, "/invoices/X%2Fcharge")
        .is_none());
}
