//! The Helm chart's Grafana dashboard and alerts (SPEC §6 "Dashboards and alerts") are
//! checked against the real idem, not just rendered: every metric name they query is
//! in `/metrics` after fresh, replayed, conflicting, mismatched and degraded traffic, and
//! the rules pass `promtool check rules` and the unit tests in tests/alerts/.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use support::env::{Backend, Env};
use support::harness::{admin_url, post, send, url};

const DASHBOARD: &str = "helm/idem/files/idem-dashboard.json";
const ALERTS: &str = "helm/idem/files/idem-alerts.yaml";
const ALERT_TESTS: &str = "tests/alerts/idem-alerts.test.yaml";

const PROMTOOL_HINT: &str = "promtool not found: install Debian's `prometheus` package \
     (apt-get install --no-install-recommends prometheus); scripts/test.sh does it";

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every string under a key named `expr` or `definition`: the PromQL of dashboard
/// panels, template variables and alert rules.
fn queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v {
                    serde_json::Value::String(s) if k == "expr" || k == "definition" => {
                        out.push(s.clone())
                    }
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The `idem_*` metric names a PromQL expression mentions.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("idem_") {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if starts_word {
            names.insert(tail[..len].to_owned());
        }
        rest = &tail[len..];
    }
    names
}

/// The sample names of a Prometheus text page (`name{labels} value` or `name value`).
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn queried_by_dashboard_and_alerts() -> BTreeSet<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&repo_file(DASHBOARD)).expect("dashboard is JSON");
    let alerts: serde_json::Value =
        serde_saphyr::from_str(&repo_file(ALERTS)).expect("alert rules are YAML");
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    let from_dashboard = exprs.len();
    queries(&alerts, &mut exprs);
    assert!(
        from_dashboard >= 10,
        "dashboard has too few queries: {exprs:?}"
    );
    assert!(exprs.len() - from_dashboard >= 5, "too few alert rules");
    exprs.iter().flat_map(|e| metric_names(e)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_query_exists() {
    let mut env = Env::new(Backend::redis()).await;
    let routes = "  on_error: passthrough\nroutes:\n  - name: charge\n    path: /charge/{id}\n    key: \"charge:{path.id}\"\n";
    let idem = env.idem(routes).await;

    // Fresh, replay, mismatch.
    let fresh = url(&idem, "/charge/a");
    assert_eq!(post(&fresh, &[], "{}").await.status, 201);
    assert!(post(&fresh, &[], "{}").await.replayed());
    assert_eq!(post(&fresh, &[], r#"{"other":1}"#).await.status, 422);
    // Conflict: a duplicate while the first call is still at the upstream.
    let slow = url(&idem, "/charge/slow");
    let first = tokio::spawn({
        let slow = slow.clone();
        async move { post(&slow, &[("x-mock-delay-ms", "600")], "{}").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(post(&slow, &[], "{}").await.status, 409);
    assert_eq!(first.await.unwrap().status, 201);
    // An upstream that drops the connection after receiving the call: ambiguous, 504.
    let reset = post(
        &url(&idem, "/charge/reset"),
        &[("x-mock-reset", "true")],
        "{}",
    )
    .await;
    assert_eq!(reset.status, 504);
    // Degraded: the store is gone and on_error is passthrough.
    env.backend.redis_server_mut().stop();
    let degraded = post(&url(&idem, "/charge/b"), &[], "{}").await;
    assert_eq!(degraded.header("idempotency-degraded"), Some("true"));

    let text = send("GET", &admin_url(&idem, "/metrics"), &[], "")
        .await
        .text();
    let exposed = exposed(&text);
    let missing: Vec<_> = queried_by_dashboard_and_alerts()
        .into_iter()
        .filter(|name| !exposed.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not in /metrics: {missing:?}\n{text}"
    );
    // The degraded counter counts what the alert says it counts.
    let degraded_line = text
        .lines()
        .find(|l| l.starts_with("idem_degraded_requests_total "))
        .expect("idem_degraded_requests_total");
    assert_eq!(degraded_line, "idem_degraded_requests_total 1", "{text}");
    assert!(
        text.lines()
            .any(|l| l == r#"idem_upstream_failures_total{reason="ambiguous"} 1"#),
        "{text}"
    );
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("{PROMTOOL_HINT} ({e})"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn alert_rules_pass_promtool_check() {
    let out = promtool(&["check", "rules", ALERTS]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let tests = repo_file(ALERT_TESTS);
    for alert in ["IdemStoreErrors", "IdemStaleCompletions"] {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "no unit test for {alert}"
        );
    }
    let out = promtool(&["test", "rules", ALERT_TESTS]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn metric_names_are_read_whole_words_only() {
    let names = metric_names(
        r#"sum(rate(idem_requests_total{x="my_idem_y"}[5m])) / idem_inflight + foo_idem_bar"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["idem_inflight", "idem_requests_total"]
    );
}
