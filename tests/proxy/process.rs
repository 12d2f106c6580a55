//! The real binary: `check`, `serve --upstream` defaults, SIGHUP reload while requests
//! are in flight, and structured log lines that never carry raw keys or credentials.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{post, send, IdemProcess};
use support::poll::eventually;

fn idem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn check_prints_the_route_table_or_every_error() {
    let _panics = crate::support::panics::watched();
    let ok = idem(&["check", "--config", "config/idem.yaml"]);
    assert_eq!(ok.status.code(), Some(0));
    let table = String::from_utf8_lossy(&ok.stdout);
    assert!(table.contains("charge_invoice") && table.contains("/invoices/{invoice_id}/charge"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "upstream:\n  url: http://127.0.0.1:3000\nroutes:\n  - name: a\n    path: /a\n    key: \"{path.id}\"\n    on_concurrent: wiat\n",
    )
    .unwrap();
    let out = idem(&["check", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(errors.contains("bad.yaml:6:"), "{errors}");
    assert!(errors.contains("routes[0].on_concurrent"), "{errors}");
    assert!(errors.contains("valid values: conflict, wait"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_only_an_upstream_protects_idempotency_key_posts() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let idem = IdemProcess::serve(&["--upstream", &env.upstream.url(), "--workers", "3"]).await;
    let u = idem.url("/anything/at/all");
    let first = post(&u, &[("idempotency-key", "d1")], "{}").await;
    assert_eq!(first.status, 201);
    assert!(post(&u, &[("idempotency-key", "d1")], "{}")
        .await
        .replayed());
    assert!(
        !post(&u, &[], "{}").await.replayed(),
        "no key: passed through"
    );
    assert!(!post(&u, &[], "{}").await.replayed());
    assert_eq!(env.upstream.total_executions(), 3);
}

#[test]
fn a_bad_workers_flag_is_a_usage_error() {
    let _panics = crate::support::panics::watched();
    let out = idem(&[
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--workers",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(64));
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        errors.contains("--workers: invalid value \"0\"; expected auto or a whole number"),
        "{errors}"
    );
}

fn routes(env: &Env, extra_route: &str) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n{extra_route}",
        env.base_yaml("5s")
    )
}

async fn generation(p: &IdemProcess) -> u64 {
    let config = send("GET", &p.admin_url("/v1/config"), &[], "")
        .await
        .json();
    config["generation"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_routes_without_dropping_in_flight_calls() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let p = IdemProcess::spawn_with(&routes(&env, ""), &[], "info", &[]).await;
    let u = p.url("/invoices/r1/charge");
    let inflight = tokio::spawn(async move { post(&u, &[("x-mock-delay-ms", "800")], "{}").await });
    eventually(
        Duration::from_secs(5),
        "the call reached the upstream",
        async || env.upstream.executions("charge:r1") == 1,
    )
    .await;

    let email = "  - name: email\n    path: /emails\n    key: \"{header.x-task-id}\"\n";
    p.rewrite_config(&routes(&env, email));
    p.signal("HUP");
    eventually(Duration::from_secs(3), "reloaded", async || {
        generation(&p).await == 2
    })
    .await;
    let e = p.url("/emails");
    post(&e, &[("x-task-id", "t1")], "{}").await;
    assert!(
        post(&e, &[("x-task-id", "t1")], "{}").await.replayed(),
        "the new route is live"
    );
    let r = inflight.await.unwrap();
    assert_eq!(r.status, 201, "the in-flight call survived the reload");
    assert!(post(&p.url("/invoices/r1/charge"), &[], "{}")
        .await
        .replayed());

    // An invalid file keeps the running configuration and says why.
    p.rewrite_config(
        "upstream:\n  url: http://127.0.0.1:1\nroutes:\n  - name: broken\n    path: /x\n",
    );
    p.signal("HUP");
    eventually(Duration::from_secs(3), "the reload refused", async || {
        p.logs().contains("reload refused")
    })
    .await;
    assert_eq!(generation(&p).await, 2);
    assert!(post(&e, &[("x-task-id", "t1")], "{}").await.replayed());
    let logs = p.logs();
    assert!(logs.contains("routes[0].key"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_carry_the_key_hash_never_the_key_or_credentials() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let p =
        IdemProcess::spawn_with(&routes(&env, ""), &["--log-format", "json"], "info", &[]).await;
    let u = p.url("/invoices/inv_secret/charge");
    let auth = [
        ("authorization", "Bearer s3cret-token"),
        ("x-request-id", "req-42"),
    ];
    post(&u, &auth, "{}").await;
    post(&u, &auth, "{}").await;
    // Log lines are written after the response; wait for both.
    let logs = eventually(
        Duration::from_secs(3),
        "two request log lines",
        async || {
            let logs = p.logs();
            (logs.matches("\"target\":\"idem::request\"").count() >= 2).then_some(logs)
        },
    )
    .await;
    assert!(!logs.contains("inv_secret"), "raw key leaked:\n{logs}");
    assert!(!logs.contains("s3cret-token"), "credential leaked:\n{logs}");
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["target"] == "idem::request")
        .collect();
    assert_eq!(lines.len(), 2, "one line per protected request:\n{logs}");
    assert_eq!(lines[0]["outcome"], "forwarded");
    assert_eq!(lines[1]["outcome"], "replayed");
    for line in &lines {
        assert_eq!(line["route"], "charge");
        assert_eq!(line["status"], 201);
        assert_eq!(line["request_id"], "req-42");
        assert_eq!(line["key_hash"].as_str().unwrap().len(), 64);
        assert!(line["store_ms"].is_number() && line["duration_ms"].is_number());
    }
    assert!(lines[0]["upstream_ms"].is_number());
}
