//! SPEC §1 request flow, against both stores: replay, mismatch, conflicts, waiting,
//! outcome classes, and the client that gives up.

use crate::store_cases;
use crate::support;

use std::time::Duration;

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{assert_all_got_the_one_result, post, url};
use support::poll::eventually;

const CHARGE: &str = r#"
routes:
  - name: charge
    methods: [POST]
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
"#;

fn charge_with(options: &str) -> String {
    let mut yaml = CHARGE.to_owned();
    for line in options.lines().filter(|l| !l.trim().is_empty()) {
        yaml.push_str("    ");
        yaml.push_str(line.trim());
        yaml.push('\n');
    }
    yaml
}

async fn first_call_forwards_once_and_repeats_replay(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_1/charge");
    let first = post(
        &u,
        &[("content-type", "application/json")],
        r#"{"amount":100}"#,
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed());
    let again = post(
        &u,
        &[("content-type", "application/json")],
        r#"{"amount":100}"#,
    )
    .await;
    assert_eq!(again.status, 201);
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("content-type"), Some("application/json"));
    assert_eq!(env.upstream.executions("charge:inv_1"), 1);
    // The key was passed on to the provider.
    let got = env.upstream.received();
    assert_eq!(got[0].headers["idempotency-key"], "charge:inv_1");
}

