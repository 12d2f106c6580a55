//! `idem loadtest` (SPEC §7) against an in-process idem and the mock upstream: it passes
//! when every intent ran once, and it catches a double execution — from the answers
//! (two different 2xx bodies) and from `--check-url` — when there is no idem in front.

use crate::support;

use std::process::Command;
use std::time::Duration;

use idem::loadtest::{self, LoadtestArgs};
use support::env::{Backend, Env};
use support::upstream::MockUpstream;

const BY_HEADER: &str = r#"
routes:
  - name: charge
    methods: [POST]
    path: /charges
    key: "{header.idempotency-key}"
"#;

fn args(target: String, intents: u64, duplicates: u64, concurrency: usize) -> LoadtestArgs {
    let mut a = LoadtestArgs::new(target);
    a.intents = intents;
    a.duplicates = duplicates;
    a.concurrency = concurrency;
    a.path_template = "/charges".into();
    a.duration_limit = Duration::from_secs(30);
    a.timeout = Duration::from_secs(10);
    a
}

fn check_url(upstream: &MockUpstream) -> String {
    format!("{}/count?key={{key}}", upstream.url())
}

async fn duplicates_through_idem_run_once(backend: Backend) {
    let env = Env::new(backend).await;
    let idem = env.idem(BY_HEADER).await;
    let mut a = args(format!("http://{}", idem.addr), 150, 4, 24);
    a.check_url = Some(check_url(&env.upstream));
    let report = loadtest::run(&a).await.expect("valid arguments");
    assert!(report.passed(), "{report}");
    assert_eq!(report.requests, 600);
    assert_eq!(report.intents_sent, 150);
    // One winner per intent; every other copy is a replay or a 409.
    assert_eq!(report.forwarded, 150, "{report}");
    assert_eq!(report.replayed + report.conflicts, 450, "{report}");
    assert_eq!(report.double_executions, 0);
    let check = report.check.as_ref().unwrap();
    assert_eq!((check.checked, check.wrong_total), (150, 0));
    assert_eq!(env.upstream.total_executions(), 150);
    assert!(report.latency_ms.p50 > 0.0 && report.latency_ms.p50 <= report.latency_ms.p99);
    assert!(report.latency_ms.p99 <= report.latency_ms.p999);
    assert!(report.latency_ms.p999 <= report.latency_ms.max);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_duplicates_run_once() {
    let _panics = crate::support::panics::watched();
    duplicates_through_idem_run_once(Backend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_duplicates_run_once() {
    let _panics = crate::support::panics::watched();
    duplicates_through_idem_run_once(Backend::redis()).await;
}

/// Without idem, duplicates execute: both detectors must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn straight_to_the_upstream_double_execution_is_detected() {
    let _panics = crate::support::panics::watched();
    let upstream = MockUpstream::start().await;
    let mut a = args(upstream.url(), 20, 3, 8);
    a.check_url = Some(check_url(&upstream));
    let report = loadtest::run(&a).await.expect("valid arguments");
    assert!(!report.passed(), "{report}");
    assert_eq!(report.forwarded, 60);
    assert_eq!(report.double_executions, 20, "{report}");
    let check = report.check.as_ref().unwrap();
    assert_eq!(check.wrong_total, 20);
    assert!(check.wrong.iter().all(|(_, n)| *n == 3), "{check:?}");
    assert!(report.to_string().contains("result: FAIL"));
}

/// Same as above, through the binary: the exit status is what scripts rely on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_exit_status_fails_on_double_execution_and_passes_through_idem() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(BY_HEADER).await;
    let upstream_check = check_url(&env.upstream);
    let run = |target: String| {
        let check = upstream_check.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_idem"))
                .args([
                    "loadtest",
                    "--target",
                    &target,
                    "--path-template",
                    "/charges",
                ])
                .args(["--intents", "30", "--duplicates", "3", "--concurrency", "9"])
                .args(["--duration-limit", "20s", "--check-url", &check])
                .output()
                .expect("run idem loadtest")
        })
    };
    let direct = run(env.upstream.url()).await.unwrap();
    let stdout = String::from_utf8_lossy(&direct.stdout);
    assert_eq!(direct.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("double executions (two different 2xx bodies for one intent): 30"));
    let through = run(format!("http://{}", idem.addr)).await.unwrap();
    let stdout = String::from_utf8_lossy(&through.stdout);
    assert_eq!(through.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("result: PASS"), "{stdout}");

    let bad = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["loadtest", "--target", "ftp://x", "--intents", "1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// `on_concurrent: wait`: duplicates wait for the first call and get its replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_duplicates_all_get_the_result() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem(&format!(
            "{BY_HEADER}    on_concurrent: wait\n    wait_timeout: 5s\n"
        ))
        .await;
    let mut a = args(format!("http://{}", idem.addr), 40, 5, 20);
    a.headers = vec!["x-mock-delay-ms: 20".into()];
    a.check_url = Some(check_url(&env.upstream));
    let report = loadtest::run(&a).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!((report.forwarded, report.replayed), (40, 160), "{report}");
    assert_eq!(report.conflicts, 0);
}

