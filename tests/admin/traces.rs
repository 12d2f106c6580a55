//! SPEC §6 "Traces": idem as a process exporting OTLP/HTTP to a real receiver that
//! decodes the official protobuf. A fresh call and its replay export their spans in
//! the callers' traces, the upstream gets idem's span as parent, the replay links to
//! the execution it replays (through the record, so through the store's codec), and
//! nothing is exported or changed when traces are off.

use crate::store_cases;
use crate::support;

use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{post, send, IdemProcess};
use support::mcp::{call, outcome, python_client};
use support::otlp::{ExportedSpan, OtlpReceiver};
use support::poll::eventually;
use support::upstream::Received;

const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// A raw key that must never appear in a span.
const RAW_KEY: &str = "order-SECRET-7781";

const ROUTES: &str = r#"
routes:
  - name: charge
    methods: [POST]
    path: /invoices/{invoice_id}/charge
    key: "{header.idempotency-key}"
"#;

/// Export quickly: the batch processor's default delay is 5 s.
const FAST_BATCHES: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "50");

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

/// (trace id, parent span id) of a `traceparent` the upstream received.
fn received_parent(r: &Received) -> (String, String) {
    let value = r.headers["traceparent"].to_str().unwrap();
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    (parts[1].to_owned(), parts[2].to_owned())
}

async fn charge(idem: &IdemProcess, headers: &[(&str, &str)]) -> support::harness::Resp {
    let mut all = vec![
        ("idempotency-key", RAW_KEY),
        ("content-type", "application/json"),
    ];
    all.extend_from_slice(headers);
    post(
        &idem.url("/invoices/inv_1/charge"),
        &all,
        r#"{"amount":100}"#,
    )
    .await
}

fn child_of<'a>(spans: &'a [ExportedSpan], parent: &ExportedSpan, name: &str) -> &'a ExportedSpan {
    spans
        .iter()
        .find(|s| s.name == name && s.parent_span_id == parent.span_id)
        .unwrap_or_else(|| panic!("no {name} span under {}: {spans:#?}", parent.name))
}

