//! Upstream faults (issue 3), each mapped to SPEC §1's outcome table, on both stores:
//! refused connection, no head within `upstream.timeout`, a reset before the head, a
//! reset or a stall mid-body (before and after the head reached the caller), a
//! black-holed link, and an upstream that answers garbage.
//!
//! For every case the caller's exchange ends in a defined state (a complete response,
//! a proxy problem, or a body that errors — never a hang, never a truncated body that
//! looks complete), and so does the record, checked through the admin API
//! (`GET /v1/keys/{route}/{key}`): released (404) or held (`in_progress`) until its
//! lease ends, after which exactly one retry is forwarded, with the same upstream key.

use crate::store_cases;
use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem::app::Running;
use support::env::{Backend, Env};
use support::faulty::{Dir, Fault, FaultyProxy};
use support::harness::{admin_url, send, url, Resp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LEASE: Duration = Duration::from_millis(1200);
const UPSTREAM_TIMEOUT: &str = "400ms";

fn routes(extra: &str) -> String {
    format!(
        "routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: {}ms\n    upstream_key_window: 1h\n{extra}",
        LEASE.as_millis()
    )
}

/// What the caller saw.
#[derive(Debug)]
enum Seen {
    /// A complete response.
    Complete(Resp),
    /// The head arrived, then the body failed (never mistaken for a complete one).
    Aborted { status: u16, error: String },
}

impl Seen {
    fn problem(&self) -> (u16, String) {
        match self {
            Seen::Complete(r) => (r.status, r.code()),
            Seen::Aborted { status, error } => panic!("aborted {status}: {error}"),
        }
    }
}

/// POST and read the body separately from the head, so an aborted body is visible.
async fn call(idem: &Running, id: &str, headers: &[(&str, &str)]) -> Seen {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = http::Request::post(url(idem, &format!("/invoices/{id}/charge")));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let exchange = async {
        let resp = client
            .request(req.body(Full::new(Bytes::from_static(b"{}"))).unwrap())
            .await
            .expect("a response head (a proxy problem at worst)");
        let (parts, body) = resp.into_parts();
        match body.collect().await {
            Ok(body) => Seen::Complete(Resp {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body: body.to_bytes(),
            }),
            Err(e) => Seen::Aborted {
                status: parts.status.as_u16(),
                error: format!("{e:?}"),
            },
        }
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("the caller's exchange ended")
}

async fn record(idem: &Running, id: &str) -> (u16, serde_json::Value) {
    let r = send(
        "GET",
        &admin_url(idem, &format!("/v1/keys/charge/charge:{id}")),
        &[],
        "",
    )
    .await;
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or_default(),
    )
}

async fn metric(idem: &Running, name: &str) -> f64 {
    let text = send("GET", &admin_url(idem, "/metrics"), &[], "")
        .await
        .text();
    support::harness::metric_sum(&text, name)
}

/// One ambiguous case: how to provoke it, and what the caller must see.
struct Case {
    id: &'static str,
    headers: &'static [(&'static str, &'static str)],
    /// Set up the link before the call.
    arm: fn(&FaultyProxy),
    /// The caller sees a problem 504 (`false`) or a 201 head whose body then fails.
    head_sent: bool,
}

const CHUNKED: &[(&str, &str)] = &[("x-mock-chunks", "4"), ("x-mock-chunk-delay-ms", "100")];

const AMBIGUOUS: &[Case] = &[
    Case {
        // No response head within upstream.timeout.
        id: "slow_head",
        headers: &[("x-mock-delay-ms", "900")],
        arm: |_| {},
        head_sent: false,
    },
    Case {
        // The upstream read the request, then dropped the connection unanswered.
        id: "reset_before_head",
        headers: &[("x-mock-reset", "true")],
        arm: |_| {},
        head_sent: false,
    },
    Case {
        // Reset after the head and the first chunk came from the upstream: they went on
        // to the caller at once (SPEC §1 step 6), so its body fails, never ends cleanly.
        id: "reset_mid_body_early",
        headers: CHUNKED,
        arm: |link| link.arm_connection(Dir::Down, b"chunk1;", Fault::Reset),
        head_sent: true,
    },
    Case {
        // Reset after the caller already has the head and a chunk: its body errors.
        id: "reset_mid_body_late",
        headers: CHUNKED,
        arm: |link| link.arm_connection(Dir::Down, b"chunk2;", Fault::Reset),
        head_sent: true,
    },
    Case {
        // Head and first chunk (passed on at once), then the body stalls past
        // upstream.timeout: the caller's body fails.
        id: "stall_early",
        headers: &[("x-mock-stall-ms", "1500")],
        arm: |_| {},
        head_sent: true,
    },
    Case {
        // The caller has the head and a chunk, then the body stalls.
        id: "stall_late",
        headers: CHUNKED,
        arm: |link| link.arm_connection(Dir::Down, b"chunk2;", Fault::Hold),
        head_sent: true,
    },
    Case {
        // The link black-holes: the request goes into a socket and nothing comes back.
        id: "black_hole",
        headers: &[],
        arm: |link| link.set(Fault::Hold),
        head_sent: false,
    },
];

/// Every "sent but no complete answer" fault: 504 `upstream_timeout` (or an aborted
/// body once the head is out), the reservation held (no renewals) until its lease ends
/// — repeats get 409 meanwhile — then exactly one retry forwarded, same upstream key.
async fn ambiguous_faults_hold_the_key_then_one_retry(b: Backend) {
    let mut env = Env::new(b).await;
    let link = FaultyProxy::start(env.upstream.addr).await;
    let upstream = env.upstream.clone();
    env.upstream.addr = link.addr;
    let idem = env.idem_with_timeout(&routes(""), UPSTREAM_TIMEOUT).await;

    let mut faulted_at = Vec::new();
    for case in AMBIGUOUS {
        (case.arm)(&link);
        let seen = call(&idem, case.id, case.headers).await;
        faulted_at.push(Instant::now());
        match (&seen, case.head_sent) {
            (Seen::Complete(r), false) => {
                assert_eq!(r.status, 504, "{}: {}", case.id, r.text());
                assert_eq!(r.code(), "upstream_timeout");
                assert_eq!(r.header("content-type"), Some("application/problem+json"));
                let detail = r.json()["detail"].as_str().unwrap().to_owned();
                assert!(detail.contains("unknown"), "{}: {detail}", case.id);
                assert!(
                    detail.contains("same idempotency key"),
                    "{}: {detail}",
                    case.id
                );
            }
            (Seen::Aborted { status, .. }, true) => assert_eq!(*status, 201, "{}", case.id),
            _ => panic!("{}: {seen:?}", case.id),
        }
        if link.fault() != Fault::Pass {
            // Cut what the black hole swallowed, so it is not delivered late.
            link.reset_open().await;
            link.set(Fault::Pass);
        }
        let (status, rec) = record(&idem, case.id).await;
        assert_eq!(status, 200, "{}: held", case.id);
        assert_eq!(rec["state"], "in_progress", "{}", case.id);
        assert_eq!(rec["attempt"], 1);
        let r = call(&idem, case.id, &[]).await;
        assert_eq!(
            r.problem(),
            (409, "request_in_progress".to_owned()),
            "{}",
            case.id
        );
    }
    // Lease over (no renewals after the fault): exactly one retry is forwarded.
    let last = *faulted_at.last().unwrap();
    tokio::time::sleep(
        (last + LEASE + Duration::from_millis(100)).saturating_duration_since(Instant::now()),
    )
    .await;
    for case in AMBIGUOUS {
        let key = format!("charge:{}", case.id);
        let executed_before = upstream.executions(&key);
        let expected_before = u64::from(case.id != "black_hole");
        assert_eq!(executed_before, expected_before, "{}", case.id);
        let retry = call(&idem, case.id, &[]).await;
        let (status, _) = retry.problem();
        assert_eq!(status, 201, "{}", case.id);
        assert_eq!(
            upstream.executions(&key),
            executed_before + 1,
            "{}: same upstream key",
            case.id
        );
        let Seen::Complete(again) = call(&idem, case.id, &[]).await else {
            panic!()
        };
        assert!(again.replayed(), "{}", case.id);
        assert_eq!(record(&idem, case.id).await.1["state"], "completed");
    }
    // Every detached upstream call ended.
    assert_eq!(metric(&idem, "idem_inflight").await, 0.0);
}

/// `on_ambiguous: release`: the same faults free the key at once.
async fn ambiguous_release_frees_the_key_at_once(b: Backend) {
    let env = Env::new(b).await;
    let idem = env
        .idem_with_timeout(&routes("    on_ambiguous: release\n"), UPSTREAM_TIMEOUT)
        .await;
    for (id, headers) in [
        ("r_slow", &[("x-mock-delay-ms", "900")][..]),
        ("r_reset", &[("x-mock-reset", "true")][..]),
        ("r_stall", &[("x-mock-stall-ms", "1500")][..]),
    ] {
        match call(&idem, id, headers).await {
            // The stall comes after the head and a chunk went out: the body fails.
            Seen::Aborted { status, .. } if id == "r_stall" => assert_eq!(status, 201),
            r => assert_eq!(r.problem(), (504, "upstream_timeout".to_owned()), "{id}"),
        }
        assert_eq!(record(&idem, id).await.0, 404, "{id}: released");
        assert_eq!(call(&idem, id, &[]).await.problem().0, 201);
    }
}

/// Connection refused: nothing was sent, so the key is released (no record) and the
/// caller gets 502 `upstream_unavailable`; a retry tries again rather than 409.
async fn refused_connection_releases_with_502(b: Backend) {
    let mut env = Env::new(b).await;
    env.upstream.addr = format!("127.0.0.1:{}", support::harness::free_port())
        .parse()
        .unwrap();
    let idem = env.idem_with_timeout(&routes(""), UPSTREAM_TIMEOUT).await;
    for _ in 0..2 {
        let r = call(&idem, "refused", &[]).await;
        assert_eq!(r.problem(), (502, "upstream_unavailable".to_owned()));
        assert_eq!(record(&idem, "refused").await.0, 404, "released");
    }
}

/// An upstream that answers something that is not HTTP: the request was sent, so the
/// outcome is unknown — 504 and held, like a reset.
async fn garbage_answer_is_ambiguous(b: Backend) {
    let mut env = Env::new(b).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    env.upstream.addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..4 {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
            let _ = s
                .write_all(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff garbage\r\n\r\n")
                .await;
        }
    });
    let idem = env.idem_with_timeout(&routes(""), UPSTREAM_TIMEOUT).await;
    let r = call(&idem, "garbage", &[]).await;
    assert_eq!(r.problem(), (504, "upstream_timeout".to_owned()));
    assert_eq!(record(&idem, "garbage").await.1["state"], "in_progress");
    assert_eq!(call(&idem, "garbage", &[]).await.problem().0, 409);
    server.abort();
}

store_cases!([memory, redis, postgres] [
    ambiguous_faults_hold_the_key_then_one_retry,
    ambiguous_release_frees_the_key_at_once,
    refused_connection_releases_with_502,
    garbage_answer_is_ambiguous,
]);