async fn same_key_different_body_is_422(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_2/charge");
    assert_eq!(post(&u, &[], r#"{"amount":100}"#).await.status, 201);
    let r = post(&u, &[], r#"{"amount":200}"#).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.code(), "idempotency_key_reused");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(env.upstream.total_executions(), 1);
}

async fn canonical_json_makes_reordered_arguments_the_same_request(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_3/charge");
    post(&u, &[], r#"{"amount":100,"currency":"eur"}"#).await;
    let r = post(&u, &[], "{ \"currency\": \"eur\",\n \"amount\": 100 }").await;
    assert!(r.replayed(), "{}", r.text());
}

async fn concurrent_duplicates_conflict_and_execute_once(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_c/charge");
    let calls = (0..50).map(|_| post(&u, &[("x-mock-delay-ms", "300")], "{}"));
    let results = join_all(calls).await;
    assert_eq!(env.upstream.executions("charge:inv_c"), 1);
    let created = results.iter().filter(|r| r.status == 201).count();
    let conflicts: Vec<_> = results.iter().filter(|r| r.status == 409).collect();
    assert!(created >= 1);
    assert_eq!(created + conflicts.len(), 50);
    for c in conflicts {
        assert_eq!(c.code(), "request_in_progress");
        assert!(c.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    }
}

async fn concurrent_duplicates_wait_and_all_get_the_result(b: Backend) {
    let env = Env::new(b).await;
    let idem = env
        .idem(&charge_with("on_concurrent: wait\nwait_timeout: 5s"))
        .await;
    let u = url(&idem, "/invoices/inv_w/charge");
    let calls = (0..50).map(|_| post(&u, &[("x-mock-delay-ms", "300")], "{}"));
    let results = join_all(calls).await;
    assert_eq!(env.upstream.executions("charge:inv_w"), 1);
    assert_all_got_the_one_result(&results);
    assert_eq!(results.iter().filter(|r| !r.replayed()).count(), 1);
}

async fn wait_times_out_with_409(b: Backend) {
    let env = Env::new(b).await;
    let idem = env
        .idem_with_timeout(
            &charge_with("on_concurrent: wait\nwait_timeout: 200ms"),
            "10s",
        )
        .await;
    let u = url(&idem, "/invoices/inv_wt/charge");
    // The first call outlasts the duplicate's wait by far, even on a loaded machine.
    let slow = post(&u, &[("x-mock-delay-ms", "3000")], "{}");
    let dup = async {
        eventually(
            Duration::from_secs(3),
            "the first call forwarded",
            async || env.upstream.executions("charge:inv_wt") == 1,
        )
        .await;
        post(&u, &[("x-mock-delay-ms", "3000")], "{}").await
    };
    let (first, second) = tokio::join!(slow, dup);
    assert_eq!(first.status, 201);
    assert_eq!(second.status, 409);
    assert_eq!(env.upstream.total_executions(), 1);
}

async fn server_errors_are_not_stored_and_retry_forwards_again(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_5/charge");
    let r = post(&u, &[("x-mock-status", "503")], "{}").await;
    assert_eq!(r.status, 503);
    let r = post(&u, &[("x-mock-status", "429")], "{}").await;
    assert_eq!(
        r.status, 429,
        "a 5xx is released, so the retry is forwarded"
    );
    let r = post(&u, &[], "{}").await;
    assert_eq!(r.status, 201, "a 429 is released too");
    assert!(!r.replayed());
    assert_eq!(
        env.upstream.executions("charge:inv_5"),
        3,
        "same upstream key every time"
    );
}

async fn definitive_4xx_is_stored_and_replayed(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_6/charge");
    assert_eq!(
        post(&u, &[("x-mock-status", "402")], "{}").await.status,
        402
    );
    let r = post(&u, &[], "{}").await;
    assert_eq!(r.status, 402);
    assert!(r.replayed());
    assert_eq!(env.upstream.total_executions(), 1);
}

async fn on_failure_retry_starts_a_new_attempt_with_a_new_upstream_key(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(&charge_with("on_failure: retry")).await;
    let u = url(&idem, "/invoices/inv_7/charge");
    assert_eq!(
        post(&u, &[("x-mock-status", "402")], "{}").await.status,
        402
    );
    let r = post(&u, &[], "{}").await;
    assert_eq!(r.status, 201);
    assert!(!r.replayed());
    assert_eq!(env.upstream.executions("charge:inv_7"), 1);
    assert_eq!(env.upstream.executions("charge:inv_7:attempt-2"), 1);
    let r = post(&u, &[], "{}").await;
    assert!(r.replayed(), "success is always replayed");
}

async fn store_statuses_limits_what_is_stored(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(&charge_with("store_statuses: [2xx]")).await;
    let u = url(&idem, "/invoices/inv_8/charge");
    assert_eq!(
        post(&u, &[("x-mock-status", "404")], "{}").await.status,
        404
    );
    assert_eq!(post(&u, &[], "{}").await.status, 201);
    assert_eq!(env.upstream.total_executions(), 2);
}

async fn upstream_refused_is_502_and_released(b: Backend) {
    let mut env = Env::new(b).await;
    let port = support::harness::free_port();
    let real = env.upstream.clone();
    // Point idem at a port nobody listens on.
    env.upstream.addr = format!("127.0.0.1:{port}").parse().unwrap();
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_9/charge");
    let r = post(&u, &[], "{}").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.code(), "upstream_unavailable");
    let r = post(&u, &[], "{}").await;
    assert_eq!(
        r.status, 502,
        "released: the retry tried again rather than 409"
    );
    assert_eq!(real.total_executions(), 0);
}

async fn ambiguous_timeout_holds_the_key_until_the_lease_ends(b: Backend) {
    let env = Env::new(b).await;
    let idem = env
        .idem_with_timeout(
            &charge_with("lease: 1500ms\nretention: 1m\nupstream_key_window: 1h"),
            "300ms",
        )
        .await;
    let u = url(&idem, "/invoices/inv_t/charge");
    let r = post(&u, &[("x-mock-delay-ms", "600")], "{}").await;
    assert_eq!(r.status, 504);
    assert_eq!(r.code(), "upstream_timeout");
    assert!(r.json()["detail"].as_str().unwrap().contains("unknown"));
    let r = post(&u, &[], "{}").await;
    assert_eq!(
        r.status, 409,
        "held: no second execution while the outcome is unknown"
    );
    let held = std::time::Instant::now();
    let r = eventually(Duration::from_secs(3), "the lease ended", async || {
        let r = post(&u, &[], "{}").await;
        (r.status != 409).then_some(r)
    })
    .await;
    assert_eq!(r.status, 201, "after the lease a retry is forwarded");
    // The 504 came 300 ms into the 1500 ms lease.
    assert!(
        held.elapsed() >= Duration::from_millis(900),
        "freed {:?} early",
        held.elapsed()
    );
    assert_eq!(
        env.upstream.executions("charge:inv_t"),
        2,
        "with the same upstream key"
    );
}

async fn ambiguous_release_lets_the_retry_through_at_once(b: Backend) {
    let env = Env::new(b).await;
    let idem = env
        .idem_with_timeout(&charge_with("on_ambiguous: release"), "300ms")
        .await;
    let u = url(&idem, "/invoices/inv_r/charge");
    assert_eq!(
        post(&u, &[("x-mock-delay-ms", "600")], "{}").await.status,
        504
    );
    assert_eq!(post(&u, &[], "{}").await.status, 201);
}

async fn slow_call_keeps_its_lease_by_renewal(b: Backend) {
    let env = Env::new(b).await;
    let idem = env
        .idem_with_timeout(&charge_with("lease: 900ms"), "10s")
        .await;
    let u = url(&idem, "/invoices/inv_s/charge");
    // Three times the lease: only renewals (every lease/3) keep the key.
    let first = post(&u, &[("x-mock-delay-ms", "3000")], "{}");
    let dups = async {
        let mut statuses = Vec::new();
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            statuses.push(post(&u, &[], "{}").await.status);
        }
        statuses
    };
    let (first, statuses) = tokio::join!(first, dups);
    assert_eq!(first.status, 201);
    assert!(statuses.iter().all(|s| *s == 409), "{statuses:?}");
    assert_eq!(env.upstream.executions("charge:inv_s"), 1);
    assert!(post(&u, &[], "{}").await.replayed());
}

async fn client_that_gives_up_gets_the_replay_on_retry(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_gone/charge");
    let first = {
        let u = u.clone();
        tokio::spawn(async move { post(&u, &[("x-mock-delay-ms", "500")], "{}").await })
    };
    // The client gives up once the upstream is working on its call.
    eventually(
        Duration::from_secs(3),
        "the call reached the upstream",
        async || env.upstream.executions("charge:inv_gone") == 1,
    )
    .await;
    first.abort();
    assert!(
        first.await.unwrap_err().is_cancelled(),
        "the client gave up"
    );
    // Repeats are refused while the call runs, then replay what it recorded.
    let r = eventually(Duration::from_secs(3), "the call recorded", async || {
        let r = post(&u, &[("x-mock-delay-ms", "500")], "{}").await;
        assert!(r.replayed() || r.status == 409, "{} {}", r.status, r.text());
        r.replayed().then_some(r)
    })
    .await;
    assert_eq!(r.status, 201);
    assert_eq!(env.upstream.executions("charge:inv_gone"), 1);
}

async fn streamed_response_is_recorded_before_its_last_chunk(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_st/charge");
    let h = [("x-mock-chunks", "4"), ("x-mock-chunk-delay-ms", "50")];
    let first = post(&u, &h, "{}").await;
    assert_eq!(first.text(), "chunk0;chunk1;chunk2;chunk3;");
    // Immediately after the whole response arrived: a replay, never a 409.
    let again = post(&u, &h, "{}").await;
    assert!(again.replayed(), "status {}", again.status);
    assert_eq!(again.body, first.body);
}

async fn large_response_streams_but_is_not_stored(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(&charge_with("max_response_bytes: 1KiB")).await;
    let u = url(&idem, "/invoices/inv_big/charge");
    let first = post(
        &u,
        &[("x-mock-body-bytes", "5000"), ("x-mock-status", "200")],
        "{}",
    )
    .await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body.len(), 5000);
    let again = post(&u, &[], "{}").await;
    assert_eq!(again.status, 409);
    assert_eq!(again.code(), "response_not_stored");
    assert!(again.json()["detail"].as_str().unwrap().contains("200"));
    assert_eq!(env.upstream.total_executions(), 1);
}

async fn credentials_bind_the_record(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_cred/charge");
    let alice = [("authorization", "Bearer alice")];
    assert_eq!(post(&u, &alice, "{}").await.status, 201);
    let r = post(&u, &[("authorization", "Bearer mallory")], "{}").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.code(), "credential_mismatch");
    assert!(!r.text().contains("ch_"), "no replay leaks");
    assert!(post(&u, &alice, "{}").await.replayed());
    assert_eq!(env.upstream.total_executions(), 1);
}

store_cases!([memory, redis, postgres] [
    first_call_forwards_once_and_repeats_replay,
    same_key_different_body_is_422,
    canonical_json_makes_reordered_arguments_the_same_request,
    concurrent_duplicates_conflict_and_execute_once,
    concurrent_duplicates_wait_and_all_get_the_result,
    wait_times_out_with_409,
    server_errors_are_not_stored_and_retry_forwards_again,
    definitive_4xx_is_stored_and_replayed,
    on_failure_retry_starts_a_new_attempt_with_a_new_upstream_key,
    store_statuses_limits_what_is_stored,
    upstream_refused_is_502_and_released,
    ambiguous_timeout_holds_the_key_until_the_lease_ends,
    ambiguous_release_lets_the_retry_through_at_once,
    slow_call_keeps_its_lease_by_renewal,
    client_that_gives_up_gets_the_replay_on_retry,
    streamed_response_is_recorded_before_its_last_chunk,
    large_response_streams_but_is_not_stored,
    credentials_bind_the_record,
]);