/// A route keyed on a path capture: the key reaches the upstream as `charge:<i>`, so
/// the check URL is written with `{i}`; no key header is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_templates_and_check_url_placeholders() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem(
            r#"
routes:
  - name: charge
    methods: [POST]
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
"#,
        )
        .await;
    let mut a = args(format!("http://{}", idem.addr), 25, 2, 10);
    a.path_template = "/invoices/{run}-{i}/charge".into();
    a.run_id = Some("ptest".into());
    a.key_header = String::new();
    a.body = r#"{"invoice":"{i}","note":{"nested":true}}"#.into();
    a.check_url = Some(format!(
        "{}/count?key=charge:{{run}}-{{i}}",
        env.upstream.url()
    ));
    let report = loadtest::run(&a).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.forwarded, 25);
    assert_eq!(env.upstream.executions("charge:ptest-7"), 1);
    let got = env.upstream.received();
    assert!(got.iter().all(|r| r.path.ends_with("/charge")));
    assert!(got
        .iter()
        .any(|r| r.body.as_ref() == br#"{"invoice":"7","note":{"nested":true}}"#));
}

/// Errors (here the upstream's 503s, released and answered as is) fail the run, and a
/// count URL that does not answer JSON is reported as unreadable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_unreadable_counts_fail_the_run() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(BY_HEADER).await;
    let mut a = args(format!("http://{}", idem.addr), 10, 1, 4);
    a.headers = vec!["x-mock-status: 503".into()];
    a.check_url = Some(format!("{}/nothing?key={{key}}", env.upstream.url()));
    let report = loadtest::run(&a).await.unwrap();
    assert!(!report.passed());
    assert_eq!(report.errors_by_kind.get("503"), Some(&10), "{report}");
    let check = report.check.unwrap();
    assert_eq!(check.failures_total, 10, "{check:?}");

    // Nothing listening: transport errors, not a hang.
    let port = support::harness::free_port();
    let report = loadtest::run(&args(format!("http://127.0.0.1:{port}"), 3, 1, 2))
        .await
        .unwrap();
    assert_eq!(report.errors_by_kind.get("transport"), Some(&3), "{report}");
}

/// `--duration-limit` stops the dispatch by itself and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_limit_stops_the_run() {
    let _panics = crate::support::panics::watched();
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(BY_HEADER).await;
    let mut a = args(format!("http://{}", idem.addr), 1_000_000, 1, 4);
    a.headers = vec!["x-mock-delay-ms: 50".into()];
    a.duration_limit = Duration::from_millis(300);
    // A million intents at 50 ms each on 4 connections would take hours: stopping is
    // proved by the flag and the count, not by the clock.
    let report = loadtest::run(&a).await.unwrap();
    assert!(report.run.stopped_at_limit);
    assert!(report.intents_sent > 0 && report.intents_sent < 1_000_000);
    assert!(report.to_string().contains("stopped at --duration-limit"));
}

/// Off a terminal, progress is a line on stderr every `--progress-interval`, and the
/// report on stdout is the same as without it. The run cannot be shorter than 20
/// sequential waves of 50 ms (40 intents, 2 at a time, each delayed upstream), so a
/// 100 ms interval gives lines however slow the machine; nothing is asserted on speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_go_to_stderr_when_it_is_not_a_terminal() {
    let _panics = crate::support::panics::watched();
    let upstream = MockUpstream::start().await;
    let target = upstream.url();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_idem"))
            .args([
                "loadtest",
                "--target",
                &target,
                "--path-template",
                "/charges",
            ])
            .args(["--intents", "40", "--duplicates", "1", "--concurrency", "2"])
            .args([
                "--header",
                "x-mock-delay-ms: 50",
                "--progress-interval",
                "100ms",
            ])
            .output()
            .expect("run idem loadtest")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("loadtest progress: "))
        .collect();
    assert!(!lines.is_empty(), "no progress on stderr: {stderr:?}");
    for line in &lines {
        assert!(line.contains("/40 requests ("), "{line}");
        assert!(line.contains(" req/s over the last "), "{line}");
        assert!(line.ends_with(" 0 errors"), "{line}");
    }
    assert!(!stdout.contains("loadtest progress"), "{stdout}");
    assert!(stdout.contains("requests:  40 in "), "{stdout}");
    assert!(stdout.contains("result: PASS"), "{stdout}");
}
