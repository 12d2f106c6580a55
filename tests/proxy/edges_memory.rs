//! Issue 46 §5, against the idem binary: `server.max_buffered_bytes` bounds the
//! request and response bodies held at once, `server.body_read_timeout` ends a stalled
//! body well before `upstream.timeout`, and stored responses do not hold the budget.

use std::time::Duration;

use super::edges::{metrics, on_memory};
use crate::support;
use support::harness::{metric_sum, post};
use support::upstream::MockUpstream;

const CHARGE: &str = "routes:\n  - name: charge\n    path: /invoices/{invoice_id}/charge\n    key: \"charge:{path.invoice_id}\"\n";

/// `server.max_buffered_bytes` bounds the bodies held at once: while stalled bodies
/// hold the budget, a new protected request is 503 `overloaded` with `Retry-After`
/// (counted), nothing reserved; `server.body_read_timeout` ends a stalled body, which
/// gives its share back, and the same request then runs: within 20 s, where only
/// `upstream.timeout` (60 s) would otherwise end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_bodies_share_one_budget() {
    use tokio::io::AsyncWriteExt;
    let upstream = MockUpstream::start().await;
    let idem = on_memory(
        &upstream,
        "  max_buffered_bytes: 2KiB\n  body_read_timeout: 1s\n",
        "60s",
        CHARGE,
    )
    .await;
    // Two stalled bodies of 1000 declared bytes: 100 sent, the rest never.
    let mut stalled = Vec::new();
    for n in 0..2 {
        let mut s = tokio::net::TcpStream::connect(idem.addr()).await.unwrap();
        let head = format!(
            "POST /invoices/stall_{n}/charge HTTP/1.1\r\nhost: idem\r\ncontent-length: 1000\r\n\r\n{}",
            "x".repeat(100)
        );
        s.write_all(head.as_bytes()).await.unwrap();
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let u = idem.url("/invoices/inv_1/charge");
    let body = format!("{{\"pad\":\"{}\"}}", "y".repeat(100));
    let r = post(&u, &[], &body).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "overloaded");
    assert_eq!(r.header("retry-after"), Some("1"));
    let m = metrics(&idem).await;
    assert_eq!(metric_sum(&m, "idem_overloaded_requests_total"), 1.0, "{m}");
    assert_eq!(upstream.total_executions(), 0);
    // The stalled bodies end at body_read_timeout (1 s), their share comes back, long
    // before upstream.timeout (60 s) could have freed it.
    support::poll::eventually(Duration::from_secs(20), "budget back", async || {
        post(&u, &[], &body).await.status == 201
    })
    .await;
    assert_eq!(upstream.executions("charge:inv_1"), 1);
    drop(stalled);
}

/// `server.body_read_timeout` longer than `upstream.timeout` is refused by `idem check`.
#[test]
fn a_body_read_timeout_longer_than_the_upstreams_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idem.yaml");
    let yaml = format!(
        "server:\n  body_read_timeout: 40s\n  max_buffered_bytes: 64MiB\nupstream:\n  url: http://127.0.0.1:3000\n  timeout: 30s\ndefault: reject\n{CHARGE}"
    );
    std::fs::write(&file, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["check", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    // The reason, not only the key: a build that knows no `body_read_timeout` names it
    // too (as an unknown field), and passed this test on 0582367 without the second half.
    assert!(
        text.contains("server.body_read_timeout") && text.contains("longer than upstream.timeout"),
        "{text}"
    );
}

/// Stored responses do not hold the budget: the memory store keeps a record's body for
/// its retention, and the budget is for bodies in flight. Many intents whose answers
/// together exceed `max_buffered_bytes` all run, store and replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_responses_do_not_hold_the_budget() {
    let upstream = MockUpstream::start().await;
    let idem = on_memory(&upstream, "  max_buffered_bytes: 2KiB\n", "5s", CHARGE).await;
    let big = [("x-mock-body-bytes", "600")];
    for n in 0..10 {
        let u = idem.url(&format!("/invoices/big_{n}/charge"));
        let first = post(&u, &big, "{}").await;
        assert_eq!(first.status, 201, "{n}: {}", first.text());
        let again = post(&u, &big, "{}").await;
        assert!(again.replayed(), "{n}: {} {}", again.status, again.text());
        assert_eq!(again.body.len(), 600);
    }
    let m = metrics(&idem).await;
    assert_eq!(
        metric_sum(&m, "idem_overloaded_responses_total"),
        0.0,
        "{m}"
    );
    assert_eq!(metric_sum(&m, "idem_overloaded_requests_total"), 0.0, "{m}");
}

