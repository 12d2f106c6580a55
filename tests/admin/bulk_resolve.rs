//! Bulk resolution (`POST /v1/unknown/resolve`, `idem keys resolve --all-unknown`), from
//! outside, on every store: 8 unknown outcomes left by an upstream that reset every
//! call are settled by one call each way it can be narrowed; a dry run changes nothing;
//! a call still in flight on the same route is never matched; and each settled intent's
//! repeat is then sent once.

use crate::store_cases;
use crate::support;

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use support::env::{Backend, Env};
use support::harness::{admin_url, send, url, Idem};
use support::poll::eventually;

const ROUTES: &str = "routes:\n  - name: charge\n    path: /invoices/{invoice_id}/charge\n    key: \"charge:{path.invoice_id}\"\n    lease: 1500ms\n    on_unknown: hold\n";

async fn charge(idem: &Idem, id: &str, headers: &[(&str, &str)]) -> u16 {
    send(
        "POST",
        &url(idem, &format!("/invoices/{id}/charge")),
        headers,
        "{}",
    )
    .await
    .status
}

async fn bulk(idem: &Idem, body: Value) -> (u16, Value) {
    let r = send(
        "POST",
        &admin_url(idem, "/v1/unknown/resolve"),
        &[("content-type", "application/json")],
        &body.to_string(),
    )
    .await;
    (r.status, r.json())
}

async fn unknown_count(idem: &Idem) -> usize {
    let listed = send("GET", &admin_url(idem, "/v1/unknown?route=charge"), &[], "").await;
    listed.json()["unknown"].as_array().map_or(0, Vec::len)
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

async fn eight_unknown_outcomes_settle_in_one_call(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem_with_timeout(ROUTES, "10s").await;
    let reset = [("x-mock-reset", "true")];
    for n in 0..4 {
        assert_eq!(charge(&idem, &format!("early{n}"), &reset).await, 504);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let between = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for n in 0..4 {
        assert_eq!(charge(&idem, &format!("late{n}"), &reset).await, 504);
    }
    eventually(Duration::from_secs(15), "8 unknown outcomes", async || {
        unknown_count(&idem).await == 8
    })
    .await;
    // A call in flight on the same route: its lease is renewed while it runs.
    let slow = tokio::spawn({
        let target = url(&idem, "/invoices/slow/charge");
        async move { send("POST", &target, &[("x-mock-delay-ms", "5000")], "{}").await }
    });
    eventually(
        Duration::from_secs(5),
        "the slow call at the upstream",
        async || env.upstream.executions("charge:slow") == 1,
    )
    .await;
    // Past one lease: still live. The lease is long enough (renewed every 500 ms) that a
    // renewal late by a second on a loaded machine still keeps it.
    tokio::time::sleep(Duration::from_millis(1700)).await;

    let all = json!({"route": "charge", "outcome": "not_executed"});
    let mut dry = all.clone();
    dry["dry_run"] = json!(true);
    let (status, counted) = bulk(&idem, dry).await;
    assert_eq!(status, 200, "{counted}");
    assert_eq!(
        counted["matched"], 8,
        "the live call is not matched: {counted}"
    );
    assert_eq!(
        (counted["resolved"].clone(), counted["dry_run"].clone()),
        (json!(0), json!(true))
    );
    assert_eq!(unknown_count(&idem).await, 8, "a dry run changes nothing");

    let mut early = all.clone();
    early["sent_before"] = json!(rfc3339(between));
    let (status, done) = bulk(&idem, early).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (done["matched"].clone(), done["resolved"].clone()),
        (json!(4), json!(4))
    );
    let mut late = all.clone();
    late["sent_after"] = json!(rfc3339(between));
    let (_, done) = bulk(&idem, late).await;
    assert_eq!(
        (done["matched"].clone(), done["resolved"].clone()),
        (json!(4), json!(4))
    );
    assert_eq!(unknown_count(&idem).await, 0);
    let (_, again) = bulk(&idem, all).await;
    assert_eq!(again["matched"], 0, "nothing left: {again}");

    assert_eq!(
        slow.await.unwrap().status,
        201,
        "the live call finished untouched"
    );
    assert_eq!(env.upstream.executions("charge:slow"), 1);
    for id in ["early0", "early3", "late0", "late3"] {
        assert_eq!(charge(&idem, id, &[]).await, 201, "{id}");
        assert_eq!(
            env.upstream.executions(&format!("charge:{id}")),
            2,
            "{id}: sent once more"
        );
    }
    let metrics = send("GET", &admin_url(&idem, "/metrics"), &[], "")
        .await
        .text();
    let series = r#"idem_resolutions_total{route="charge",outcome="not_executed"} 8"#;
    assert!(metrics.contains(series), "{metrics}");
}

async fn refuses_what_it_cannot_do(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem_with_timeout(ROUTES, "3s").await;
    for (body, status, says) in [
        (
            json!({"route": "nosuch", "outcome": "not_executed"}),
            404,
            "no route named",
        ),
        (
            json!({"route": "charge", "outcome": "completed"}),
            400,
            "only not_executed",
        ),
        (
            json!({"route": "charge", "outcome": "not_executed", "sent_after": "yesterday"}),
            400,
            "RFC 3339",
        ),
        (
            json!({"route": "charge", "outcome": "not_executed", "limit": 3}),
            400,
            "unknown field",
        ),
    ] {
        let (got, answer) = bulk(&idem, body.clone()).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(says), "{answer}");
    }
}

store_cases!([memory, redis, postgres] [
    eight_unknown_outcomes_settle_in_one_call,
    refuses_what_it_cannot_do,
]);
