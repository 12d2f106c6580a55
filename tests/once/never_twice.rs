//! The proof's assumptions, enforced where idem is deployed (SPEC §1 "What the code
//! enforces"), each on the real binary against a real store:
//! - a Redis that may evict records keeps idem not ready until it is set to
//!   `noeviction` (no restart), unless `allow_eviction: true`;
//! - a record that vanished under its owner is counted as such, never as a takeover;
//! - without `upstream_key_window`, an owner killed mid-call leaves its intent held;
//! - an owner stopped between reserving and sending, whose intent was meanwhile
//!   resolved and sent by another replica, sends nothing when it resumes;
//! - with `wait_replicas`, a renewal the replica never acknowledged does not extend
//!   the owner's right to send.
//!
//! The owner is stopped at an exact step with the binary's test pause points
//! (`src/failpoints.rs`, debug builds only).

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::harness::{metric_sum, post, send, try_send, IdemProcess};
use support::poll::eventually;
use support::redis::RedisServer;
use support::upstream::MockUpstream;

fn redis_store(redis: &RedisServer, extra: &str) -> String {
    format!(
        "store:\n  backend: redis\n  redis:\n    url: {}\n    op_timeout: 500ms\n{extra}",
        redis.url()
    )
}

fn yaml(upstream: &MockUpstream, store: &str, route: &str) -> String {
    format!(
        "upstream:\n  url: {}\n  timeout: 10s\n  connect_timeout: 500ms\n{store}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n{route}",
        upstream.url()
    )
}

async fn metric(p: &IdemProcess, name: &str) -> f64 {
    metric_sum(
        &send("GET", &p.admin_url("/metrics"), &[], "").await.text(),
        name,
    )
}

/// Arms pause point `name` in the process started with `IDEM_FAILPOINTS_DIR=dir`: the
/// next request to reach it stops there.
fn arm(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), b"").unwrap();
}

