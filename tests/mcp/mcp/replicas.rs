//! Two idem replicas sharing Redis in front of one MCP server: concurrent duplicates
//! from both SDKs and both eras wait for the one execution (`on_concurrent: wait`), or
//! get tool errors (`on_concurrent: conflict`).

use std::time::Duration;

use serde_json::json;

use super::{idem, redis_store, step, wait_for_first_call};
use crate::support::harness::url;
use crate::support::mcp::{call, outcome, python_client, typescript_client, McpServer};
use crate::support::otlp::OtlpReceiver;
use crate::support::poll::eventually;
use crate::support::redis::RedisServer;

/// (f) Concurrent duplicates from several clients of both SDKs and both eras, through
/// two idem replicas sharing Redis (`on_concurrent: wait`): one execution, one result.
/// Concurrent for certain: the first call is held at the server (a gate) until each of
/// the five duplicates has reached idem and tried to reserve the key. Counted one by
/// one, with tracing on: each reservation is a span of its own, exported as soon as it
/// ends, whose parent is its request's span; distinct parents are distinct requests (a
/// waiter reserving again after each nap, or a duplicate answered "in progress" by its
/// replica's own map without a Redis round trip, has the same one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_across_two_replicas_run_once() {
    let server = McpServer::start("sse");
    let redis = RedisServer::start();
    let otlp = OtlpReceiver::start().await;
    let traced = format!(
        "{}telemetry:\n  otlp_endpoint: {}\n  sample_ratio: 1.0\n",
        redis_store(&redis),
        otlp.url()
    );
    let wait = "    on_concurrent: wait\n    wait_timeout: 20s\n";
    let replicas = [
        idem(&server, &traced, wait).await,
        idem(&server, &traced, wait).await,
    ];
    let (a, b) = (url(&replicas[0], "/mcp"), url(&replicas[1], "/mcp"));
    let gate = server.gate();
    let args = json!({"customer": "c6", "amount": 500, "gate": gate});
    let slow = call("charge_customer", &args);
    let mut runs = vec![tokio::spawn(outcome(python_client(
        "session",
        &a,
        &[&slow],
    )))];
    wait_for_first_call(&server).await;
    let duplicates = vec![
        python_client("modern", &b, &[&slow]),
        typescript_client(&a, &[&slow]),
        python_client("session", &b, &[&slow]),
        typescript_client(&b, &[&slow]),
        python_client("modern", &a, &[&slow]),
    ];
    runs.extend(duplicates.into_iter().map(|c| tokio::spawn(outcome(c))));
    let requests = eventually(
        Duration::from_secs(60),
        "the first and five distinct duplicates reserved while the first runs",
        async || {
            let reserving = requests_that_reserved(&otlp);
            (reserving.len() >= 6).then_some(reserving)
        },
    )
    .await;
    assert_eq!(
        server.executions("charge_customer"),
        1,
        "the first still runs"
    );
    assert!(runs.iter().all(|r| !r.is_finished()), "nobody answered yet");
    server.open_gate();
    let mut texts = Vec::new();
    for run in runs {
        let out = run.await.unwrap();
        assert_eq!(step(&out, 0)["isError"], false, "{out}");
        texts.push(step(&out, 0)["text"].clone());
    }
    assert!(texts.iter().all(|t| *t == texts[0]), "{texts:?}");
    assert_eq!(server.executions("charge_customer"), 1);
    // The six that reserved are the six calls: the one executed, five replayed.
    assert_eq!(requests_that_reserved(&otlp), requests);
    let replayed = eventually(Duration::from_secs(30), "their spans", async || {
        let spans = otlp.spans();
        let of = |id: &String| spans.iter().find(|s| s.span_id == *id).cloned();
        let calls: Option<Vec<_>> = requests.iter().map(of).collect();
        calls.map(|calls| {
            calls
                .iter()
                .map(|c| c.attr("idem.replayed") == Some("true"))
                .collect::<Vec<_>>()
        })
    })
    .await;
    assert_eq!(replayed.iter().filter(|r| **r).count(), 5, "{replayed:?}");
}

/// The requests (their span ids) that asked the store for a reservation, as far as
/// their spans were exported yet.
fn requests_that_reserved(otlp: &OtlpReceiver) -> std::collections::BTreeSet<String> {
    otlp.spans()
        .into_iter()
        .filter(|s| s.name == "idem.store reserve")
        .map(|s| s.parent_span_id)
        .collect()
}

/// (g) With `on_concurrent: conflict`, a duplicate from another replica while the first
/// runs, and a reuse of the key with other arguments, are tool errors the SDK returns as
/// results (`isError`, the problem as `structuredContent`), never exceptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_and_mismatch_are_tool_errors_the_sdk_returns() {
    let server = McpServer::start("json");
    let redis = RedisServer::start();
    let store = redis_store(&redis);
    let keyed = "    key: \"charge:{body.params.arguments.customer}\"\n";
    let (a, b) = (
        idem(&server, &store, keyed).await,
        idem(&server, &store, keyed).await,
    );
    let (a, b) = (url(&a, "/mcp"), url(&b, "/mcp"));
    let gate = server.gate();
    let args = json!({"customer": "c7", "amount": 500, "gate": gate});
    let slow = call("charge_customer", &args);
    let first = tokio::spawn(outcome(python_client("session", &a, &[&slow])));
    wait_for_first_call(&server).await;
    for era in ["session", "modern"] {
        let busy = outcome(python_client(era, &b, &[&slow])).await;
        let busy = step(&busy, 0);
        assert_eq!(busy["isError"], true, "{busy}");
        assert_eq!(busy["structured"]["code"], "request_in_progress", "{busy}");
        assert!(busy["text"]
            .as_str()
            .unwrap()
            .contains("already being processed"));
    }
    server.open_gate();
    let first = first.await.unwrap();
    assert_eq!(step(&first, 0)["isError"], false);
    let other_amount = call(
        "charge_customer",
        &json!({"customer": "c7", "amount": 900, "gate": gate}),
    );
    let reused = outcome(python_client("modern", &b, &[&other_amount])).await;
    assert_eq!(step(&reused, 0)["isError"], true);
    assert_eq!(
        step(&reused, 0)["structured"]["code"],
        "idempotency_key_reused"
    );
    assert_eq!(server.executions("charge_customer"), 1);
}
