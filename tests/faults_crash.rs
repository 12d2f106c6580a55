//! Proxy crash (issue 3): what `tests/owners.rs` does not cover yet. An owner killed
//! (SIGKILL) mid-request while its lease was being renewed: the reservation expires
//! within one `lease` of the last renewal, never before; then a burst of concurrent
//! retries through two other replicas forwards exactly one, with the same upstream key.

mod support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{post, send, try_send, IdemProcess};

fn yaml(env: &Env) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: 1200ms\n",
        env.base_yaml("10s")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_owner_then_a_burst_of_retries_forwards_exactly_one() {
    let env = Env::new(Backend::Redis).await;
    let mut a = IdemProcess::spawn(&yaml(&env)).await;
    let b = IdemProcess::spawn(&yaml(&env)).await;
    let c = IdemProcess::spawn(&yaml(&env)).await;
    let u_a = a.url("/invoices/crash/charge");
    tokio::spawn(async move { try_send("POST", &u_a, &[("x-mock-delay-ms", "8000")], "{}").await });
    // Past two renewals (every lease/3 = 400 ms), so the lease is not the first one.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let record = send("GET", &b.admin_url("/v1/keys/charge/charge:crash"), &[], "").await;
    assert_eq!(record.json()["state"], "in_progress");
    a.kill();
    let killed = Instant::now();

    // Until the lease ends, every repeat is refused: 409 with a Retry-After.
    let u_b = b.url("/invoices/crash/charge");
    let u_c = c.url("/invoices/crash/charge");
    let mut refused = 0;
    let freed = loop {
        let r = post(&u_b, &[], "{}").await;
        if r.status != 409 {
            assert_eq!(r.status, 201, "{}", r.text());
            // That one was forwarded: now the burst, which must all be answered by
            // replays of it, or 409 while it runs — never a second execution.
            break killed.elapsed();
        }
        assert!(r.header("retry-after").is_some());
        refused += 1;
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
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
    let results = join_all(burst).await;
    for r in &results {
        assert!(r.replayed(), "{} {}", r.status, r.text());
    }
    assert_eq!(
        env.upstream.executions("charge:crash"),
        2,
        "the killed call and exactly one retry, both with the same upstream key"
    );
    println!("MEASURED crash: key free {freed:?} after SIGKILL (lease 1.2 s, {refused} repeats refused meanwhile)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_retries_after_the_lease_race_for_one_reservation() {
    let env = Env::new(Backend::Redis).await;
    let mut a = IdemProcess::spawn(&yaml(&env)).await;
    let b = IdemProcess::spawn(&yaml(&env)).await;
    let c = IdemProcess::spawn(&yaml(&env)).await;
    let u_a = a.url("/invoices/race/charge");
    tokio::spawn(async move { try_send("POST", &u_a, &[("x-mock-delay-ms", "8000")], "{}").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.kill();
    // Wait out the lease, then 20 retries at once through two replicas.
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
