//! The Helm chart's Grafana dashboard and alerts (SPEC §6 "Dashboards and alerts") are
//! checked against the real idem, not just rendered: every series they select exists on
//! a fresh idem before any traffic (at 0: "no data" would blank a panel or an alert),
//! every metric name they query is in `/metrics` after fresh, replayed, conflicting,
//! mismatched and degraded traffic, and the rules pass `promtool check rules` and the
//! unit tests in tests/alerts/.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{admin_url, post, send, url};
use support::poll::eventually;

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

/// The PromQL of the dashboard's panels and variables and of the alert rules.
fn dashboard_and_alert_queries() -> Vec<String> {
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
    exprs
}

fn queried_by_dashboard_and_alerts() -> BTreeSet<String> {
    dashboard_and_alert_queries()
        .iter()
        .flat_map(|e| metric_names(e))
        .collect()
}

/// Labels Prometheus attaches at scrape time (the target's), which idem cannot expose.
const TARGET_LABELS: [&str; 2] = ["namespace", "pod"];

/// A label matcher of a selector: `label op "value"`.
#[derive(Debug, Clone, PartialEq)]
struct Matcher {
    label: String,
    op: String,
    value: String,
}

impl Matcher {
    /// Whether a series with `labels` passes. A Grafana variable (`$route`) matches any
    /// value; a regex may only be an alternation of literals (what the chart uses; a
    /// richer one fails here rather than being half-understood).
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.label).map_or("", String::as_str);
        if self.value.starts_with('$') {
            return true;
        }
        let in_set = |pattern: &str| {
            assert!(
                pattern
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|'),
                "unsupported regex {pattern:?} in a chart query"
            );
            pattern.split('|').any(|alt| alt == value)
        };
        match self.op.as_str() {
            "=" => value == self.value,
            "!=" => value != self.value,
            "=~" => in_set(&self.value),
            "!~" => !in_set(&self.value),
            op => panic!("unknown matcher {op}"),
        }
    }
}

/// Every `idem_*` selector of a PromQL expression: the metric name and its matchers.
fn selectors(expr: &str) -> Vec<(String, Vec<Matcher>)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("idem_") {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '"'));
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        rest = &tail[len..];
        if !starts_word {
            continue;
        }
        let mut matchers = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let end = inner.find('}').expect("a closed label set");
            for m in inner[..end]
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
            {
                let op_at = m.find(['=', '!']).expect("a matcher");
                let op_len = if m[op_at + 1..].starts_with(['=', '~']) {
                    2
                } else {
                    1
                };
                matchers.push(Matcher {
                    label: m[..op_at].trim().to_owned(),
                    op: m[op_at..op_at + op_len].to_owned(),
                    value: m[op_at + op_len..].trim().trim_matches('"').to_owned(),
                });
            }
            rest = &inner[end + 1..];
        }
        found.push((tail[..len].to_owned(), matchers));
    }
    found
}

/// The samples of a Prometheus text page: (name, labels). Label values here never hold
/// `,` or `"` (route names and enum values).
fn series(text: &str) -> Vec<(String, BTreeMap<String, String>)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let head = l.rsplit_once(' ').expect("name value").0;
            let (name, labels) = head.split_once('{').unwrap_or((head, "}"));
            let labels = labels
                .trim_end_matches('}')
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("label=value");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels)
        })
        .collect()
}

