//! Several idem replicas sharing one Redis or PostgreSQL: one winner across replicas,
//! and a waiting duplicate on one replica learns of a completion on another (pub/sub or
//! LISTEN/NOTIFY, not polling).

use crate::store_cases;
use crate::support;

use std::time::Duration;

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{admin_url, assert_all_got_the_one_result, metric_sum, post, send, url};
use support::poll::eventually;

store_cases!([redis, postgres] [
    fifty_duplicates_across_three_replicas_execute_once,
    waiting_duplicates_across_replicas_all_get_the_one_result,
    a_waiter_on_another_replica_is_woken_by_the_completion,
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

/// The waiter's replica learns of the completion from the store's notification, not
/// from its safety re-check: counted by what woke it, so no clock is involved.
async fn a_waiter_on_another_replica_is_woken_by_the_completion(backend: Backend) {
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
        post(&url(&b, "/invoices/inv_z/charge"), &[], "{}").await
    };
    let (first, second) = tokio::join!(first, waiter);
    assert_eq!(first.status, 201);
    assert!(second.replayed());
    let metrics = send("GET", &admin_url(&b, "/metrics"), &[], "")
        .await
        .text();
    let woken = r#"idem_duplicate_wakeups_total{by="notification"}"#;
    assert!(metric_sum(&metrics, woken) >= 1.0, "{metrics}");
}