/// Waits until a request stopped at `name` (failing with `p`'s log if none does).
async fn wait_hit(dir: &Path, name: &str, p: &IdemProcess) {
    let hit = dir.join(format!("{name}.hit"));
    for _ in 0..1000 {
        if hit.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no request reached {name}:\n{}", p.logs());
}

fn release(dir: &Path, name: &str) {
    std::fs::write(dir.join(format!("{name}.go")), b"").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_not_ready_until_it_keeps_records() {
    let _panics = support::panics::watched();
    let redis = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let upstream = MockUpstream::start().await;
    let idem = IdemProcess::spawn(&yaml(&upstream, &redis_store(&redis, ""), "")).await;
    let refused = eventually(Duration::from_secs(10), "the policy read", async || {
        let r = send("GET", &idem.admin_url("/readyz"), &[], "").await;
        r.text().contains("volatile-lru").then_some(r)
    })
    .await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let why = refused.text();
    assert!(why.contains("maxmemory-policy volatile-lru"), "{why}");
    assert!(why.contains("noeviction"), "names the fix: {why}");
    assert!(idem.logs().contains("volatile-lru"), "{}", idem.logs());
    assert_eq!(metric(&idem, "idem_store_evicting").await, 1.0);

    // Fixed on the server: ready again by itself, no restart.
    redis.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_eq!(metric(&idem, "idem_store_evicting").await, 0.0);
    // And back: a policy changed while serving is caught too.
    redis.command(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let again = idem.readiness(503).await;
    assert!(again.text().contains("allkeys-lru"), "{}", again.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_eviction_serves_with_a_warning_and_a_gauge() {
    let _panics = support::panics::watched();
    let redis = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let upstream = MockUpstream::start().await;
    let store = redis_store(&redis, "    allow_eviction: true\n");
    let idem = IdemProcess::spawn(&yaml(&upstream, &store, "")).await;
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    eventually(Duration::from_secs(10), "the gauge", async || {
        metric(&idem, "idem_store_evicting").await == 1.0
    })
    .await;
    assert!(
        idem.logs().contains("allow_eviction: true"),
        "warned: {}",
        idem.logs()
    );
    let r = post(&idem.url("/invoices/inv_a/charge"), &[], "{}").await;
    assert_eq!(r.status, 201, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_vanished_is_counted_never_called_a_takeover() {
    let _panics = support::panics::watched();
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let idem = IdemProcess::spawn(&yaml(&upstream, &redis_store(&redis, ""), "")).await;
    let u = idem.url("/invoices/inv_v/charge");
    let call =
        tokio::spawn(
            async move { try_send("POST", &u, &[("x-mock-delay-ms", "800")], "{}").await },
        );
    eventually(Duration::from_secs(5), "the call is upstream", async || {
        upstream.executions("charge:inv_v") == 1
    })
    .await;
    // What an eviction does: the record is gone while its call runs.
    redis.command(&["FLUSHDB"]);
    let answered = call.await.unwrap().expect("answered");
    assert_eq!(answered.status, 201, "the caller keeps its answer");
    eventually(Duration::from_secs(5), "counted as vanished", async || {
        metric(&idem, "idem_records_vanished_total").await == 1.0
    })
    .await;
    assert_eq!(metric(&idem, "idem_stale_completions_total").await, 0.0);
    let logs = idem.logs();
    assert!(logs.contains("vanished"), "{logs}");
    assert!(!logs.contains("taken over by another owner"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_mid_call_leaves_its_intent_held_by_default() {
    let _panics = support::panics::watched();
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    // Neither on_unknown nor upstream_key_window: nothing says the API deduplicates.
    let config = yaml(&upstream, &redis_store(&redis, ""), "    lease: 1s\n");
    let mut a = IdemProcess::spawn(&config).await;
    let b = IdemProcess::spawn(&config).await;
    let u = a.url("/invoices/inv_k/charge");
    tokio::spawn(async move { try_send("POST", &u, &[("x-mock-delay-ms", "5000")], "{}").await });
    eventually(Duration::from_secs(5), "the call is upstream", async || {
        upstream.executions("charge:inv_k") == 1
    })
    .await;
    a.kill();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let repeat = post(&b.url("/invoices/inv_k/charge"), &[], "{}").await;
    assert_eq!(repeat.status, 409, "{}", repeat.text());
    assert_eq!(repeat.code(), "outcome_unknown", "{}", repeat.text());
    assert_eq!(
        repeat.header("retry-after"),
        None,
        "held until a person settles it"
    );
    assert_eq!(upstream.executions("charge:inv_k"), 1, "never sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_stopped_before_sending_sends_nothing_once_its_intent_moved_on() {
    let _panics = support::panics::watched();
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let points = tempfile::tempdir().unwrap();
    let dir = points.path().to_str().unwrap().to_owned();
    let config = yaml(&upstream, &redis_store(&redis, ""), "    lease: 1s\n");
    let a = IdemProcess::spawn_with(&config, &[], "warn", &[("IDEM_FAILPOINTS_DIR", &dir)]).await;
    let b = IdemProcess::spawn(&config).await;

    arm(points.path(), "owner_before_send");
    let u = a.url("/invoices/inv_s/charge");
    let owner = tokio::spawn(async move { try_send("POST", &u, &[], "{}").await });
    wait_hit(points.path(), "owner_before_send", &a).await;
    // Reserved, connected, not yet written: now the whole process stops (no renewals).
    a.signal("STOP");
    tokio::time::sleep(Duration::from_millis(1_300)).await;

    // The lease ended: an operator settles the intent as not executed, and the repeat
    // through the other replica is sent.
    let resolve = post(
        &b.admin_url("/v1/keys/charge/charge%3Ainv_s/resolve"),
        &[("content-type", "application/json")],
        "{\"outcome\":\"not_executed\"}",
    )
    .await;
    assert_eq!(resolve.status, 200, "{}", resolve.text());
    let sent = post(&b.url("/invoices/inv_s/charge"), &[], "{}").await;
    assert_eq!(sent.status, 201, "{}", sent.text());
    assert_eq!(upstream.executions("charge:inv_s"), 1);

    // The owner resumes: it must not send.
    a.signal("CONT");
    release(points.path(), "owner_before_send");
    let answer = owner
        .await
        .unwrap()
        .expect("the owner's caller is answered");
    assert_eq!(answer.status, 503, "{}", answer.text());
    assert_eq!(answer.code(), "lease_lost", "{}", answer.text());
    assert_eq!(answer.header("retry-after"), Some("1"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(upstream.executions("charge:inv_s"), 1, "sent once, by B");
    assert_eq!(metric(&a, "idem_sends_withheld_total").await, 1.0);
    // The other replica's outcome stands, and a retry through the owner replays it.
    let retry = post(&a.url("/invoices/inv_s/charge"), &[], "{}").await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.body, sent.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_no_replica_acknowledged_does_not_extend_the_right_to_send() {
    let _panics = support::panics::watched();
    // Redis 7 delays a replica's first sync by 5 s unless told otherwise.
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(
        Duration::from_secs(15),
        "the replica is in sync",
        async || {
            replica
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
        },
    )
    .await;
    // After its sync a replica's acks can lag by up to a second: until one is seen.
    master.command(&["SET", "probe", "1"]);
    eventually(
        Duration::from_secs(15),
        "the replica acknowledges",
        async || master.command(&["WAIT", "1", "100"]) == ":1\r\n",
    )
    .await;
    let upstream = MockUpstream::start().await;
    let points = tempfile::tempdir().unwrap();
    let dir = points.path().to_str().unwrap().to_owned();
    // What is tested is whether an ack is required, not how fast it comes: a live
    // replica's ack can take longer than 500 ms on a loaded machine.
    let store = format!(
        "store:\n  backend: redis\n  redis:\n    url: {}\n    op_timeout: 2s\n    wait_replicas: 1\n",
        master.url()
    );
    let config = yaml(&upstream, &store, "    lease: 1s\n");
    let a = IdemProcess::spawn_with(&config, &[], "warn", &[("IDEM_FAILPOINTS_DIR", &dir)]).await;

    arm(points.path(), "owner_before_send");
    let u = a.url("/invoices/inv_w/charge");
    let owner = tokio::spawn(async move { try_send("POST", &u, &[], "{}").await });
    wait_hit(points.path(), "owner_before_send", &a).await;
    // The reservation was acknowledged; from now on no renewal is.
    replica.pause();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    release(points.path(), "owner_before_send");
    let answer = owner.await.unwrap().expect("answered");
    replica.resume();
    let logs = a.logs();
    assert_eq!(answer.status, 503, "{}\n{logs}", answer.text());
    assert_eq!(answer.code(), "lease_lost", "{}\n{logs}", answer.text());
    assert_eq!(upstream.executions("charge:inv_w"), 0, "nothing was sent");
    // Nothing ran, so a retry is sent (once).
    // Generous: the resumed replica catches up before the next reservation is acked.
    let retry = eventually(Duration::from_secs(30), "a retry is sent", async || {
        let r = post(&a.url("/invoices/inv_w/charge"), &[], "{}").await;
        (r.status == 201).then_some(r)
    })
    .await;
    assert!(!retry.replayed());
    assert_eq!(upstream.executions("charge:inv_w"), 1);
}

/// The reconciling duplicate's own race: it read an unknown outcome and asked the
/// upstream (absent), then stopped before its takeover while another replica did the
/// same and sent the call. When it resumes, its takeover is refused (the token it read
/// is gone) and it answers with the other replica's outcome: one execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_stopped_between_lookup_and_takeover_never_sends() {
    let _panics = support::panics::watched();
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let a_points = tempfile::tempdir().unwrap();
    let b_points = tempfile::tempdir().unwrap();
    let route = "    lease: 1s\n    on_unknown: reconcile\n    reconcile:\n      path: \"/lookup?key={key}\"\n      found: [200]\n      absent: [404]\n      timeout: 1s\n";
    let config = yaml(&upstream, &redis_store(&redis, ""), route);
    let env = |d: &tempfile::TempDir| d.path().to_str().unwrap().to_owned();
    let (a_dir, b_dir) = (env(&a_points), env(&b_points));
    let mut a =
        IdemProcess::spawn_with(&config, &[], "warn", &[("IDEM_FAILPOINTS_DIR", &a_dir)]).await;
    let b = IdemProcess::spawn_with(&config, &[], "warn", &[("IDEM_FAILPOINTS_DIR", &b_dir)]).await;
    let c = IdemProcess::spawn(&config).await;

    // An owner that dies after reserving, before sending: an unknown outcome that
    // never ran.
    arm(a_points.path(), "owner_before_send");
    let u = a.url("/invoices/inv_r/charge");
    tokio::spawn(async move { try_send("POST", &u, &[], "{}").await });
    wait_hit(a_points.path(), "owner_before_send", &a).await;
    a.kill();
    tokio::time::sleep(Duration::from_millis(1_300)).await;

    arm(b_points.path(), "duplicate_before_takeover");
    let u = b.url("/invoices/inv_r/charge");
    let stopped = tokio::spawn(async move { try_send("POST", &u, &[], "{}").await });
    wait_hit(b_points.path(), "duplicate_before_takeover", &b).await;
    let sent = post(&c.url("/invoices/inv_r/charge"), &[], "{}").await;
    assert_eq!(sent.status, 201, "{}", sent.text());
    assert_eq!(upstream.executions("charge:inv_r"), 1);

    release(b_points.path(), "duplicate_before_takeover");
    let late = stopped.await.unwrap().expect("answered");
    assert!(late.replayed(), "{} {}", late.status, late.text());
    assert_eq!(late.body, sent.body);
    assert_eq!(upstream.executions("charge:inv_r"), 1, "one execution");
}
