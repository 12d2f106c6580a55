//! The operators' side of unknown outcomes (SPEC §1 "Unknown outcomes"): `GET
//! /v1/unknown`, `POST /v1/keys/{route}/{key}/resolve` and its fencing, the admin token,
//! the metrics, and `idem keys unknown|resolve`.
//!
//! Unknown outcomes are made through the store (a record whose lease ended, kept for
//! the retention), or through the proxy: an upstream that does not answer within
//! `upstream.timeout`, on a route with `on_ambiguous: hold`.

use crate::support;

use std::process::Command;
use std::time::Duration;

use futures_util::future::join_all;
use idem::key::StoreKey;
use idem::store::{Record, Reserve, Store};
use serde_json::{json, Value};

use support::env::{Backend, Env};
use support::harness::{admin_url, post, send, url, Resp};
use support::poll::eventually;
use support::store::unclocked;

const ROUTES: &str = r#"
admin:
  token: s3cret
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
    lease: 300ms
    on_ambiguous: hold
    on_unknown: hold
  - name: refund
    path: /refunds/{id}
    key: "refund:{path.id}"
    scope: "{header.x-tenant-id}"
"#;
const AUTH: (&str, &str) = ("authorization", "Bearer s3cret");
const JSON: (&str, &str) = ("content-type", "application/json");
const RETENTION: Duration = Duration::from_secs(3600);

async fn env() -> (Env, support::harness::Idem) {
    let env = Env::new(Backend::redis()).await;
    let idem = env.idem_with_timeout(ROUTES, "200ms").await;
    (env, idem)
}

/// A record for `key` whose lease ends after `lease`, kept for the retention: the store's
/// copy, with the lease's end and first send on the store's clock.
async fn seed(store: &Store, route: &str, scope: &str, key: &str, lease: Duration) -> Record {
    let mut record = Record::in_progress(route, scope, key, [1; 32], [2; 32], lease);
    record.trace = Some(Box::new(idem::store::record::TraceLink {
        trace_id: [0xab; 16],
        span_id: [0xcd; 8],
    }));
    let key = StoreKey::new(route, scope, key);
    let won = store.reserve(&key, &record, RETENTION).await.unwrap();
    assert!(matches!(won, Reserve::Won));
    store
        .get(&key)
        .await
        .unwrap()
        .expect("the record just reserved")
}

