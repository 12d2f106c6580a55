//! A route's circuit breaker (SPEC §1 "Upstream outages"), from outside, on every store:
//! an upstream that resets every call after reading it executes at most `after` of them;
//! the rest are 503 `circuit_open`, neither reserved nor sent, while stored intents are
//! still replayed and live ones still answered 409; after the cool-down one probe closes
//! it and the refused intents then go through, once each.

use crate::store_cases;
use crate::support;

use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{admin_url, metric_sum, send, url, Idem, Resp};

const AFTER: u64 = 3;
/// Long enough that the outage's ~20 round trips (and their checks) all fall inside it
/// on a loaded machine: a refused intent must not become the probe.
const COOL_DOWN: Duration = Duration::from_millis(5000);
const RESET: &[(&str, &str)] = &[("x-mock-reset", "true")];

fn routes() -> String {
    format!(
        "routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: 5s\n    breaker: {{after: {AFTER}, cool_down: {}ms}}\n",
        COOL_DOWN.as_millis()
    )
}

async fn charge(idem: &Idem, id: &str, headers: &[(&str, &str)]) -> Resp {
    let path = format!("/invoices/{id}/charge");
    send("POST", &url(idem, &path), headers, "{\"amount\": 5}").await
}

async fn metric(idem: &Idem, series: &str) -> f64 {
    let text = send("GET", &admin_url(idem, "/metrics"), &[], "")
        .await
        .text();
    metric_sum(&text, series)
}

async fn record_status(idem: &Idem, id: &str) -> u16 {
    let path = format!("/v1/keys/charge/charge:{id}");
    send("GET", &admin_url(idem, &path), &[], "").await.status
}

async fn an_outage_opens_the_breaker_and_a_probe_closes_it(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem_with_timeout(&routes(), "1s").await;
    let upstream = env.upstream.clone();
    let open_series = "idem_breaker_open{route=\"charge\"}";
    let trips_series = "idem_breaker_trips_total{route=\"charge\"}";
    assert_eq!(
        metric(&idem, open_series).await,
        0.0,
        "the series exists at 0"
    );

    // Before the outage: one intent completes (its repeats must keep replaying).
    assert_eq!(charge(&idem, "done", &[]).await.status, 201);

    // The outage: every call is read, then the connection is reset.
    let ids: Vec<String> = (0..10).map(|n| format!("out{n}")).collect();
    let mut refused = Vec::new();
    for id in &ids {
        let r = charge(&idem, id, RESET).await;
        match r.status {
            504 => assert_eq!(r.code(), "upstream_timeout", "{id}"),
            503 => {
                assert_eq!(r.code(), "circuit_open", "{id}: {}", r.text());
                let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
                assert!(
                    (1..=COOL_DOWN.as_secs()).contains(&retry_after),
                    "{id}: Retry-After {retry_after}"
                );
                let detail = r.json()["detail"].as_str().unwrap().to_owned();
                assert!(detail.contains("Nothing was sent"), "{detail}");
                refused.push(id.clone());
            }
            other => panic!("{id}: {other} {}", r.text()),
        }
    }
    let sent = upstream.total_executions() - 1;
    assert_eq!(
        sent, AFTER,
        "at most `after` calls reach a failing upstream"
    );
    assert_eq!(refused.len() as u64, 10 - AFTER);
    assert_eq!(
        &refused[..],
        &ids[AFTER as usize..],
        "the first `after` went out"
    );
    for id in &refused {
        assert_eq!(
            record_status(&idem, id).await,
            404,
            "{id}: nothing reserved"
        );
    }
    assert_eq!(metric(&idem, open_series).await, 1.0);
    assert_eq!(metric(&idem, trips_series).await, 1.0);

    // While open: a stored intent replays, a live one is still a conflict.
    let replay = charge(&idem, "done", &[]).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let live = charge(&idem, "out0", &[]).await;
    assert_eq!(
        (live.status, live.code().as_str()),
        (409, "request_in_progress")
    );
    assert_eq!(
        upstream.total_executions() - 1,
        AFTER,
        "nothing more was sent"
    );

    // After the cool-down the upstream is back: the first intent probes and closes the
    // breaker, and every refused intent then executes exactly once.
    tokio::time::sleep(COOL_DOWN + Duration::from_millis(100)).await;
    for id in &refused {
        let r = charge(&idem, id, &[]).await;
        assert_eq!(r.status, 201, "{id}: {}", r.text());
        assert_eq!(upstream.executions(&format!("charge:{id}")), 1, "{id}");
    }
    assert_eq!(metric(&idem, open_series).await, 0.0);
    for id in &refused {
        assert_eq!(
            charge(&idem, id, &[]).await.header("idempotent-replayed"),
            Some("true")
        );
    }
    assert_eq!(upstream.executions("charge:done"), 1);
}

/// A probe the upstream does not answer opens the breaker for another cool-down.
async fn a_failed_probe_reopens_it(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem_with_timeout(&routes(), "1s").await;
    for n in 0..AFTER {
        assert_eq!(charge(&idem, &format!("f{n}"), RESET).await.status, 504);
    }
    assert_eq!(charge(&idem, "early", &[]).await.code(), "circuit_open");
    tokio::time::sleep(COOL_DOWN + Duration::from_millis(100)).await;
    assert_eq!(
        charge(&idem, "probe", RESET).await.status,
        504,
        "the probe was sent"
    );
    let after_probe = charge(&idem, "next", &[]).await;
    assert_eq!(after_probe.code(), "circuit_open", "{}", after_probe.text());
    let trips = "idem_breaker_trips_total{route=\"charge\"}";
    assert_eq!(metric(&idem, trips).await, 2.0);
    assert_eq!(env.upstream.total_executions(), AFTER + 1);
}

store_cases!([memory, redis, postgres] [
    an_outage_opens_the_breaker_and_a_probe_closes_it,
    a_failed_probe_reopens_it,
]);

/// On an MCP route an open breaker answers the `tools/call` with a tool error for its
/// id, `circuit_open` in its structured content, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_mcp_route_it_is_a_tool_error() {
    let upstream = support::upstream::MockUpstream::start().await;
    let idem = support::harness::start(&format!(
        "upstream:\n  url: {}\n  timeout: 1s\nroutes:\n  - name: tools\n    path: /mcp\n    breaker: {{after: 2, cool_down: 30s}}\n    mcp:\n      tools: [charge_customer]\n",
        upstream.url()
    ))
    .await;
    let call = |id: u64| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "charge_customer", "arguments": {"customer": format!("c{id}")}}})
        .to_string()
    };
    let mcp = url(&idem, "/mcp");
    let json = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let with_reset = [json[0], json[1], RESET[0]];
    for id in [1, 2] {
        send("POST", &mcp, &with_reset, &call(id)).await;
    }
    let refused = send("POST", &mcp, &json, &call(3)).await;
    assert_eq!(refused.status, 200, "{}", refused.text());
    let v = refused.json();
    assert_eq!(v["id"], 3);
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["code"], "circuit_open",
        "{v}"
    );
    assert_eq!(upstream.total_executions(), 2, "nothing sent");
}
