//! A memory store full of records that cannot be evicted (in flight or unknown) says so
//! (SPEC §1 "Upstream outages"): a fresh intent gets 503 `store_full`, is never sent,
//! not even with `on_error: passthrough` (the store is reachable, it is full); repeats
//! are still answered, and once calls complete their records make room again.

use crate::support;

use std::time::Duration;

use support::harness::{self, admin_url, send, url, Idem};
use support::poll::eventually;
use support::upstream::MockUpstream;

async fn charge(idem: &Idem, id: &str, headers: &[(&str, &str)]) -> support::harness::Resp {
    send(
        "POST",
        &url(idem, &format!("/invoices/{id}/charge")),
        headers,
        "{}",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_refuses_fresh_intents_and_keeps_serving_repeats() {
    let upstream = MockUpstream::start().await;
    let idem = harness::start(&format!(
        "upstream:\n  url: {}\n  timeout: 5s\nstore:\n  backend: memory\n  memory:\n    max_records: 3\n  on_error: passthrough\n\
         routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n",
        upstream.url()
    ))
    .await;
    let slow = [("x-mock-delay-ms", "1500")];
    let calls: Vec<_> = ["s1", "s2", "s3"]
        .into_iter()
        .map(|id| {
            let target = url(&idem, &format!("/invoices/{id}/charge"));
            tokio::spawn(async move { send("POST", &target, &slow, "{}").await })
        })
        .collect();
    eventually(
        Duration::from_secs(5),
        "three calls in flight",
        async || upstream.total_executions() == 3,
    )
    .await;

    let full = charge(&idem, "fresh", &[]).await;
    assert_eq!(
        (full.status, full.code().as_str()),
        (503, "store_full"),
        "{}",
        full.text()
    );
    let detail = full.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("3 records") && detail.contains("nothing was executed"),
        "{detail}"
    );
    assert!(full.header("retry-after").is_some());
    assert_eq!(
        upstream.executions("charge:fresh"),
        0,
        "never forwarded, even with passthrough"
    );
    assert_eq!(full.header("idempotency-degraded"), None);
    let repeat = charge(&idem, "s1", &[]).await;
    assert_eq!(
        (repeat.status, repeat.code().as_str()),
        (409, "request_in_progress")
    );

    for call in calls {
        assert_eq!(call.await.unwrap().status, 201);
    }
    // Completed: replayed, and evictable to make room for the fresh intent.
    let replay = charge(&idem, "s2", &[]).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(charge(&idem, "fresh", &[]).await.status, 201);
    assert_eq!(upstream.executions("charge:fresh"), 1);
    let metrics = send("GET", &admin_url(&idem, "/metrics"), &[], "")
        .await
        .text();
    assert!(
        metrics.contains(r#"idem_requests_total{route="charge",outcome="store_error"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_records_is_checked() {
    let upstream = MockUpstream::start().await;
    let yaml = format!(
        "upstream:\n  url: {}\nstore:\n  memory:\n    max_records: 0\nroutes: []\n",
        upstream.url()
    );
    let errors = idem::config::Config::from_yaml_str(&yaml, None)
        .unwrap_err()
        .to_string();
    assert!(errors.contains("store.memory.max_records"), "{errors}");
    assert!(errors.contains("at least 1"), "{errors}");
}
