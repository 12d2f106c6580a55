//! Which MCP messages an `mcp:` route protects, seen from the upstream's side (a mock
//! that records every request): a protected `tools/call` arrives with the
//! `Idempotency-Key` idem adds, anything else arrives as sent. The SDK-driven behaviour
//! is in `tests/mcp/mcp.rs`; these are the wire-level cases SDKs never produce.

use crate::support;

use serde_json::json;
use support::harness::{self, post, url};
use support::upstream::MockUpstream;

async fn idem(upstream: &MockUpstream) -> harness::Idem {
    harness::start(&format!(
        "upstream:\n  url: {}\nroutes:\n  - name: tools\n    path: /mcp\n    max_request_bytes: 1KiB\n    mcp:\n      tools: [charge_customer]\n",
        upstream.url()
    ))
    .await
}

fn tools_call(id: u64, tool: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {"customer": "c1"}, "_meta": {"progressToken": id}}})
    .to_string()
}

fn protected(upstream: &MockUpstream) -> Vec<bool> {
    let received = upstream.received();
    received
        .iter()
        .map(|r| r.headers.contains_key("idempotency-key"))
        .collect()
}

/// Every message is read, whatever its headers say (issue 46 §7: a header is never
/// taken at its word), so the route's `max_request_bytes` bounds every message: over
/// it, 413 and nothing forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_read_whatever_its_headers_say() {
    let upstream = MockUpstream::start().await;
    let idem = idem(&upstream).await;
    let mcp = url(&idem, "/mcp");
    // Small enough for the socket buffers: a refused body larger than them would break
    // the client's write before it reads the 413.
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(4 << 10));
    let lookup = [("mcp-method", "tools/call"), ("mcp-name", "lookup")];
    assert_eq!(post(&mcp, &lookup, &big).await.status, 413);
    let discover = [("mcp-method", "server/discover")];
    assert_eq!(post(&mcp, &discover, &big).await.status, 413);
    assert_eq!(post(&mcp, &[], &big).await.status, 413);
    assert_eq!(upstream.received().len(), 0);
}

/// A `Mcp-Method` / `Mcp-Name` header that disagrees with the body is answered by idem
/// with JSON-RPC error -32020 (HTTP 400), never forwarded; headers that agree, or none,
/// leave the body to decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_that_disagrees_with_the_body_is_refused() {
    let upstream = MockUpstream::start().await;
    let idem = idem(&upstream).await;
    let mcp = url(&idem, "/mcp");
    let cases = [
        (
            vec![("mcp-method", "tools/call"), ("mcp-name", "lookup")],
            tools_call(1, "charge_customer"),
        ),
        (
            vec![
                ("mcp-method", "tools/call"),
                ("mcp-name", "charge_customer"),
            ],
            tools_call(2, "lookup"),
        ),
        (
            vec![("mcp-method", "tools/list")],
            tools_call(3, "charge_customer"),
        ),
    ];
    for (n, (headers, body)) in cases.iter().enumerate() {
        let r = post(&mcp, headers, body).await;
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], -32020, "{v}");
        assert_eq!(v["id"], n + 1, "{v}");
    }
    assert_eq!(upstream.received().len(), 0);
    // Headers and body agreeing (or no headers): protected, with the key passed on.
    let agree = [
        ("mcp-method", "tools/call"),
        ("mcp-name", "charge_customer"),
    ];
    post(&mcp, &agree, &tools_call(4, "charge_customer")).await;
    post(&mcp, &[], &tools_call(5, "lookup")).await;
    assert_eq!(protected(&upstream), [true, false]);
    let key = upstream.received()[0].headers["idempotency-key"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(key.starts_with("charge_customer:"), "{key}");
}

/// An answer that is not a JSON-RPC response for the call (here the mock's own JSON),
/// or an HTTP error status (an unknown session), is passed on and never stored: the
/// repeat is forwarded again. On a plain HTTP route the 404 would be stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_are_not_the_calls_outcome_are_not_stored() {
    let upstream = MockUpstream::start().await;
    let idem = idem(&upstream).await;
    let mcp = url(&idem, "/mcp");
    for id in [1, 2] {
        let r = post(
            &mcp,
            &[("x-mock-status", "404")],
            &tools_call(id, "charge_customer"),
        )
        .await;
        assert_eq!(r.status, 404);
    }
    for id in [3, 4] {
        let r = post(&mcp, &[], &tools_call(id, "charge_customer")).await;
        assert_eq!(r.status, 201);
        assert!(!r.replayed());
    }
    assert_eq!(protected(&upstream), [true, true, true, true]);
}