/// Configured by the standard variables: the fresh call's spans in the caller's trace,
/// the upstream's parent among them, the replay (another caller trace) linked to it.
async fn fresh_call_and_replay_are_traced_and_linked(b: Backend) {
    let otlp = OtlpReceiver::start().await;
    let env = Env::new(b).await;
    let endpoint = otlp.url();
    let envs = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "idem-under-test"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=otlp-secret"),
        FAST_BATCHES,
    ];
    let yaml = format!("{}{ROUTES}", env.base_yaml("3s"));
    let idem = IdemProcess::spawn_with(&yaml, &[], "warn", &envs).await;

    let (trace_a, caller_a) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let first = charge(&idem, &[("traceparent", &traceparent(trace_a, caller_a))]).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let server_a = otlp
        .span("the fresh call's server span", |s| {
            s.kind == SERVER && s.trace_id == trace_a
        })
        .await;
    assert_eq!(
        server_a.parent_span_id, caller_a,
        "child of the caller's span"
    );
    assert_eq!(server_a.service, "idem-under-test");
    let sent = otlp.headers();
    assert_eq!(
        sent[0]["x-api-key"], "otlp-secret",
        "OTEL_EXPORTER_OTLP_HEADERS"
    );
    assert_eq!(sent[0]["content-type"], "application/x-protobuf");
    assert_eq!(server_a.name, "POST /invoices/{invoice_id}/charge");
    assert_eq!(
        server_a.attr("http.route"),
        Some("/invoices/{invoice_id}/charge")
    );
    assert_eq!(server_a.attr("http.request.method"), Some("POST"));
    assert_eq!(server_a.attr("http.response.status_code"), Some("201"));
    assert_eq!(server_a.attr("idem.route"), Some("charge"));
    assert_eq!(server_a.attr("idem.outcome"), Some("forwarded"));
    assert_eq!(server_a.attr("idem.replayed"), Some("false"));
    assert_eq!(server_a.attr("idem.attempt"), Some("1"));
    let key_hash = server_a.attr("idem.key_hash").expect("key hash");
    assert!(key_hash.len() == 64 && key_hash.bytes().all(|b| b.is_ascii_hexdigit()));

    // The upstream's traceparent: the caller's trace, idem's upstream span as parent.
    let got = env.upstream.received();
    let (trace, parent) = received_parent(&got[0]);
    assert_eq!(trace, trace_a);
    assert_ne!(parent, caller_a, "the caller's span id was replaced");
    let upstream = otlp
        .span("the upstream call's span", |s| s.span_id == parent)
        .await;
    assert_eq!(upstream.kind, CLIENT);
    assert_eq!(upstream.parent_span_id, server_a.span_id);
    assert_eq!(upstream.attr("http.response.status_code"), Some("201"));
    // The store operations, children of the request's span.
    otlp.span("the completion's span", |s| s.name == "idem.store complete")
        .await;
    let spans = otlp.spans();
    child_of(&spans, &server_a, "idem.store reserve");
    child_of(&spans, &server_a, "idem.store complete");

    // The replay, from another caller trace: its own span, linked to the execution.
    let (trace_b, caller_b) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let again = charge(&idem, &[("traceparent", &traceparent(trace_b, caller_b))]).await;
    assert!(again.replayed());
    let server_b = otlp
        .span("the replay's server span", |s| {
            s.kind == SERVER && s.trace_id == trace_b
        })
        .await;
    assert_eq!(server_b.parent_span_id, caller_b);
    assert_eq!(server_b.attr("idem.outcome"), Some("replayed"));
    assert_eq!(server_b.attr("idem.replayed"), Some("true"));
    assert_eq!(server_b.attr("idem.attempt"), Some("1"));
    assert_eq!(server_b.attr("idem.key_hash"), Some(key_hash));
    assert_eq!(
        server_b.links,
        vec![(trace_a.to_owned(), server_a.span_id.clone())],
        "the replay links to the execution it replays"
    );
    let spans = otlp.spans();
    child_of(&spans, &server_b, "idem.store reserve");
    assert_eq!(
        env.upstream.received().len(),
        1,
        "the replay was not forwarded"
    );
    // The latency histograms carry the traces as exemplars (OpenMetrics).
    let accept = ("accept", "application/openmetrics-text;version=1.0.0");
    let metrics = send("GET", &idem.admin_url("/metrics"), &[accept], "").await;
    for (histogram, label, trace) in [
        ("idem_upstream_duration_seconds_bucket", "", trace_a),
        (
            "idem_store_duration_seconds_bucket",
            "op=\"complete\"",
            trace_a,
        ),
        (
            "idem_store_duration_seconds_bucket",
            "op=\"reserve\"",
            trace_b,
        ),
    ] {
        let exemplar = format!("# {{trace_id=\"{trace}\"}}");
        let text = metrics.text();
        let found = text
            .lines()
            .any(|l| l.starts_with(histogram) && l.contains(label) && l.contains(&exemplar));
        assert!(
            found,
            "no {histogram}{{{label}}} exemplar for {trace}:\n{text}"
        );
    }
    // The admin key view names the execution's trace.
    let view = send(
        "GET",
        &idem.admin_url(&format!("/v1/keys/charge/{RAW_KEY}")),
        &[],
        "",
    )
    .await;
    assert_eq!(view.json()["trace_id"], trace_a, "{}", view.text());
    assert_eq!(view.json()["span_id"], server_a.span_id.as_str());

    // The raw key is nowhere in what was exported.
    for span in &spans {
        for (k, v) in &span.attributes {
            assert!(
                !v.contains(RAW_KEY),
                "{} carries the raw key in {k}",
                span.name
            );
        }
    }
}

/// A duplicate that waits for the execution in flight and gets its replay links to it.
async fn a_waiting_duplicate_links_to_the_execution(b: Backend) {
    let otlp = OtlpReceiver::start().await;
    let env = Env::new(b).await;
    let telemetry = format!("telemetry:\n  otlp_endpoint: {}\n", otlp.url());
    let routes = format!("{ROUTES}    on_concurrent: wait\n    wait_timeout: 5s\n");
    let yaml = format!("{}{telemetry}{routes}", env.base_yaml("3s"));
    let idem = IdemProcess::spawn_with(&yaml, &[], "warn", &[FAST_BATCHES]).await;
    let slow = ("x-mock-delay-ms", "700");
    let (trace_a, trace_b) = (
        "11111111111111111111111111111111",
        "22222222222222222222222222222222",
    );
    let tp_a = traceparent(trace_a, "1111111111111111");
    let tp_b = traceparent(trace_b, "2222222222222222");
    let (headers_a, headers_b) = (
        [slow, ("traceparent", &tp_a)],
        [slow, ("traceparent", &tp_b)],
    );
    // The duplicate is sent once the first is at the upstream (a fixed head start was
    // not enough on a loaded machine: the duplicate then won the key itself).
    let (first, second) = tokio::join!(charge(&idem, &headers_a), async {
        eventually(
            Duration::from_secs(5),
            "the first call forwarded",
            async || env.upstream.total_executions() == 1,
        )
        .await;
        charge(&idem, &headers_b).await
    });
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(second.replayed(), "{}", second.text());
    let server_a = otlp
        .span("the execution's span", |s| {
            s.kind == SERVER && s.trace_id == trace_a
        })
        .await;
    let server_b = otlp
        .span("the duplicate's span", |s| {
            s.kind == SERVER && s.trace_id == trace_b
        })
        .await;
    assert_eq!(server_b.attr("idem.outcome"), Some("replayed"));
    assert_eq!(server_b.links, vec![(trace_a.to_owned(), server_a.span_id)]);
    assert_eq!(env.upstream.total_executions(), 1);
}