async fn unknown_now(store: &Store, route: &str, scope: &str, key: &str) -> Record {
    let record = seed(store, route, scope, key, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    record
}

async fn get(idem: &support::harness::Idem, path: &str) -> Resp {
    send("GET", &admin_url(idem, path), &[AUTH], "").await
}

/// `POST /v1/keys/{key}/resolve[?query]` for `key` = `route/key[?query]`.
async fn resolve(idem: &support::harness::Idem, key: &str, body: &Value) -> Resp {
    let (path, query) = key.split_once('?').unwrap_or((key, ""));
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let u = admin_url(idem, &format!("/v1/keys/{path}/resolve{query}"));
    send("POST", &u, &[AUTH, JSON], &body.to_string()).await
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_unknown_outcomes_and_on_request_those_in_flight() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let metrics = get(&idem, "/metrics").await.text();
    assert_eq!(
        metric(&metrics, r#"idem_unknown_outcomes{route="charge"}"#),
        0.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"idem_resolutions_total{route="refund",outcome="not_executed"}"#
        ),
        0.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"idem_reconciliations_total{route="charge",result="failed"}"#
        ),
        0.0
    );

    let store = env.backend.instance().await;
    let unknown = unknown_now(&store, "charge", "", "charge:inv_1").await;
    seed(
        &store,
        "refund",
        "acme",
        "refund:r1",
        Duration::from_secs(30),
    )
    .await;

    let listed = get(&idem, "/v1/unknown").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    let body = listed.json();
    assert_eq!(body["routes"], json!(["charge", "refund"]));
    assert_eq!(body["truncated"], json!(false));
    assert!(body.get("inflight").is_none(), "in flight only on request");
    let item = &body["unknown"][0];
    assert_eq!(body["unknown"].as_array().unwrap().len(), 1);
    for (field, want) in [
        ("route", json!("charge")),
        ("key", json!("charge:inv_1")),
        ("scope", json!("")),
        ("attempt", json!(1)),
        ("state", json!("unknown")),
        ("trace_id", json!("ab".repeat(16))),
    ] {
        assert_eq!(item[field], want, "{field} in {item}");
    }
    let ms = |v: &Value| humantime::parse_rfc3339(v.as_str().unwrap()).unwrap();
    let sent = std::time::UNIX_EPOCH + Duration::from_millis(unknown.sent_at_ms);
    let ended = std::time::UNIX_EPOCH + Duration::from_millis(unknown.expires_at_ms);
    assert_eq!(
        (ms(&item["first_sent_at"]), ms(&item["lease_ended_at"])),
        (sent, ended)
    );

    let both = get(&idem, "/v1/unknown?include=inflight").await.json();
    assert_eq!(both["inflight"][0]["key"], "refund:r1");
    assert_eq!(both["inflight"][0]["scope"], "acme");
    assert_eq!(both["inflight"][0]["state"], "in_flight");
    assert!(both["inflight"][0]["lease_ends_at"].is_string());
    let refund = get(&idem, "/v1/unknown?route=refund&include=inflight")
        .await
        .json();
    assert_eq!(
        (
            refund["unknown"].as_array().unwrap().len(),
            refund["inflight"].as_array().unwrap().len()
        ),
        (0, 1)
    );
    for bad in ["limit=0", "limit=1001", "limit=ten"] {
        let r = get(&idem, &format!("/v1/unknown?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("limit"));
    }
    // The listing also counted them.
    let metrics = get(&idem, "/metrics").await.text();
    assert_eq!(
        metric(&metrics, r#"idem_unknown_outcomes{route="charge"}"#),
        1.0
    );
    assert_eq!(
        metric(&metrics, r#"idem_unknown_outcomes{route="refund"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolved_as_completed_every_repeat_gets_that_response() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let charge = url(&idem, "/invoices/inv_9/charge");
    let first = post(&charge, &[("x-mock-delay-ms", "5000")], "{}").await;
    assert_eq!(first.status, 504, "{}", first.text());
    eventually(Duration::from_secs(5), "listed as unknown", async || {
        get(&idem, "/v1/unknown").await.json()["unknown"][0]["key"] == "charge:inv_9"
    })
    .await;

    let resolution = json!({"outcome": "completed", "status": 201,
        "headers": {"content-type": "application/json"}, "body": "{\"id\":\"ch_by_hand\"}"});
    let r = resolve(&idem, "charge/charge%3Ainv_9", &resolution).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["state"].clone(), r.json()["settled"].clone()),
        (json!("completed"), json!("resolved"))
    );
    let record = get(&idem, "/v1/keys/charge/charge%3Ainv_9?body=true")
        .await
        .json();
    assert_eq!(record["state"], "completed");
    assert_eq!(record["status"], 201);
    assert_eq!(record["body"], "{\"id\":\"ch_by_hand\"}");

    let repeat = post(&charge, &[], "{}").await;
    assert_eq!(repeat.status, 201, "{}", repeat.text());
    assert!(repeat.replayed());
    assert_eq!(repeat.header("content-type"), Some("application/json"));
    assert_eq!(repeat.text(), "{\"id\":\"ch_by_hand\"}");
    assert_eq!(
        env.upstream.executions("charge:inv_9"),
        1,
        "only the first send"
    );

    let again = resolve(
        &idem,
        "charge/charge%3Ainv_9",
        &json!({"outcome": "not_executed"}),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.json()["state"], "completed");
    let metrics = get(&idem, "/metrics").await.text();
    assert_eq!(
        metric(
            &metrics,
            r#"idem_resolutions_total{route="charge",outcome="completed"}"#
        ),
        1.0
    );
    assert_eq!(get(&idem, "/v1/unknown").await.json()["unknown"], json!([]));
    let metrics = get(&idem, "/metrics").await.text();
    assert_eq!(
        metric(&metrics, r#"idem_unknown_outcomes{route="charge"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolved_as_not_executed_the_record_waits_for_its_repeat() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let store = env.backend.instance().await;
    let before = unknown_now(&store, "refund", "acme", "refund:r2").await;
    let r = resolve(
        &idem,
        "refund/refund%3Ar2?scope=acme",
        &json!({"outcome": "not_executed"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let after = store
        .get(&StoreKey::new("refund", "acme", "refund:r2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.settled, Some(idem::store::Settled::NotExecuted));
    assert_eq!(
        (after.attempt, after.sent_at_ms, after.is_completed()),
        (before.attempt, before.sent_at_ms, false)
    );
    assert_ne!(
        after.token, before.token,
        "the attempt's owner can no longer write"
    );
    let shown = get(&idem, "/v1/keys/refund/refund%3Ar2?scope=acme")
        .await
        .json();
    assert_eq!(
        (shown["state"].clone(), shown["settled"].clone()),
        (json!("in_progress"), json!("not_executed"))
    );
    let listed = get(&idem, "/v1/unknown?include=inflight").await.json();
    assert_eq!(listed["unknown"], json!([]));
    assert_eq!(listed["inflight"][0]["state"], "not_executed");
    let again = resolve(
        &idem,
        "refund/refund%3Ar2?scope=acme",
        &json!({"outcome": "not_executed"}),
    )
    .await;
    assert_eq!(
        (again.status, again.json()["state"].clone()),
        (409, json!("not_executed"))
    );
    let metrics = get(&idem, "/metrics").await.text();
    assert_eq!(
        metric(
            &metrics,
            r#"idem_resolutions_total{route="refund",outcome="not_executed"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolved_as_not_executed_the_next_repeat_is_sent_once_with_the_same_key() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let charge = url(&idem, "/invoices/inv_n/charge");
    let first = post(&charge, &[("x-mock-delay-ms", "5000")], "{}").await;
    assert_eq!(first.status, 504, "{}", first.text());
    eventually(Duration::from_secs(5), "listed as unknown", async || {
        get(&idem, "/v1/unknown").await.json()["unknown"][0]["key"] == "charge:inv_n"
    })
    .await;
    let held = post(&charge, &[], "{}").await;
    assert_eq!(
        (held.status, held.code()),
        (409, "outcome_unknown".to_owned())
    );
    let r = resolve(
        &idem,
        "charge/charge%3Ainv_n",
        &json!({"outcome": "not_executed"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let repeat = post(&charge, &[], "{}").await;
    assert_eq!(
        (repeat.status, repeat.replayed()),
        (201, false),
        "{}",
        repeat.text()
    );
    assert!(post(&charge, &[], "{}").await.replayed());
    let sent: Vec<_> = env
        .upstream
        .received()
        .into_iter()
        .filter(|r| r.path == "/invoices/inv_n/charge")
        .collect();
    assert_eq!(
        sent.len(),
        2,
        "the first send, and the one after the resolution"
    );
    assert_eq!(
        sent[0].headers["idempotency-key"],
        sent[1].headers["idempotency-key"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_unknown_outcome_is_resolved_and_only_once() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    // Store operations wait out the 1 s Redis pause below rather than time out, so the
    // race does not depend on twenty requests arriving within a 250 ms timeout.
    let slow_store = support::store::with_op_timeout(&env.base_yaml("200ms"), "5s");
    let idem = support::harness::start(&format!("{slow_store}{ROUTES}")).await;
    let store = env.backend.instance().await;
    let completed = json!({"outcome": "completed", "status": 200});
    let flying = seed(
        &store,
        "charge",
        "",
        "charge:flying",
        Duration::from_secs(30),
    )
    .await;
    let r = resolve(&idem, "charge/charge%3Aflying", &completed).await;
    assert_eq!(
        (r.status, r.json()["state"].clone()),
        (409, json!("in_flight")),
        "{}",
        r.text()
    );
    assert!(r.json()["error"].as_str().unwrap().contains("in flight"));
    let unchanged = store
        .get(&StoreKey::new("charge", "", "charge:flying"))
        .await
        .unwrap();
    assert_eq!(
        unchanged.as_ref().map(unclocked),
        Some(unclocked(&flying)),
        "a refused resolution changes nothing"
    );
    assert_eq!(
        resolve(&idem, "charge/charge%3Anobody", &completed)
            .await
            .status,
        404
    );

    // Twenty operators at once, all reading the record before any writes it (Redis is
    // paused for a second while their reads wait): one resolution, the others refused,
    // never two outcomes.
    unknown_now(&store, "charge", "", "charge:race").await;
    let redis = env.backend.redis_server();
    redis.pause();
    let outcomes = (0..20).map(|i| {
        let body = json!({"outcome": "completed", "status": 200, "body": format!("operator {i}")});
        let u = admin_url(&idem, "/v1/keys/charge/charge%3Arace/resolve");
        tokio::spawn(async move { send("POST", &u, &[AUTH, JSON], &body.to_string()).await })
    });
    let outcomes: Vec<_> = outcomes.collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.resume();
    let answers: Vec<Resp> = join_all(outcomes)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let changed = answers
        .iter()
        .filter(|r| r.status == 409 && r.json()["state"] == "changed");
    assert!(
        changed.count() > 0,
        "the store's fence refused some: {:?}",
        answers.iter().map(Resp::text).collect::<Vec<_>>()
    );
    let won: Vec<&Resp> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        won.len(),
        1,
        "{:?}",
        answers.iter().map(Resp::text).collect::<Vec<_>>()
    );
    assert!(answers.iter().all(|r| r.status == 200 || r.status == 409));
    let stored = get(&idem, "/v1/keys/charge/charge%3Arace?body=true")
        .await
        .json();
    let winner = answers.iter().position(|r| r.status == 200).unwrap();
    assert_eq!(
        stored["body"],
        json!(format!("operator {winner}")),
        "the winner's outcome stays"
    );
    let metrics = get(&idem, "/metrics").await.text();
    assert_eq!(
        metric(
            &metrics,
            r#"idem_resolutions_total{route="charge",outcome="completed"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resolutions_are_refused_with_a_reason() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let store = env.backend.instance().await;
    unknown_now(&store, "charge", "", "charge:bad").await;
    let u = admin_url(&idem, "/v1/keys/charge/charge%3Abad/resolve");
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Headers, &str, u16, &str); 7] = [
        (&[AUTH, JSON], "{not json", 400, "outcome"),
        (&[AUTH, JSON], r#"{"outcome":"done"}"#, 400, "not_executed"),
        (
            &[AUTH, JSON],
            r#"{"outcome":"completed","status":99}"#,
            400,
            "200-599",
        ),
        (
            &[AUTH, JSON],
            r#"{"outcome":"completed","status":200,"headers":{"set-cookie":"a"}}"#,
            400,
            "credentials",
        ),
        (
            &[AUTH],
            r#"{"outcome":"not_executed"}"#,
            415,
            "application/json",
        ),
        (
            &[AUTH, ("content-type", "text/plain")],
            r#"{"outcome":"not_executed"}"#,
            415,
            "application/json",
        ),
        (&[JSON], r#"{"outcome":"not_executed"}"#, 401, "token"),
    ];
    for (headers, body, status, says) in cases {
        let r = send("POST", &u, headers, body).await;
        assert_eq!(r.status, status, "{body}: {}", r.text());
        // `{"error": …}`, or a problem document's `detail` (the token's 401).
        let json = r.json();
        let message = json["error"].as_str().or(json["detail"].as_str());
        assert!(message.unwrap().contains(says), "{body}: {}", r.text());
    }
    let r = send(
        "POST",
        &admin_url(&idem, "/v1/keys/nope/k/resolve"),
        &[AUTH, JSON],
        r#"{"outcome":"not_executed"}"#,
    )
    .await;
    assert_eq!(r.status, 404);
    assert!(
        r.text().contains("no route named \\\"nope\\\""),
        "{}",
        r.text()
    );
    let r = send(
        "POST",
        &admin_url(&idem, "/v1/keys/charge/charge%3Abad"),
        &[AUTH, JSON],
        "{}",
    )
    .await;
    assert_eq!(r.status, 405);
    // Still unknown: nothing above changed it.
    assert_eq!(
        get(&idem, "/v1/unknown").await.json()["unknown"][0]["key"],
        "charge:bad"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_the_api_but_not_the_page() {
    let _panics = crate::support::panics::watched();
    let (_env, idem) = env().await;
    assert_eq!(
        send("GET", &admin_url(&idem, "/v1/unknown"), &[], "")
            .await
            .status,
        401
    );
    let wrong = ("authorization", "Bearer nope");
    assert_eq!(
        send("GET", &admin_url(&idem, "/v1/unknown"), &[wrong], "")
            .await
            .status,
        401
    );
    assert_eq!(get(&idem, "/v1/unknown").await.status, 200);
    let page = send("GET", &admin_url(&idem, "/"), &[], "").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"));
    assert!(page.text().contains("<dialog"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_lists_and_resolves() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let store = env.backend.instance().await;
    unknown_now(&store, "charge", "", "charge:cli1").await;
    unknown_now(&store, "refund", "acme", "refund:cli2").await;
    let admin = admin_url(&idem, "");
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .arg("keys")
            .args(args)
            .args(["--admin", &admin, "--token", "s3cret"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, table) = tokio::task::block_in_place(|| cli(&["unknown"]));
    assert_eq!(code, Some(0), "{table}");
    assert!(table.starts_with("ROUTE "), "{table}");
    assert!(
        table.contains("charge:cli1") && table.contains("refund:cli2"),
        "{table}"
    );
    let (_, only) = tokio::task::block_in_place(|| cli(&["unknown", "--route", "refund"]));
    assert!(
        !only.contains("charge:cli1") && only.contains("acme"),
        "{only}"
    );
    // A typo in the route name is named, and exits non-zero: not "no unknown outcomes".
    let (code, out) = tokio::task::block_in_place(|| cli(&["unknown", "--route", "nosuch"]));
    assert_eq!(
        (code, out.trim()),
        (
            Some(1),
            "idem: no route named \"nosuch\" in the loaded configuration (routes: charge, refund) and no record of it in the store"
        )
    );

    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{\"id\":\"ch_cli\"}").unwrap();
    let body = body.to_str().unwrap();
    let resolve = [
        "resolve",
        "--route",
        "charge",
        "charge:cli1",
        "--completed",
        "--status",
        "201",
        "--body-file",
        body,
        "--header",
        "Content-Type: application/json",
    ];
    let (code, out) = tokio::task::block_in_place(|| cli(&resolve));
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = tokio::task::block_in_place(|| cli(&resolve));
    assert_eq!(code, Some(1), "a second resolution is refused: {out}");
    assert!(out.contains("\"state\":\"completed\""), "{out}");
    let shown = get(&idem, "/v1/keys/charge/charge%3Acli1?body=true")
        .await
        .json();
    assert_eq!(
        (shown["status"].clone(), shown["body"].clone()),
        (json!(201), json!("{\"id\":\"ch_cli\"}"))
    );

    let not_run = [
        "resolve",
        "--route",
        "refund",
        "--scope",
        "acme",
        "refund:cli2",
        "--not-executed",
    ];
    let (code, out) = tokio::task::block_in_place(|| cli(&not_run));
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = tokio::task::block_in_place(|| cli(&["unknown"]));
    assert_eq!((code, out.trim()), (Some(0), "no unknown outcomes"));
}

/// Keys and scopes come from callers (a scope can be any JSON string of a body) or from
/// the store: `idem keys` shows their control characters, it never sends them to the
/// operator's terminal (an ESC there recolours, hides or rewrites what is shown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_output_shows_control_characters_escaped() {
    let _panics = crate::support::panics::watched();
    let (env, idem) = env().await;
    let store = env.backend.instance().await;
    let (scope, key) = ("acme\u{1b}[2J", "refund:\u{1b}]0;pwned\u{7}\u{9b}31m");
    unknown_now(&store, "refund", scope, key).await;
    let admin = admin_url(&idem, "");
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .arg("keys")
            .args(args)
            .args(["--admin", &admin, "--token", "s3cret"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let table = tokio::task::block_in_place(|| cli(&["unknown"]));
    let record =
        tokio::task::block_in_place(|| cli(&["get", "--route", "refund", "--scope", scope, key]));
    for out in [&table, &record] {
        let raw: Vec<char> = out
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(raw.is_empty(), "raw control characters {raw:?} in {out:?}");
    }
    assert!(
        table.contains("refund:\\u{1b}]0;pwned\\u{7}\\u{9b}31m"),
        "{table}"
    );
    assert!(table.contains("acme\\u{1b}[2J"), "{table}");
    assert!(record.contains("\\u{9b}31m"), "{record}");
}
