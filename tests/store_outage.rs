//! The store goes away: `on_error: reject` refuses (503, nothing forwarded),
//! `passthrough` forwards marked degraded, readiness follows the store, and idem
//! recovers by itself when Redis returns.

mod support;

use std::time::{Duration, Instant};

use support::env::{Backend, Env};
use support::harness::{admin_url, post, send, url};

fn routes(on_error: &str) -> String {
    format!(
        "  on_error: {on_error}\nroutes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_refuses_and_recovers_when_redis_returns() {
    let mut env = Env::new(Backend::Redis).await;
    let idem = env.idem(&routes("reject")).await;
    assert_eq!(
        send("GET", &admin_url(&idem, "/readyz"), &[], "")
            .await
            .status,
        200
    );
    env.redis.as_mut().unwrap().stop();
    let r = post(&url(&idem, "/invoices/o1/charge"), &[], "{}").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "store_unavailable");
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        env.upstream.total_executions(),
        0,
        "nothing reaches the upstream"
    );
    assert_eq!(
        send("GET", &admin_url(&idem, "/readyz"), &[], "")
            .await
            .status,
        503
    );

    env.redis.as_mut().unwrap().start_again();
    let started = Instant::now();
    loop {
        let r = post(&url(&idem, "/invoices/o1/charge"), &[], "{}").await;
        if r.status == 201 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no recovery: {}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        send("GET", &admin_url(&idem, "/readyz"), &[], "")
            .await
            .status,
        200
    );
    assert!(post(&url(&idem, "/invoices/o1/charge"), &[], "{}")
        .await
        .replayed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_forwards_marked_degraded() {
    let mut env = Env::new(Backend::Redis).await;
    let idem = env.idem(&routes("passthrough")).await;
    env.redis.as_mut().unwrap().stop();
    let r = post(&url(&idem, "/invoices/o2/charge"), &[], "{}").await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("idempotency-degraded"), Some("true"));
    assert_eq!(env.upstream.total_executions(), 1);
}
