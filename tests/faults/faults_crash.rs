//! An owner lost mid-request, across real processes: killed (SIGKILL) or frozen
//! (SIGSTOP) past its lease. The reservation expires within one `lease` of the last
//! renewal, never before; then exactly one retry is forwarded, with the same upstream
//! key, however many race for it; a frozen owner's late completion is refused and
//! counted; a restarted idem needs no clean-up.

use crate::store_cases;
use crate::support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, try_send, IdemProcess};
use support::poll::eventually;
use support::redis::RedisServer;

fn yaml(env: &Env, lease: &str) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: {lease}\n    upstream_key_window: 1h\n",
        env.base_yaml("10s")
    )
}

/// Starts a call through `p` that the upstream holds for `delay_ms`, and returns once
/// the upstream has it (the owner holds the reservation).
async fn start_call(env: &Env, p: &IdemProcess, id: &str, delay_ms: &str) {
    let u = p.url(&format!("/invoices/{id}/charge"));
    let delay = delay_ms.to_owned();
    tokio::spawn(async move { try_send("POST", &u, &[("x-mock-delay-ms", &delay)], "{}").await });
    let key = format!("charge:{id}");
    eventually(
        Duration::from_secs(5),
        "the call reached the upstream",
        async || env.upstream.executions(&key) == 1,
    )
    .await;
}

async fn metric(p: &IdemProcess, name: &str) -> f64 {
    metric_sum(
        &send("GET", &p.admin_url("/metrics"), &[], "").await.text(),
        name,
    )
}

store_cases!([redis, postgres][frozen_owner_cannot_overwrite_its_successor]);

async fn frozen_owner_cannot_overwrite_its_successor(backend: Backend) {
    let env = Env::new(backend).await;
    let a = IdemProcess::spawn(&yaml(&env, "1s")).await;
    let b = IdemProcess::spawn(&yaml(&env, "1s")).await;
    let u_a = a.url("/invoices/inv_f/charge");
    let first =
        tokio::spawn(
            async move { try_send("POST", &u_a, &[("x-mock-delay-ms", "1500")], "{}").await },
        );
    eventually(
        Duration::from_secs(5),
        "the call reached the upstream",
        async || env.upstream.executions("charge:inv_f") == 1,
    )
    .await;
    a.signal("STOP");
    // A cannot renew, so the reservation expires and B takes the key over.
    let u_b = b.url("/invoices/inv_f/charge");
    let successor = eventually(Duration::from_secs(4), "B took over", async || {
        let r = post(&u_b, &[], "{}").await;
        (r.status != 409).then_some(r)
    })
    .await;
    assert_eq!(successor.status, 201, "{}", successor.text());
    assert!(!successor.replayed());
    assert_eq!(
        env.upstream.executions("charge:inv_f"),
        2,
        "same upstream key both times"
    );
    a.signal("CONT");
    let _ = first.await;
    eventually(
        Duration::from_secs(3),
        "the stale completion counted",
        async || metric(&a, "idem_stale_completions_total").await == 1.0,
    )
    .await;
    // The successor's record stands.
    let again = post(&u_b, &[], "{}").await;
    assert!(again.replayed());
    assert_eq!(again.body, successor.body);
}

/// The time left on the lease of the one reservation in `redis` (the record's own
/// deadline: the record itself outlives its lease), and the instant it was asked for.
fn lease_left(redis: &RedisServer) -> (Instant, Duration) {
    let keys = redis.command(&["KEYS", "idem:*"]);
    // A record's key (`idem:` and 64 hex digits), not the open-intent index beside it
    // (`idem:open`, a sorted set: GET on it is WRONGTYPE).
    let is_record = |l: &&str| {
        l.strip_prefix("idem:")
            .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let key = keys
        .lines()
        .find(is_record)
        .unwrap_or_else(|| panic!("no reservation in Redis: {keys:?}"));
    let value = redis.command(&["GET", key]);
    let asked = Instant::now();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let lease_end: u64 = value
        .split("\"expires_at_ms\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no lease in the record: {value:?}"));
    assert!(lease_end > now_ms, "no lease left: {value:?}");
    (asked, Duration::from_millis(lease_end - now_ms))
}

