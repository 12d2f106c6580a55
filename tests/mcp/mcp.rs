//! MCP `tools/call` made idempotent (SPEC §8), tested with the official SDKs as real
//! peers: a Python SDK server (`tests/mcp/server.py`) behind idem, driven by the Python
//! SDK in both eras (`ClientSession`: session era; `Client`: 2026-07-28) and the
//! TypeScript SDK (session era). Each repeat is a new session or a new client, with a
//! new JSON-RPC id: what must stay one execution.

mod replicas;
use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::harness::{self, post, url, Idem};
use support::mcp::{call, outcome, python_client, typescript_client, McpServer};
use support::poll::eventually;
use support::redis::RedisServer;

const TOOLS: &str = "[charge_customer, decline, confirm_refund]";

/// idem in front of `server`, one MCP route with `route_extra` settings.
async fn idem(server: &McpServer, store: &str, route_extra: &str) -> Idem {
    harness::start(&format!(
        "upstream:\n  url: {}\n  timeout: 30s\n{store}routes:\n  - name: billing\n    path: /mcp\n    mcp:\n      tools: {TOOLS}\n{route_extra}",
        server.url()
    ))
    .await
}

const MEMORY: &str = "store:\n  backend: memory\n";

fn redis_store(redis: &RedisServer) -> String {
    format!(
        "store:\n  backend: redis\n  redis:\n    url: {}\n",
        redis.url()
    )
}

fn step(out: &Value, n: usize) -> &Value {
    &out["steps"][n]
}

fn charge(customer: &str, delay: f64) -> String {
    call(
        "charge_customer",
        &json!({"customer": customer, "amount": 500, "delay": delay}),
    )
}