/// A response copy that does not fit the budget is not kept: the caller still gets
/// the whole answer, streamed; the record is completed without a body, so a repeat is
/// 409 `response_not_stored` (never a second execution), counted in
/// `idem_overloaded_responses_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_copy_past_the_budget_is_not_stored_and_counted() {
    let upstream = MockUpstream::start().await;
    let idem = on_memory(&upstream, "  max_buffered_bytes: 2KiB\n", "5s", CHARGE).await;
    let u = idem.url("/invoices/huge/charge");
    let big = [("x-mock-body-bytes", "3000")];
    let first = post(&u, &big, "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.body.len(), 3000, "the caller gets the whole answer");
    let again = post(&u, &big, "{}").await;
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.code(), "response_not_stored");
    assert_eq!(upstream.executions("charge:huge"), 1);
    let m = metrics(&idem).await;
    assert_eq!(
        metric_sum(&m, "idem_overloaded_responses_total"),
        1.0,
        "{m}"
    );
}

/// Answers waiting for callers that stopped reading hold the budget too (found after
/// issue 46: over HTTP/2, 1,000 unread 1 MiB answers took 0.8–1.2 GiB outside it). An h2c
/// client with a 64 KiB window asks for sixteen 512 KiB answers and reads none: the
/// frames waiting for it reach `max_buffered_bytes` (512 KiB), those callers' answers are cut
/// short (counted in `idem_overloaded_responses_total`), every intent still ran once
/// and was recorded, and the budget comes back for the next caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_waiting_for_callers_that_stopped_reading_hold_the_budget() {
    let upstream = MockUpstream::start().await;
    // Copies for the record stay under 1 KiB (dropped by max_response_bytes, which is
    // not counted as overloaded): only the frames towards the caller take the budget.
    // A caller that is not cut stops being waited for after upstream.timeout (3 s).
    let route = format!("{CHARGE}    max_response_bytes: 1KiB\n");
    let idem = on_memory(&upstream, "  max_buffered_bytes: 512KiB\n", "3s", &route).await;
    let tcp = tokio::net::TcpStream::connect(idem.addr()).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut unread = Vec::new();
    for n in 0..16 {
        let req = http::Request::post(idem.url(&format!("/invoices/slow_{n}/charge")))
            .header("x-mock-chunks", "32")
            .header("x-mock-chunk-bytes", "16384")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(15), sender.send_request(req))
            .await
            .expect("an answer's head, or its reset");
        // A stream cut short before its head got through is reset (INTERNAL_ERROR).
        if let Ok(answer) = answer {
            assert_eq!(answer.status(), 201);
            unread.push(answer); // its body is never read
        }
    }
    support::poll::eventually(
        Duration::from_secs(20),
        "answers cut short past the budget",
        async || metric_sum(&metrics(&idem).await, "idem_overloaded_responses_total") > 0.0,
    )
    .await;
    for n in 0..16 {
        let key = format!("charge:slow_{n}");
        let url = idem.url(&format!("/invoices/slow_{n}/charge"));
        // Recorded without its body (over max_response_bytes): never run again.
        support::poll::eventually(Duration::from_secs(20), "recorded", async || {
            post(&url, &[], "").await.code() == "response_not_stored"
        })
        .await;
        assert_eq!(upstream.executions(&key), 1, "{key}");
    }
    drop(unread);
    let next = post(&idem.url("/invoices/after/charge"), &[], "").await;
    assert_eq!(next.status, 201, "{}", next.text());
}
