//! An owner lost mid-request, across real processes: killed (SIGKILL) or frozen
//! (SIGSTOP) past its lease. The reservation expires within one `lease` of the last
//! renewal, never before; then exactly one retry is forwarded, with the same upstream
//! key, however many race for it; a frozen owner's late completion is refused and
//! counted; a restarted idem needs no clean-up.

mod support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{metric_sum, post, send, try_send, IdemProcess};
use support::poll::eventually;

fn yaml(env: &Env, lease: &str) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: {lease}\n",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_owner_cannot_overwrite_its_successor() {
    let env = Env::new(Backend::redis()).await;
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

/// SIGKILL while the lease was being renewed: until one lease after the last renewal
/// every repeat is refused (409 with `Retry-After`); then one retry is forwarded and the
/// rest replay it. A restarted idem replays it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_owner_then_a_burst_of_retries_forwards_exactly_one() {
    let env = Env::new(Backend::redis()).await;
    let lease = yaml(&env, "1200ms");
    let mut a = IdemProcess::spawn(&lease).await;
    let b = IdemProcess::spawn(&lease).await;
    let c = IdemProcess::spawn(&lease).await;
    start_call(&env, &a, "crash", "8000").await;
    // Past two renewals (every lease/3 = 400 ms), so the lease is not the first one.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let record = send("GET", &b.admin_url("/v1/keys/charge/charge:crash"), &[], "").await;
    assert_eq!(record.json()["state"], "in_progress");
    a.kill();
    let killed = Instant::now();

    let u_b = b.url("/invoices/crash/charge");
    let u_c = c.url("/invoices/crash/charge");
    let mut refused = 0;
    eventually(Duration::from_secs(3), "the lease expired", async || {
        let r = post(&u_b, &[], "{}").await;
        if r.status == 409 {
            assert!(r.header("retry-after").is_some());
            refused += 1;
            return false;
        }
        assert_eq!(r.status, 201, "{}", r.text());
        true
    })
    .await;
    let freed = killed.elapsed();
    assert!(
        refused >= 3,
        "repeats were refused while the lease held ({refused})"
    );
    assert!(
        freed <= Duration::from_millis(1200 + 300),
        "freed {freed:?} after the kill"
    );
    let burst = (0..20).map(|i| {
        let u = if i % 2 == 0 { u_b.clone() } else { u_c.clone() };
        async move { post(&u, &[], "{}").await }
    });
    for r in join_all(burst).await {
        assert!(r.replayed(), "{} {}", r.status, r.text());
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
    println!("MEASURED crash: key free {freed:?} after SIGKILL (lease 1.2 s, {refused} repeats refused meanwhile)");
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