/// (a) Session era, Python SDK: a repeat from a new session (new session id, new
/// request id, arguments re-serialised in another order) is answered from the first
/// execution; an unprotected tool still runs each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_era_repeat_from_a_new_session_runs_once() {
    let server = McpServer::start("json");
    let idem = idem(&server, MEMORY, "").await;
    let mcp = url(&idem, "/mcp");
    let lookup = call("lookup", &json!({"customer": "c1"}));
    let first = outcome(python_client(
        "session",
        &mcp,
        &[&charge("c1", 0.0), &lookup],
    ))
    .await;
    let reordered = call(
        "charge_customer",
        &json!({"delay": 0.0, "amount": 500, "customer": "c1"}),
    );
    let again = outcome(python_client("session", &mcp, &[&reordered, &lookup])).await;
    assert_eq!(first["protocol"], "2025-11-25");
    assert_eq!(step(&first, 0)["isError"], false);
    assert_eq!(step(&again, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(server.executions("charge_customer"), 1);
    assert_eq!(
        server.executions("lookup"),
        2,
        "unprotected tools pass through"
    );
}

/// (b) 2026-07-28 era, Python SDK `Client` (server/discover, no session): two
/// independent clients, one execution; a session-era client repeating it gets the same
/// result too (the replay carries the `resultType` its era expects, or not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_era_repeat_from_a_new_client_runs_once_across_eras() {
    let server = McpServer::start("json");
    let idem = idem(&server, MEMORY, "").await;
    let mcp = url(&idem, "/mcp");
    let first = outcome(python_client("modern", &mcp, &[&charge("c2", 0.0)])).await;
    let again = outcome(python_client("modern", &mcp, &[&charge("c2", 0.0)])).await;
    let old_era = outcome(python_client("session", &mcp, &[&charge("c2", 0.0)])).await;
    assert_eq!(first["protocol"], "2026-07-28");
    assert_eq!(step(&again, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(step(&old_era, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(server.executions("charge_customer"), 1);
    // And the other way round: first in the session era, repeated in the new one.
    let first = outcome(python_client("session", &mcp, &[&charge("c3", 0.0)])).await;
    let again = outcome(python_client("modern", &mcp, &[&charge("c3", 0.0)])).await;
    assert_eq!(step(&again, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(server.executions("charge_customer"), 2);
}

/// (c) TypeScript SDK, two sessions: the second gets the replay, keeps its own session
/// id (a replay never carries the first session's), and its session keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sessions_get_the_replay_and_keep_their_session() {
    let server = McpServer::start("sse");
    let idem = idem(&server, MEMORY, "").await;
    let mcp = url(&idem, "/mcp");
    let lookup = call("lookup", &json!({"customer": "c4"}));
    let first = outcome(typescript_client(&mcp, &[&charge("c4", 0.0)])).await;
    let second = outcome(typescript_client(&mcp, &[&charge("c4", 0.0), &lookup])).await;
    assert_eq!(step(&second, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(step(&second, 0)["isError"], false);
    for (which, out) in [("first", &first), ("second", &second)] {
        for when in ["sessionBefore", "sessionAfter"] {
            let id = out[when].as_str().unwrap_or_default();
            assert!(
                !id.is_empty(),
                "{which} client: no {when} session id: {out}"
            );
        }
    }
    assert_ne!(second["sessionBefore"], first["sessionBefore"]);
    assert_eq!(second["sessionAfter"], second["sessionBefore"]);
    assert_eq!(step(&second, 1)["text"], "c4: active");
    assert_eq!(server.executions("charge_customer"), 1);
}

/// (d) Event-stream answers stream through: the progress notification reaches the SDK
/// long before the slow result; the replay is one `application/json` message under the
/// new request's id, without a session id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_progress_arrives_before_the_result_and_the_replay_is_json() {
    let server = McpServer::start("sse");
    let idem = idem(&server, MEMORY, "").await;
    let mcp = url(&idem, "/mcp");
    let first = outcome(python_client("session", &mcp, &[&charge("c5", 2.0)])).await;
    let result = step(&first, 0);
    let progress_at = result["progress"][0]["at"]
        .as_f64()
        .expect("a progress notification");
    let elapsed = result["elapsed"].as_f64().unwrap();
    // The tool sleeps 2 s between its progress notification and its result.
    assert!(
        progress_at < elapsed - 1.0,
        "progress at {progress_at} s, result at {elapsed} s"
    );

    let body = json!({"jsonrpc": "2.0", "id": "raw-1", "method": "tools/call",
        "params": {"name": "charge_customer", "arguments": {"customer": "c5", "amount": 500, "delay": 2.0}}});
    let accept = ("accept", "application/json, text/event-stream");
    let replay = post(
        &mcp,
        &[accept, ("content-type", "application/json")],
        &body.to_string(),
    )
    .await;
    assert_eq!(replay.status, 200);
    assert!(replay.replayed());
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.header("mcp-session-id"), None);
    let message = replay.json();
    assert_eq!(message["id"], "raw-1");
    assert_eq!(message["result"]["content"][0]["text"], result["text"]);
    assert_eq!(server.executions("charge_customer"), 1);
}

/// (e) `tools/list` through idem marks the protected tools only, in both eras and for
/// both answer kinds; `describe: false` leaves it untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_marks_protected_tools_only_in_both_eras() {
    for answers in ["json", "sse"] {
        let server = McpServer::start(answers);
        let idem = idem(&server, MEMORY, "").await;
        let mcp = url(&idem, "/mcp");
        for era in ["session", "modern"] {
            let out = outcome(python_client(era, &mcp, &["list"])).await;
            let tools = &step(&out, 0)["tools"];
            let charge = &tools["charge_customer"];
            assert_eq!(charge["idempotentHint"], true, "{answers} {era}");
            let description = charge["description"].as_str().unwrap();
            assert!(
                description.starts_with("Charge a customer's card. "),
                "{description}"
            );
            assert!(
                description.contains("returns the first call's result"),
                "{description}"
            );
            assert_eq!(tools["lookup"]["idempotentHint"], Value::Null);
            assert_eq!(tools["lookup"]["readOnlyHint"], true);
            assert_eq!(tools["lookup"]["description"], "Look a customer up.");
        }
        let out = outcome(typescript_client(&mcp, &["list"])).await;
        assert_eq!(
            step(&out, 0)["tools"]["decline"]["idempotentHint"],
            true,
            "{answers}"
        );
    }
    let server = McpServer::start("json");
    let idem = harness::start(&format!(
        "upstream:\n  url: {}\nroutes:\n  - name: billing\n    path: /mcp\n    mcp:\n      tools: [charge_customer]\n      describe: false\n",
        server.url()
    ))
    .await;
    let out = outcome(python_client("session", &url(&idem, "/mcp"), &["list"])).await;
    let charge = &step(&out, 0)["tools"]["charge_customer"];
    assert_eq!(charge["idempotentHint"], Value::Null);
    assert_eq!(charge["description"], "Charge a customer's card.");
}

/// A tool result with `isError: true` is a definitive outcome: stored and replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_result_is_stored_and_replayed() {
    let server = McpServer::start("sse");
    let idem = idem(&server, MEMORY, "").await;
    let mcp = url(&idem, "/mcp");
    let decline = call("decline", &json!({"customer": "c8"}));
    let first = outcome(python_client("session", &mcp, &[&decline])).await;
    let again = outcome(typescript_client(&mcp, &[&decline])).await;
    assert_eq!(step(&first, 0)["isError"], true);
    assert_eq!(step(&again, 0)["isError"], true);
    assert_eq!(step(&again, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(server.executions("decline"), 1);
}

/// (h) An `input_required` result is not stored: the reservation is released, so the
/// SDK's continuation (same tool and arguments, with `requestState`) is forwarded and
/// runs; its final result is what a later repeat gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_required_is_not_stored() {
    let server = McpServer::start("json");
    let idem = idem(&server, MEMORY, "").await;
    let mcp = url(&idem, "/mcp");
    let refund = call("confirm_refund", &json!({"order": "o1"}));
    let first = outcome(python_client("modern", &mcp, &[&refund])).await;
    assert_eq!(server.executions("confirm_refund_asked"), 1);
    assert_eq!(server.executions("confirm_refund"), 1);
    let again = outcome(python_client("modern", &mcp, &[&refund])).await;
    assert!(step(&first, 0)["text"]
        .as_str()
        .unwrap()
        .starts_with("refunded o1"));
    assert_eq!(step(&again, 0)["text"], step(&first, 0)["text"]);
    assert_eq!(server.executions("confirm_refund_asked"), 1);
    assert_eq!(server.executions("confirm_refund"), 1);
}

/// A client that goes away mid-call does not cancel it: idem keeps its upstream stream
/// until the final response and records it; the retry (a new client, a new id) gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_client_does_not_cancel_the_call() {
    let server = McpServer::start("sse");
    let wait = "    on_concurrent: wait\n    wait_timeout: 20s\n";
    let idem = idem(&server, MEMORY, wait).await;
    let mcp = url(&idem, "/mcp");
    let slow = charge("c9", 2.0);
    let mut gone = python_client("modern", &mcp, &[&slow])
        .spawn()
        .expect("start client");
    wait_for_first_call(&server).await;
    gone.kill().await.expect("kill the client mid-call");
    let retry = outcome(python_client("modern", &mcp, &[&slow])).await;
    assert_eq!(step(&retry, 0)["isError"], false, "{retry}");
    assert!(step(&retry, 0)["text"]
        .as_str()
        .unwrap()
        .starts_with("charged c9 500"));
    assert_eq!(server.executions("charge_customer"), 1);
}

/// Waits until the server runs the first `charge_customer` call.
async fn wait_for_first_call(server: &McpServer) {
    eventually(
        Duration::from_secs(30),
        "the first call running",
        async || server.executions("charge_customer") == 1,
    )
    .await;
}