/// Configured by the file: a caller without `traceparent` starts a new trace, which
/// the upstream continues.
async fn a_caller_without_traceparent_gets_a_new_trace(b: Backend) {
    let otlp = OtlpReceiver::start().await;
    let env = Env::new(b).await;
    let telemetry = format!(
        "telemetry:\n  otlp_endpoint: {}\n  service_name: from-file\n",
        otlp.url()
    );
    let yaml = format!("{}{telemetry}{ROUTES}", env.base_yaml("3s"));
    let idem = IdemProcess::spawn_with(&yaml, &[], "warn", &[FAST_BATCHES]).await;
    let first = charge(&idem, &[]).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let server = otlp.span("the server span", |s| s.kind == SERVER).await;
    assert_eq!(server.parent_span_id, "", "a root span");
    assert_eq!(server.service, "from-file");
    let (trace, parent) = received_parent(&env.upstream.received()[0]);
    assert_eq!(trace, server.trace_id);
    let upstream = otlp
        .span("the upstream span", |s| s.span_id == parent)
        .await;
    assert_eq!(upstream.parent_span_id, server.span_id);
}

/// `sample_ratio: 0` in the file, or `OTEL_TRACES_SAMPLER=parentbased_traceidratio` with
/// `OTEL_TRACES_SAMPLER_ARG=0`: a caller's sampled trace is still kept, a new one is not
/// exported, and the upstream gets the unsampled context.
async fn sampling_follows_the_caller(b: Backend) {
    sampling_follows_the_caller_configured(b, true).await
}

async fn sampling_follows_the_caller_with_the_otel_sampler_variables(b: Backend) {
    sampling_follows_the_caller_configured(b, false).await
}

/// `from_file`: the ratio from `telemetry.sample_ratio`, else from `OTEL_TRACES_SAMPLER*`.
async fn sampling_follows_the_caller_configured(b: Backend, from_file: bool) {
    let otlp = OtlpReceiver::start().await;
    let env = Env::new(b).await;
    let mut telemetry = format!("telemetry:\n  otlp_endpoint: {}\n", otlp.url());
    let mut envs = vec![FAST_BATCHES];
    if from_file {
        telemetry.push_str("  sample_ratio: 0\n");
    } else {
        envs.push(("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"));
        envs.push(("OTEL_TRACES_SAMPLER_ARG", "0"));
    }
    let yaml = format!("{}{telemetry}{ROUTES}", env.base_yaml("3s"));
    let mut idem = IdemProcess::spawn_with(&yaml, &[], "warn", &envs).await;
    let unsampled = [("idempotency-key", "k-new")];
    let first = post(&idem.url("/invoices/inv_1/charge"), &unsampled, "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    let sampled_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let tp = traceparent(sampled_trace, "00f067aa0ba902b7");
    assert_eq!(charge(&idem, &[("traceparent", &tp)]).await.status, 201);
    otlp.span("the caller-sampled span", |s| {
        s.kind == SERVER && s.trace_id == sampled_trace
    })
    .await;
    let got = env.upstream.received();
    let new = got[0].headers["traceparent"].to_str().unwrap().to_owned();
    assert!(new.ends_with("-00"), "not sampled: {new}");
    let new_trace = received_parent(&got[0]).0;
    assert_ne!(new_trace, sampled_trace);
    // Everything batched is flushed by the drain: once the process is gone, the
    // unsampled trace would have been exported if it ever were.
    idem.signal("TERM");
    assert!(idem.child.wait().unwrap().success(), "{}", idem.logs());
    let spans = otlp.spans();
    assert!(
        spans.iter().all(|s| s.trace_id == sampled_trace),
        "{spans:#?}"
    );
    assert!(spans.iter().any(|s| s.name == "idem.store reserve"));
}

/// Turned off (`OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`) while an
/// endpoint is configured, in the file and in the environment, and that endpoint is a
/// live receiver: nothing is exported, even by the drain (which flushes whatever was
/// batched), and the caller's `traceparent` reaches the upstream as it was sent.
async fn nothing_is_exported_when_off(b: Backend) {
    let env = Env::new(b).await;
    for off in [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ] {
        let otlp = OtlpReceiver::start().await;
        let endpoint = otlp.url();
        let telemetry = format!("telemetry:\n  otlp_endpoint: {endpoint}\n");
        let yaml = format!("{}{telemetry}{ROUTES}", env.base_yaml("3s"));
        let envs = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            FAST_BATCHES,
            off,
        ];
        let mut idem = IdemProcess::spawn_with(&yaml, &[], "warn", &envs).await;
        let sent = traceparent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
        // A key of its own per switch: the Redis store outlives each process.
        let headers = [
            ("idempotency-key", off.0),
            ("traceparent", sent.as_str()),
            ("tracestate", "v=1"),
        ];
        let u = idem.url("/invoices/inv_1/charge");
        let before = env.upstream.received().len();
        let first = post(&u, &headers, "{}").await;
        assert_eq!(first.status, 201, "{off:?}: {}", first.text());
        assert!(post(&u, &headers, "{}").await.replayed(), "{off:?}");
        let got = env.upstream.received();
        assert_eq!(got.len(), before + 1, "{off:?}");
        assert_eq!(got[before].headers["traceparent"], sent.as_str(), "{off:?}");
        assert_eq!(got[before].headers["tracestate"], "v=1", "{off:?}");
        // The drain flushes what was batched: once the process is gone, anything it
        // would ever export has been sent.
        idem.signal("TERM");
        let status = idem.child.wait().unwrap();
        assert!(status.success(), "{off:?}: {}", idem.logs());
        assert_eq!(otlp.requests(), 0, "{off:?} exported");
    }
}