/// Prometheus' guidance: series whose label values are known are exported at 0 from
/// the start, or panels and alerts see "no data" instead of 0 until the first event
/// (a ratio alert has nothing to divide; `idem_upstream_failures_total` once appeared
/// only at the first failure). On a fresh idem with routes and no traffic at all, every
/// selector of the dashboard and the alerts selects a series, and for each route when
/// the metric has routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_and_alerts_use_exists_before_any_traffic() {
    let env = Env::new(Backend::memory()).await;
    let routes = ["charge", "refund"];
    let idem = env
        .idem(
            "defaults:\n  breaker: {after: 5, cool_down: 10s}\n\
             routes:\n  - name: charge\n    path: /charge/{id}\n    key: \"charge:{path.id}\"\n\
             \x20 - name: refund\n    path: /refund/{id}\n    key: \"refund:{path.id}\"\n",
        )
        .await;
    let text = send("GET", &admin_url(&idem, "/metrics"), &[], "")
        .await
        .text();
    let exposed = series(&text);
    assert_eq!(env.upstream.total_executions(), 0, "no traffic");
    let mut checked = 0;
    let mut missing = Vec::new();
    for expr in dashboard_and_alert_queries() {
        for (name, matchers) in selectors(&expr) {
            let matchers: Vec<Matcher> = matchers
                .into_iter()
                .filter(|m| !TARGET_LABELS.contains(&m.label.as_str()))
                .collect();
            let of_metric: Vec<_> = exposed.iter().filter(|(n, _)| *n == name).collect();
            let per_route = of_metric.iter().any(|(_, l)| l.contains_key("route"));
            let wanted: Vec<Option<&str>> = if per_route {
                routes.iter().copied().map(Some).collect()
            } else {
                vec![None]
            };
            for route in wanted {
                checked += 1;
                let found = of_metric.iter().any(|(_, labels)| {
                    route.is_none_or(|r| labels.get("route").is_some_and(|l| l == r))
                        && matchers.iter().all(|m| m.matches(labels))
                });
                if !found {
                    missing.push(format!("{name}{matchers:?} route {route:?} (in {expr})"));
                }
            }
        }
    }
    assert!(checked >= 30, "too few selectors checked: {checked}");
    assert!(
        missing.is_empty(),
        "selected by the chart but not exported before traffic:\n{}\n---\n{text}",
        missing.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_query_exists() {
    let mut env = Env::new(Backend::redis()).await;
    let routes = "  on_error: passthrough\nroutes:\n  - name: charge\n    path: /charge/{id}\n    key: \"charge:{path.id}\"\n    breaker: {after: 5, cool_down: 10s}\n";
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
    eventually(
        Duration::from_secs(10),
        "the first call at the upstream",
        async || env.upstream.executions("charge:slow") == 1,
    )
    .await;
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
fn selectors_are_read_with_their_matchers() {
    let found = selectors(
        r#"sum(rate(idem_requests_total{namespace=~"$namespace", outcome!="passthrough", x=~"a|b"}[5m])) / idem_inflight"#,
    );
    let m = |label: &str, op: &str, value: &str| Matcher {
        label: label.into(),
        op: op.into(),
        value: value.into(),
    };
    assert_eq!(
        found,
        [
            (
                "idem_requests_total".to_owned(),
                vec![
                    m("namespace", "=~", "$namespace"),
                    m("outcome", "!=", "passthrough"),
                    m("x", "=~", "a|b")
                ]
            ),
            ("idem_inflight".to_owned(), vec![])
        ]
    );
    let labels = |o: &str| BTreeMap::from([("outcome".to_owned(), o.to_owned())]);
    assert!(m("outcome", "=~", "conflict|mismatch").matches(&labels("mismatch")));
    assert!(!m("outcome", "=~", "conflict|mismatch").matches(&labels("replayed")));
    assert!(!m("outcome", "!=", "passthrough").matches(&labels("passthrough")));
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

/// No label value comes from a caller (issue 46, "also found, held"): requests with
/// hostile paths, keys, MCP tool names, methods and headers — matched, unmatched,
/// refused — leave every label of every series a configured route name or one of idem's
/// own values, so a caller can neither grow the series without bound nor write into them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_label_value_comes_from_a_caller() {
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem(
            "routes:\n  - name: charge\n    path: /charge/{id}\n    key: \"charge:{path.id}\"\n\
             \x20 - name: tools\n    path: /mcp\n    mcp: {tools: [charge_customer]}\n",
        )
        .await;
    let before: BTreeSet<String> = series(
        &send("GET", &admin_url(&idem, "/metrics"), &[], "")
            .await
            .text(),
    )
    .into_iter()
    .flat_map(|(_, labels)| labels.into_values())
    .collect();
    let marker = "zz9evil";
    let json = [("content-type", "application/json")];
    for (method, path, headers, body) in [
        (
            "POST",
            format!("/charge/{marker}"),
            vec![("idempotency-key", marker)],
            "{}".to_owned(),
        ),
        (
            "POST",
            format!("/{marker}/x"),
            vec![("x-route", marker)],
            "{}".to_owned(),
        ),
        (
            "PATCH",
            format!("/charge/{marker}%2F..%2Fadmin"),
            vec![],
            "{".to_owned(),
        ),
        (
            "POST",
            "/mcp".to_owned(),
            vec![("mcp-name", marker)],
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{marker}","arguments":{{}}}}}}"#
            ),
        ),
        (
            "DELETE",
            format!("/charge/{marker}?route={marker}"),
            vec![],
            String::new(),
        ),
    ] {
        let mut all = json.to_vec();
        all.extend(headers);
        let _ = send(method, &url(&idem, &path), &all, &body).await;
    }
    let text = send("GET", &admin_url(&idem, "/metrics"), &[], "")
        .await
        .text();
    assert!(
        !text.contains(marker),
        "a caller's text in /metrics:\n{text}"
    );
    let after: BTreeSet<String> = series(&text)
        .into_iter()
        .flat_map(|(_, labels)| labels.into_values())
        .collect();
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(
        new.is_empty(),
        "label values that appeared with traffic: {new:?}"
    );
}
