//! SPEC §2 and §4 end to end: key sources and their order, validation, scope, the
//! forwarded key header, passthrough rules, and proxy hygiene (hop-by-hop, forwarding).

use crate::support;

use support::env::{Backend, Env};
use support::harness::{post, send, url};

const ROUTES: &str = r#"
routes:
  - name: send_email
    path: /emails
    key: ["{header.x-task-id}:{header.x-step}", "{header.idempotency-key}"]
  - name: create_ticket
    path: /tickets
    key: "ticket:{body.customerId}:{body_hash}"
    max_request_bytes: 64
  - name: refund
    path: /refunds
    key: "refund:{query.charge}"
    scope: "{header.x-tenant-id}"
    forward_key_header: PayPal-Request-Id
    forward_key_format: sf-string
  - name: optional
    path: /optional
    key: "{header.idempotency-key}"
    require_key: false
  - name: lookup
    methods: [GET]
    path: /lookups/{id}
    key: "lookup:{path.id}"
"#;

async fn env() -> (Env, support::harness::Idem) {
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(ROUTES).await;
    (env, idem)
}

#[tokio::test]
async fn missing_key_is_400_and_nothing_runs() {
    let (env, idem) = env().await;
    let r = post(&url(&idem, "/emails"), &[], "{}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "idempotency_key_missing");
    assert!(r.json()["detail"]
        .as_str()
        .unwrap()
        .contains("Nothing was executed"));
    assert_eq!(env.upstream.total_executions(), 0);
}

#[tokio::test]
async fn alternatives_are_tried_in_order() {
    let (env, idem) = env().await;
    let u = url(&idem, "/emails");
    let orchestrated = [
        ("x-task-id", "t1"),
        ("x-step", "3"),
        ("idempotency-key", "model-chosen"),
    ];
    post(&u, &orchestrated, "{}").await;
    assert_eq!(
        env.upstream.executions("t1:3"),
        1,
        "orchestrator key preferred"
    );
    post(&u, &[("idempotency-key", "k1")], "{}").await;
    assert_eq!(
        env.upstream.executions("k1"),
        1,
        "caller key as last resort"
    );
}

#[tokio::test]
async fn sf_string_idempotency_key_equals_the_bare_token() {
    let (env, idem) = env().await;
    let u = url(&idem, "/emails");
    post(&u, &[("idempotency-key", "abc")], "{}").await;
    let r = post(&u, &[("idempotency-key", "\"abc\"")], "{}").await;
    assert!(r.replayed());
    assert_eq!(env.upstream.total_executions(), 1);
}

#[tokio::test]
async fn invalid_keys_are_400() {
    let (env, idem) = env().await;
    let u = url(&idem, "/emails");
    let r = post(&u, &[("idempotency-key", "")], "{}").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "idempotency_key_invalid")
    );
    let long = "k".repeat(256);
    let r = post(&u, &[("idempotency-key", long.as_str())], "{}").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "idempotency_key_invalid")
    );
    let t = url(&idem, "/tickets");
    let r = post(&t, &[], r#"{"customerId":"cüs"}"#).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "idempotency_key_invalid")
    );
    assert_eq!(env.upstream.total_executions(), 0);
}