/// SIGKILL while the lease was being renewed (every lease/3 = 400 ms). The reservation
/// expires one lease after the last renewal, never before: every repeat until then is
/// refused (409 with `Retry-After`) and the upstream sees nothing. Then one retry is
/// forwarded; a burst of duplicates through two replicas *while it runs* is refused, and
/// afterwards everything replays it. A restarted idem replays it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_owner_then_a_burst_of_retries_forwards_exactly_one() {
    const LEASE: Duration = Duration::from_millis(1200);
    let env = Env::new(Backend::redis()).await;
    let lease = yaml(&env, "1200ms");
    let mut a = IdemProcess::spawn(&lease).await;
    let b = IdemProcess::spawn(&lease).await;
    let c = IdemProcess::spawn(&lease).await;
    start_call(&env, &a, "crash", "8000").await;
    // Past two renewals, so the lease is not the first one.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let record = send("GET", &b.admin_url("/v1/keys/charge/charge:crash"), &[], "").await;
    assert_eq!(record.json()["state"], "in_progress");
    a.kill();
    let killed = Instant::now();
    let (asked, left) = lease_left(env.backend.redis_server());
    let lease_end = asked + left;
    // Renewed within the last lease/3 (plus slack for a loaded machine): without
    // renewals only ~200 ms of the first lease would be left.
    assert!(
        left <= LEASE && left >= LEASE - LEASE / 3 - Duration::from_millis(150),
        "{left:?} of the lease left at the kill: renewals are off"
    );

    // Repeats until the lease ends; the one forwarded runs 500 ms upstream. Meanwhile,
    // as soon as the upstream has it, a burst of duplicates through two replicas.
    let u_b = b.url("/invoices/crash/charge");
    let u_c = c.url("/invoices/crash/charge");
    let retry = async {
        let mut refused = 0;
        let r = eventually(Duration::from_secs(3), "the lease expired", async || {
            let r = post(&u_b, &[("x-mock-delay-ms", "500")], "{}").await;
            if r.status == 409 {
                assert!(r.header("retry-after").is_some());
                refused += 1;
            }
            (r.status != 409).then_some(r)
        })
        .await;
        (r, refused, Instant::now())
    };
    let burst = async {
        eventually(Duration::from_secs(3), "the retry forwarded", async || {
            env.upstream.executions("charge:crash") == 2
        })
        .await;
        let sent = Instant::now();
        let burst = (0..20).map(|i| {
            let u = if i % 2 == 0 { &u_b } else { &u_c };
            async move { (post(u, &[], "{}").await, Instant::now()) }
        });
        (join_all(burst).await, sent)
    };
    let ((retried, refused, retry_answered), (burst, burst_sent)) = tokio::join!(retry, burst);
    let retried_at = env.upstream.received()[1].at;
    let freed = retried_at - killed;
    // Idem compares the record's own lease deadline.
    assert!(
        retried_at + Duration::from_millis(50) >= lease_end,
        "executed {:?} before the lease ended",
        lease_end - retried_at
    );
    assert!(
        retried_at <= lease_end + Duration::from_millis(300),
        "the key stayed held {:?} after its lease",
        retried_at - lease_end
    );
    assert_eq!(retried.status, 201, "{}", retried.text());
    assert!(!retried.replayed());
    // The upstream answers the retry 500 ms after it arrived, and not sooner: what was
    // answered before then was answered while the retry ran.
    let upstream_answered = retried_at + Duration::from_millis(500);
    assert!(
        burst_sent < upstream_answered && burst_sent < retry_answered,
        "the burst came after the retry ended"
    );
    for (r, at) in &burst {
        if *at < upstream_answered {
            assert_eq!(r.status, 409, "during the retry: {}", r.text());
            assert_eq!(r.code(), "request_in_progress");
        } else if r.status != 409 {
            assert!(r.replayed(), "{} {}", r.status, r.text());
            assert_eq!(r.body, retried.body);
        }
    }
    assert!(
        refused >= 3,
        "repeats were refused while the lease held ({refused})"
    );
    for u in [&u_b, &u_c] {
        let r = post(u, &[], "{}").await;
        assert!(r.replayed());
        assert_eq!(r.body, retried.body);
    }
    assert_eq!(
        env.upstream.executions("charge:crash"),
        2,
        "the killed call and exactly one retry, both with the same upstream key"
    );
    let restarted = IdemProcess::spawn(&lease).await;
    assert!(
        post(&restarted.url("/invoices/crash/charge"), &[], "{}")
            .await
            .replayed(),
        "a restarted idem needs no clean-up"
    );
    let during = burst
        .iter()
        .filter(|(_, at)| *at < upstream_answered)
        .count();
    println!(
        "MEASURED crash: {left:?} of the 1.2 s lease left at SIGKILL; retry forwarded {freed:?} after the kill, {:?} after the lease end; {refused} repeats refused before, {during} of 20 duplicates refused while it ran",
        retried_at.saturating_duration_since(lease_end)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_retries_after_the_lease_race_for_one_reservation() {
    let env = Env::new(Backend::redis()).await;
    let lease = yaml(&env, "1200ms");
    let mut a = IdemProcess::spawn(&lease).await;
    let b = IdemProcess::spawn(&lease).await;
    let c = IdemProcess::spawn(&lease).await;
    start_call(&env, &a, "race", "8000").await;
    a.kill();
    // Wait out the lease (one lease after the last renewal), then 20 retries at once
    // through two replicas.
    tokio::time::sleep(Duration::from_millis(1400)).await;
    let (u_b, u_c) = (
        b.url("/invoices/race/charge"),
        c.url("/invoices/race/charge"),
    );
    let burst = (0..20).map(|i| {
        let u = if i % 2 == 0 { u_b.clone() } else { u_c.clone() };
        async move { post(&u, &[("x-mock-delay-ms", "300")], "{}").await }
    });
    let results = join_all(burst).await;
    let forwarded = results
        .iter()
        .filter(|r| r.status == 201 && !r.replayed())
        .count();
    assert_eq!(
        forwarded,
        1,
        "{:?}",
        results.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for r in results.iter().filter(|r| r.status != 201) {
        assert_eq!(r.status, 409);
        assert_eq!(r.code(), "request_in_progress");
    }
    assert_eq!(env.upstream.executions("charge:race"), 2);
}
