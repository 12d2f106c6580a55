//! The admin listener's guard (SPEC §4, `src/admin/guard.rs`), against idem in-process
//! with its memory store and a mock upstream:
//! - without `admin.token`, record data, writes and the console are served only for a
//!   `Host` that is a loopback name (`localhost`, `*.localhost`), an IP literal or listed
//!   in `admin.allowed_hosts` (DNS rebinding), and a write from another site's `Origin`
//!   is refused; probes and metrics stay open;
//! - a listener that is not on loopback and has no token answers record data only to
//!   loopback peers;
//! - a resolution is read with the route's own cap, not buffered first;
//! - at most `MAX_CONNECTIONS` admin connections are served at once.

use crate::support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::env::{Backend, Env};
use support::harness::{self, admin_url, post, send, url};
use support::store::HANG;

const ROUTES: &str = r#"
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
    max_response_bytes: 1KiB
"#;

fn refused(r: &harness::Resp, code: &str) {
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let problem = r.json();
    assert_eq!(problem["code"], code, "{problem}");
    assert!(
        problem["detail"].as_str().is_some_and(|d| d.len() > 80),
        "{problem}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_gets_no_records_but_probes_and_metrics_stay_open() {
    let env = Env::new(Backend::memory()).await;
    let admin = "admin:\n  allowed_hosts: [idem-admin.internal]\n";
    let idem = env.idem(&format!("{admin}{ROUTES}")).await;
    assert_eq!(
        post(&url(&idem, "/invoices/h1/charge"), &[], "{}")
            .await
            .status,
        201
    );
    let port = idem.admin_addr.port();
    let at = |path: &str| admin_url(&idem, path);
    let evil = format!("evil.example:{port}");
    let h = [("host", evil.as_str())];
    for path in ["/v1/unknown", "/v1/keys/charge/charge%3Ah1", "/"] {
        refused(&send("GET", &at(path), &h, "").await, "admin_host_refused");
    }
    let deleted = send("DELETE", &at("/v1/keys/charge/charge%3Ah1"), &h, "").await;
    refused(&deleted, "admin_host_refused");
    for open in ["/healthz", "/readyz", "/metrics", "/v1/config"] {
        assert_eq!(send("GET", &at(open), &h, "").await.status, 200, "{open}");
    }
    // Loopback names (`localhost` and names under it), IP literals and listed names
    // are served.
    for host in [
        format!("localhost:{port}"),
        format!("console.localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("idem-admin.internal:{port}"),
        "[::1]".to_owned(),
    ] {
        let r = send(
            "GET",
            &at("/v1/keys/charge/charge%3Ah1"),
            &[("host", &host)],
            "",
        )
        .await;
        assert_eq!(
            (r.status, r.json()["state"].as_str()),
            (200, Some("completed")),
            "{host}"
        );
    }
    // A name that merely ends in "localhost" is not under it.
    let lookalike = format!("evil-localhost:{port}");
    refused(
        &send("GET", &at("/v1/unknown"), &[("host", &lookalike)], "").await,
        "admin_host_refused",
    );
    assert_eq!(env.upstream.executions("charge:h1"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_from_another_sites_origin_is_refused() {
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(ROUTES).await;
    assert_eq!(
        post(&url(&idem, "/invoices/o1/charge"), &[], "{}")
            .await
            .status,
        201
    );
    let key = admin_url(&idem, "/v1/keys/charge/charge%3Ao1");
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let r = send("DELETE", &key, &[("origin", origin)], "").await;
        refused(&r, "admin_origin_refused");
        let resolve = format!("{key}/resolve");
        let json = ("content-type", "application/json");
        let r = send(
            "POST",
            &resolve,
            &[("origin", origin), json],
            r#"{"outcome":"not_executed"}"#,
        )
        .await;
        refused(&r, "admin_origin_refused");
    }
    assert_eq!(
        send("GET", &key, &[("origin", "http://evil.example")], "")
            .await
            .status,
        200,
        "still there; reads are not writes"
    );
    // The console's own origin (and a client that sends none) may write.
    let own = format!("http://{}", idem.admin_addr);
    assert_eq!(
        send("DELETE", &key, &[("origin", &own)], "").await.status,
        204
    );
    assert_eq!(send("DELETE", &key, &[], "").await.status, 404);
}

/// The address other hosts reach this one at (the kernel's choice of source for a
/// route outwards; no packet is sent).
fn non_loopback_ip() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("192.0.2.1:9")
        .or_else(|_| socket.connect("8.8.8.8:53"))
        .expect("this test needs a non-loopback IPv4 address with a route");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "{ip}");
    ip
}

async fn exposed(env: &Env, extra: &str) -> harness::Idem {
    let mut config = harness::config(&format!("{}{extra}{ROUTES}", env.base_yaml("3s")));
    config.admin.listen = "0.0.0.0:0".parse().unwrap();
    harness::start_config(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exposed_listener_without_token_answers_only_loopback_peers() {
    let env = Env::new(Backend::memory()).await;
    let idem = exposed(&env, "").await;
    let far = SocketAddr::new(non_loopback_ip(), idem.admin_addr.port());
    let near = SocketAddr::new("127.0.0.1".parse().unwrap(), idem.admin_addr.port());
    for path in ["/v1/unknown", "/v1/keys/charge/charge%3Ax", "/"] {
        let r = send("GET", &format!("http://{far}{path}"), &[], "").await;
        refused(&r, "admin_token_required");
        assert!(r.json()["detail"].as_str().unwrap().contains("admin.token"));
        let r = send("GET", &format!("http://{near}{path}"), &[], "").await;
        assert_ne!(
            r.status, 403,
            "a port-forward arrives from loopback: {path}"
        );
    }
    for open in ["/healthz", "/readyz", "/metrics"] {
        let r = send("GET", &format!("http://{far}{open}"), &[], "").await;
        assert_eq!(r.status, 200, "{open} is for the kubelet and Prometheus");
    }
    // With a token, the token decides, wherever the caller is.
    let guarded = exposed(&env, "admin:\n  token: s3cret\n").await;
    let far = SocketAddr::new(far.ip(), guarded.admin_addr.port());
    let list = format!("http://{far}/v1/unknown");
    let r = send("GET", &list, &[], "").await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"idem admin\"")
    );
    assert_eq!(r.json()["code"], "admin_token_invalid");
    let bearer = ("authorization", "Bearer s3cret");
    assert_eq!(send("GET", &list, &[bearer], "").await.status, 200);
}

/// Read an HTTP/1.1 response's head off `stream`, within the liveness bound.
async fn response_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                break;
            }
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(HANG, read)
        .await
        .expect("an answer, not a hang");
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_is_read_with_the_routes_cap() {
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(ROUTES).await;
    let resolve = admin_url(&idem, "/v1/keys/charge/charge%3Ar1/resolve");
    let json = ("content-type", "application/json");
    // 1 KiB responses: 2 KiB + 64 KiB of resolution at most. Declared larger: refused.
    let big = "x".repeat(200 << 10);
    let r = send("POST", &resolve, &[json], &big).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.json()["code"], "resolution_too_large");
    assert!(r.text().contains("max_response_bytes"), "{}", r.text());
    // Streamed without a length and never finished: refused once past the cap, while
    // the client is still sending (a buffering reader would wait for the end).
    let mut stream = TcpStream::connect(idem.admin_addr).await.unwrap();
    let head = format!(
        "POST /v1/keys/charge/charge%3Ar1/resolve HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        idem.admin_addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 16 << 10, "y".repeat(16 << 10));
    for _ in 0..6 {
        stream.write_all(chunk.as_bytes()).await.unwrap();
    }
    let answer = response_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_connections_are_limited() {
    let env = Env::new(Backend::memory()).await;
    let idem = env
        .idem(&format!("server:\n  header_read_timeout: 60s\n{ROUTES}"))
        .await;
    let mut idle = Vec::new();
    for _ in 0..idem::admin::MAX_CONNECTIONS {
        idle.push(TcpStream::connect(idem.admin_addr).await.unwrap());
    }
    let healthz = admin_url(&idem, "/healthz");
    let waiting = tokio::spawn(async move { send("GET", &healthz, &[], "").await });
    // Give a forbidden answer its chance: one more connection is not served...
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "served past the admin connection limit"
    );
    // ...until a slot frees.
    drop(idle.pop());
    let r = tokio::time::timeout(HANG, waiting)
        .await
        .expect("served once a slot freed");
    assert_eq!(r.unwrap().status, 200);
}