#[tokio::test]
async fn body_keys_need_json_and_respect_the_size_limit() {
    let (env, idem) = env().await;
    let t = url(&idem, "/tickets");
    let r = post(&t, &[], "customerId=1").await;
    assert_eq!((r.status, r.code().as_str()), (400, "body_not_json"));
    let big = format!(r#"{{"customerId":"c1","note":"{}"}}"#, "x".repeat(100));
    let r = post(&t, &[], &big).await;
    assert_eq!((r.status, r.code().as_str()), (413, "body_too_large"));
    let r = post(&t, &[], r#"{"customerId":"c1","n":1}"#).await;
    assert_eq!(r.status, 201);
    let r = post(&t, &[], r#"{"n":1, "customerId":"c1"}"#).await;
    assert!(r.replayed(), "same canonical body, same key");
    let r = post(&t, &[], r#"{"customerId":"c1","n":2}"#).await;
    assert!(!r.replayed(), "body_hash differs: a different ticket");
    assert_eq!(env.upstream.total_executions(), 2);
}

#[tokio::test]
async fn scope_separates_tenants_and_vendor_header_is_sf_string() {
    let (env, idem) = env().await;
    let u = url(&idem, "/refunds?charge=ch_1");
    let a = post(&u, &[("x-tenant-id", "acme")], "{}").await;
    let b = post(&u, &[("x-tenant-id", "globex")], "{}").await;
    assert!(!a.replayed() && !b.replayed());
    assert_ne!(a.body, b.body);
    assert!(post(&u, &[("x-tenant-id", "acme")], "{}").await.replayed());
    let got = env.upstream.received();
    assert_eq!(got[0].headers["paypal-request-id"], "\"refund:ch_1\"");
    assert!(got[0].headers.get("idempotency-key").is_none());
    // No tenant: the scope does not resolve, so the key is missing.
    assert_eq!(post(&u, &[], "{}").await.status, 400);
}

#[tokio::test]
async fn require_key_false_forwards_unprotected() {
    let (env, idem) = env().await;
    let u = url(&idem, "/optional");
    let a = post(&u, &[], "{}").await;
    let b = post(&u, &[], "{}").await;
    assert_eq!((a.status, b.status), (201, 201));
    assert!(!b.replayed());
    assert_eq!(env.upstream.total_executions(), 2);
}

#[tokio::test]
async fn read_only_and_unmatched_requests_pass_through() {
    let (env, idem) = env().await;
    let r = send(
        "GET",
        &url(&idem, "/emails"),
        &[("idempotency-key", "g")],
        "",
    )
    .await;
    assert!(!r.replayed());
    send(
        "GET",
        &url(&idem, "/emails"),
        &[("idempotency-key", "g")],
        "",
    )
    .await;
    assert_eq!(
        env.upstream.total_executions(),
        2,
        "GET is not made idempotent unless named"
    );
    let r = send("GET", &url(&idem, "/lookups/7"), &[], "").await;
    assert_eq!(r.status, 201);
    assert!(
        send("GET", &url(&idem, "/lookups/7"), &[], "")
            .await
            .replayed(),
        "a route may name GET"
    );
    let r = post(&url(&idem, "/elsewhere"), &[], "raw body, not json").await;
    assert_eq!(r.status, 201);
    assert_eq!(
        env.upstream.received().last().unwrap().body,
        "raw body, not json"
    );
}

#[tokio::test]
async fn default_reject_answers_404_for_unmatched() {
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(&format!("default: reject\n{ROUTES}")).await;
    let r = post(&url(&idem, "/elsewhere"), &[], "{}").await;
    assert_eq!((r.status, r.code().as_str()), (404, "no_route"));
    assert_eq!(env.upstream.total_executions(), 0);
}

#[tokio::test]
async fn hop_by_hop_headers_are_dropped_and_forwarding_is_appended() {
    let (env, idem) = env().await;
    let h = [
        ("idempotency-key", "hop"),
        ("connection", "x-private"),
        ("x-private", "secret"),
        ("x-forwarded-for", "10.1.2.3"),
    ];
    post(&url(&idem, "/emails"), &h, "{}").await;
    let got = &env.upstream.received()[0];
    assert!(got.headers.get("x-private").is_none());
    assert_eq!(got.headers["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(got.headers["forwarded"], "for=127.0.0.1");
}

#[tokio::test]
async fn fingerprint_can_be_limited_to_some_body_fields() {
    let env = Env::new(Backend::memory()).await;
    let routes = r#"
routes:
  - name: charge
    path: /charges/{id}
    key: "charge:{path.id}"
    fingerprint: {body: [amount, currency]}
  - name: notify
    path: /notify/{id}
    key: "notify:{path.id}"
    fingerprint: [method, path]
    bind_credentials: [x-api-key]
"#;
    let idem = env.idem(routes).await;
    let c = url(&idem, "/charges/1");
    post(&c, &[], r#"{"amount":5,"currency":"eur","trace":"a"}"#).await;
    let r = post(&c, &[], r#"{"trace":"b","currency":"eur","amount":5}"#).await;
    assert!(r.replayed(), "fields outside the fingerprint may change");
    let r = post(&c, &[], r#"{"amount":6,"currency":"eur"}"#).await;
    assert_eq!(r.status, 422);
    let n = url(&idem, "/notify/1");
    post(&n, &[("x-api-key", "k1"), ("authorization", "x")], "one").await;
    let r = post(&n, &[("x-api-key", "k1"), ("authorization", "y")], "two").await;
    assert!(r.replayed(), "body ignored; only x-api-key binds");
    assert_eq!(post(&n, &[("x-api-key", "k2")], "one").await.status, 403);
}

#[tokio::test]
async fn h2c_callers_are_served() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    let (env, idem) = env().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let req = http::Request::post(url(&idem, "/emails"))
            .header("idempotency-key", "h2")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let resp = client.request(req).await.expect("h2c request");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 201);
        bodies.push(resp.into_body().collect().await.unwrap().to_bytes());
    }
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!(env.upstream.executions("h2"), 1);
}
