//! The operators' console (SPEC §1 "Unknown outcomes") in a real browser: Debian's
//! Chromium driven by Playwright for Python (`tests/admin/console/console.py`), keyboard only,
//! against the idem binary and a Redis of its own. Here: making the unknown outcomes
//! and checking, through the API and the proxy, what the browser did.

use crate::support;

mod browser;

use std::time::Duration;

use idem::key::StoreKey;
use idem::store::{Record, Reserve, Store};
use serde_json::json;

use support::env::{Backend, Env};
use support::harness::{post, send, IdemProcess};
use support::poll::eventually;

const ROUTES: &str = r#"
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
    lease: 300ms
    on_ambiguous: hold
    on_unknown: hold
"#;

/// The idem binary in front of `env`'s upstream and Redis; with `token`, an admin token
/// (the line continues the `admin:` section `IdemProcess` writes first).
async fn idem(env: &Env, token: Option<&str>) -> IdemProcess {
    let token = token.map_or(String::new(), |t| format!("  token: {t}\n"));
    IdemProcess::spawn(&format!("{token}{}{ROUTES}", env.base_yaml("200ms"))).await
}

/// An unknown outcome made through the store: the lease already ended.
async fn unknown(store: &Store, key: &str) {
    let record = Record::in_progress("charge", "", key, [1; 32], [2; 32], Duration::ZERO);
    let key = StoreKey::new("charge", "", key);
    let stored = store
        .reserve(&key, &record, Duration::from_secs(3600))
        .await;
    assert!(matches!(stored.unwrap(), Reserve::Won));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolved_by_keyboard_the_repeat_is_a_replay_of_it() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    let idem = idem(&env, None).await;
    // The upstream takes the call and does not answer in time: 504, outcome unknown.
    let charge = idem.url("/invoices/inv_c/charge");
    let first = post(&charge, &[("x-mock-delay-ms", "5000")], "{}").await;
    assert_eq!(first.status, 504, "{}", first.text());
    let unknown = idem.admin_url("/v1/unknown");
    eventually(Duration::from_secs(5), "listed as unknown", async || {
        send("GET", &unknown, &[], "").await.json()["unknown"][0]["key"] == "charge:inv_c"
    })
    .await;

    browser::scenario(
        "resolve-completed",
        &idem.admin_url(""),
        &["charge", "charge:inv_c"],
    )
    .await;

    let record = send(
        "GET",
        &idem.admin_url("/v1/keys/charge/charge%3Ainv_c?body=true"),
        &[],
        "",
    )
    .await;
    let record = record.json();
    assert_eq!(
        (record["state"].clone(), record["settled"].clone()),
        (json!("completed"), json!("resolved"))
    );
    assert_eq!(
        (record["status"].clone(), record["body"].clone()),
        (json!(201), json!("{\"id\":\"ch_console\"}"))
    );
    let repeat = post(&charge, &[], "{}").await;
    assert_eq!(
        (repeat.status, repeat.replayed()),
        (201, true),
        "{}",
        repeat.text()
    );
    assert_eq!(repeat.text(), "{\"id\":\"ch_console\"}");
    assert_eq!(
        env.upstream.executions("charge:inv_c"),
        1,
        "nothing forwarded after the first"
    );
}

/// A key is one path segment in the console's resolve URL, even `..` (which
/// `encodeURIComponent` leaves as it is, and the URL parser would resolve away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_segment_key_is_resolved_as_itself() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    let idem = idem(&env, None).await;
    unknown(&env.backend.instance().await, "..").await;
    browser::scenario("resolve-completed", &idem.admin_url(""), &["charge", ".."]).await;
    let record = send("GET", &idem.admin_url("/v1/keys/charge/%2E%2E"), &[], "")
        .await
        .json();
    assert_eq!(
        (record["state"].clone(), record["settled"].clone()),
        (json!("completed"), json!("resolved")),
        "{record}"
    );
}

/// Opened under a name below `.localhost` (Chromium resolves those to loopback itself,
/// RFC 6761), the console is served and its write is same-origin: a loopback name passes
/// the admin guard's `Host` and `Origin` checks without a token or `admin.allowed_hosts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_under_a_localhost_name() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    let idem = idem(&env, None).await;
    unknown(&env.backend.instance().await, "charge:named").await;
    let named = idem.admin_url("").replace("127.0.0.1", "console.localhost");
    browser::scenario("resolve-completed", &named, &["charge", "charge:named"]).await;
    let record = send(
        "GET",
        &idem.admin_url("/v1/keys/charge/charge%3Anamed"),
        &[],
        "",
    )
    .await
    .json();
    assert_eq!(record["settled"], json!("resolved"), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_confirmation_sends_nothing() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    let idem = idem(&env, None).await;
    unknown(&env.backend.instance().await, "charge:kept").await;
    browser::scenario("cancel", &idem.admin_url(""), &["charge", "charge:kept"]).await;
    let listed = send("GET", &idem.admin_url("/v1/unknown"), &[], "")
        .await
        .json();
    assert_eq!(listed["unknown"][0]["key"], "charge:kept", "still unknown");
    let metrics = send("GET", &idem.admin_url("/metrics"), &[], "")
        .await
        .text();
    // The scenario chose "not executed" before cancelling: neither outcome was counted.
    for outcome in ["not_executed", "completed"] {
        let none = format!(r#"idem_resolutions_total{{route="charge",outcome="{outcome}"}} 0"#);
        assert!(metrics.contains(&none), "{none}:\n{metrics}");
    }
}

/// "Mark all N of this route as not executed…": counted by a dry run, confirmed once;
/// a call still in flight on the same route is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_s_unknown_outcomes_are_marked_not_executed_at_once() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    let idem = idem(&env, None).await;
    let store = env.backend.instance().await;
    for n in 0..8 {
        unknown(&store, &format!("charge:bulk{n}")).await;
    }
    let live = Record::in_progress(
        "charge",
        "",
        "charge:live",
        [1; 32],
        [2; 32],
        Duration::from_secs(600),
    );
    let live_key = StoreKey::new("charge", "", "charge:live");
    let stored = store
        .reserve(&live_key, &live, Duration::from_secs(3600))
        .await;
    assert!(matches!(stored.unwrap(), Reserve::Won));

    browser::scenario("bulk", &idem.admin_url(""), &["charge", "8"]).await;

    let listed = send(
        "GET",
        &idem.admin_url("/v1/unknown?include=inflight"),
        &[],
        "",
    )
    .await
    .json();
    assert_eq!(listed["unknown"], json!([]), "{listed}");
    let states: Vec<(String, String)> = listed["inflight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap().to_owned(),
                i["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(states.len(), 9, "{listed}");
    assert!(states.contains(&("charge:live".to_owned(), "in_flight".to_owned())));
    assert_eq!(
        states.iter().filter(|(_, s)| s == "not_executed").count(),
        8
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_for_the_token_only_when_one_is_configured() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::redis()).await;
    unknown(&env.backend.instance().await, "charge:t").await;
    let guarded = idem(&env, Some("s3cret")).await;
    browser::scenario("token", &guarded.admin_url(""), &["s3cret"]).await;
    let open = idem(&env, None).await;
    browser::scenario("no-token", &open.admin_url(""), &[]).await;
}
