//! Lease ownership across real processes: an owner frozen (SIGSTOP) past its lease or
//! killed (SIGKILL) mid-request. The successor runs exactly once with the same upstream
//! key, and a stale owner's late completion is refused and counted.

mod support;

use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{post, send, IdemProcess};

shared_stores!(
    frozen_owner_cannot_overwrite_its_successor,
    killed_owner_leaves_a_lease_that_expires,
    sigterm_drains_in_flight_calls_and_records_them,
);

fn yaml(env: &Env) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: 1s\n",
        env.base_yaml("10s")
    )
}

async fn metric(p: &IdemProcess, name: &str) -> f64 {
    let text = send("GET", &p.admin_url("/metrics"), &[], "").await.text();
    support::harness::metric_sum(&text, name)
}

async fn frozen_owner_cannot_overwrite_its_successor(backend: Backend) {
    let env = Env::new(backend).await;
    let a = IdemProcess::spawn(&yaml(&env)).await;
    let b = IdemProcess::spawn(&yaml(&env)).await;
    let u_a = a.url("/invoices/inv_f/charge");
    let first = tokio::spawn(async move {
        support::harness::try_send("POST", &u_a, &[("x-mock-delay-ms", "1500")], "{}").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.signal("STOP");
    // Past the lease: A cannot renew, so the reservation expires.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let successor = post(&b.url("/invoices/inv_f/charge"), &[], "{}").await;
    assert_eq!(successor.status, 201, "{}", successor.text());
    assert!(!successor.replayed());
    assert_eq!(
        env.upstream.executions("charge:inv_f"),
        2,
        "same upstream key both times"
    );
    a.signal("CONT");
    let _ = first.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(metric(&a, "idem_stale_completions_total").await, 1.0);
    // The successor's record stands.
    let again = post(&b.url("/invoices/inv_f/charge"), &[], "{}").await;
    assert!(again.replayed());
    assert_eq!(again.body, successor.body);
}

async fn killed_owner_leaves_a_lease_that_expires(backend: Backend) {
    let env = Env::new(backend).await;
    let mut a = IdemProcess::spawn(&yaml(&env)).await;
    let b = IdemProcess::spawn(&yaml(&env)).await;
    let u_a = a.url("/invoices/inv_k/charge");
    tokio::spawn(async move {
        support::harness::try_send("POST", &u_a, &[("x-mock-delay-ms", "3000")], "{}").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.kill();
    let u = b.url("/invoices/inv_k/charge");
    let r = post(&u, &[], "{}").await;
    assert_eq!(r.status, 409, "until the lease expires, repeats wait");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = post(&u, &[], "{}").await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        env.upstream.executions("charge:inv_k"),
        2,
        "one retry, same upstream key"
    );
    assert!(post(&u, &[], "{}").await.replayed());
    // A restarted idem needs no clean-up.
    let c = IdemProcess::spawn(&yaml(&env)).await;
    assert!(post(&c.url("/invoices/inv_k/charge"), &[], "{}")
        .await
        .replayed());
}

async fn sigterm_drains_in_flight_calls_and_records_them(backend: Backend) {
    let env = Env::new(backend).await;
    let mut a = IdemProcess::spawn(&yaml(&env)).await;
    let u_a = a.url("/invoices/inv_d/charge");
    let inflight =
        tokio::spawn(async move { post(&u_a, &[("x-mock-delay-ms", "800")], "{}").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.signal("TERM");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ready = send("GET", &a.admin_url("/readyz"), &[], "").await;
    assert_eq!((ready.status, ready.text().trim()), (503, "draining"));
    let refused =
        support::harness::try_send("POST", &a.url("/invoices/other/charge"), &[], "{}").await;
    assert!(refused.is_err(), "no new connections while draining");
    let r = inflight.await.unwrap();
    assert_eq!(r.status, 201, "the in-flight call finished");
    let status = tokio::task::spawn_blocking(move || a.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit 0 after draining: {status:?}");
    let b = IdemProcess::spawn(&yaml(&env)).await;
    let again = post(&b.url("/invoices/inv_d/charge"), &[], "{}").await;
    assert!(again.replayed(), "the outcome was recorded before exit");
}
