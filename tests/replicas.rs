//! Several idem replicas sharing one Redis or PostgreSQL: one winner across replicas,
//! and a waiting duplicate on one replica learns of a completion on another (pub/sub or
//! LISTEN/NOTIFY, not polling).

mod support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{assert_all_got_the_one_result, post, url};
use support::poll::eventually;

store_cases!([redis, postgres] [
    fifty_duplicates_across_three_replicas_execute_once,
    waiting_duplicates_across_replicas_all_get_the_one_result,
    a_waiter_on_another_replica_is_woken_promptly,
]);

const CHARGE: &str = r#"
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
    on_concurrent: wait
    wait_timeout: 5s
"#;

async fn fifty_duplicates_across_three_replicas_execute_once(backend: Backend) {
    let env = Env::new(backend).await;
    let conflict = CHARGE
        .replace("on_concurrent: wait", "on_concurrent: conflict")
        .replace("    wait_timeout: 5s\n", "");
    let replicas = [
        env.idem(&conflict).await,
        env.idem(&conflict).await,
        env.idem(&conflict).await,
    ];
    let calls = (0..50).map(|i| {
        let u = url(&replicas[i % 3], "/invoices/inv_x/charge");
        async move { post(&u, &[("x-mock-delay-ms", "300")], "{}").await }
    });
    let results = join_all(calls).await;
    assert_eq!(env.upstream.executions("charge:inv_x"), 1);
    assert!(results.iter().all(|r| r.status == 201 || r.status == 409));
}

async fn waiting_duplicates_across_replicas_all_get_the_one_result(backend: Backend) {
    let env = Env::new(backend).await;
    let replicas = [
        env.idem(CHARGE).await,
        env.idem(CHARGE).await,
        env.idem(CHARGE).await,
    ];
    let calls = (0..30).map(|i| {
        let u = url(&replicas[i % 3], "/invoices/inv_y/charge");
        async move { post(&u, &[("x-mock-delay-ms", "300")], "{}").await }
    });
    let results = join_all(calls).await;
    assert_eq!(env.upstream.executions("charge:inv_y"), 1);
    assert_all_got_the_one_result(&results);
}

async fn a_waiter_on_another_replica_is_woken_promptly(backend: Backend) {
    let env = Env::new(backend).await;
    let a = env.idem(CHARGE).await;
    let b = env.idem(CHARGE).await;
    let first_url = url(&a, "/invoices/inv_z/charge");
    let first = post(&first_url, &[("x-mock-delay-ms", "1500")], "{}");
    let waiter = async {
        eventually(
            Duration::from_secs(3),
            "the first call forwarded",
            async || env.upstream.executions("charge:inv_z") == 1,
        )
        .await;
        let started = Instant::now();
        let r = post(&url(&b, "/invoices/inv_z/charge"), &[], "{}").await;
        (r, started.elapsed())
    };
    let (first, (second, waited)) = tokio::join!(first, waiter);
    assert_eq!(first.status, 201);
    assert!(second.replayed());
    // The first call finished ~1.3 s after the waiter arrived; without pub/sub the waiter
    // would only notice at its 1 s safety re-check or later. Generous bound for slow CI.
    assert!(
        waited < Duration::from_millis(1300 + 400),
        "waited {waited:?}"
    );
}