/// The spans of the last requests are sent on SIGTERM even when the batch delay has
/// not passed.
async fn the_drain_flushes_the_batch(b: Backend) {
    let otlp = OtlpReceiver::start().await;
    let env = Env::new(b).await;
    let yaml = format!("{}{ROUTES}", env.base_yaml("3s"));
    let envs = [
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &*format!("{}/v1/traces", otlp.url()),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
    ];
    let mut idem = IdemProcess::spawn_with(&yaml, &[], "warn", &envs).await;
    assert_eq!(charge(&idem, &[]).await.status, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(otlp.requests(), 0, "batched, not sent yet");
    idem.signal("TERM");
    let status = idem.child.wait().unwrap();
    assert!(status.success(), "{}", idem.logs());
    assert!(otlp.spans().iter().any(|s| s.kind == SERVER));
}

// Every case on the memory store and on Redis (where the link goes through the codec).
store_cases!([memory, redis] [
    fresh_call_and_replay_are_traced_and_linked,
    a_waiting_duplicate_links_to_the_execution,
    a_caller_without_traceparent_gets_a_new_trace,
    sampling_follows_the_caller,
    sampling_follows_the_caller_with_the_otel_sampler_variables,
    nothing_is_exported_when_off,
    the_drain_flushes_the_batch
]);

/// An MCP `tools/call` (official Python SDK client and server) gets the route's span with
/// its tool, and its replay the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_call_is_traced_with_its_tool() {
    let otlp = OtlpReceiver::start().await;
    let server = support::mcp::McpServer::start("json");
    let yaml = format!(
        "upstream:\n  url: {}\n  timeout: 30s\ntelemetry:\n  otlp_endpoint: {}\n\
         routes:\n  - name: billing\n    path: /mcp\n    mcp:\n      tools: [charge_customer]\n",
        server.url(),
        otlp.url()
    );
    let idem = IdemProcess::spawn_with(&yaml, &[], "warn", &[FAST_BATCHES]).await;
    let mcp = idem.url("/mcp");
    let charge = call(
        "charge_customer",
        &serde_json::json!({"customer": "c9", "amount": 500}),
    );
    // Two sessions of the official Python client: the second call is the replay.
    let first = outcome(python_client("session", &mcp, &[&charge])).await;
    let again = outcome(python_client("session", &mcp, &[&charge])).await;
    assert_eq!(first["steps"][0]["text"], again["steps"][0]["text"]);
    let ended = |outcome: &'static str| {
        move |s: &ExportedSpan| s.kind == SERVER && s.attr("idem.outcome") == Some(outcome)
    };
    let executed = otlp.span("the call's span", ended("forwarded")).await;
    let replayed = otlp.span("the replay's span", ended("replayed")).await;
    for span in [&executed, &replayed] {
        assert_eq!(span.name, "POST /mcp");
        assert_eq!(span.attr("gen_ai.tool.name"), Some("charge_customer"));
        assert_eq!(span.attr("mcp.method.name"), Some("tools/call"));
    }
    assert_eq!(
        replayed.links,
        vec![(executed.trace_id.clone(), executed.span_id.clone())]
    );
    assert_eq!(server.executions("charge_customer"), 1);
}
