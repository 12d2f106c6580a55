//! A caller who leaves before the end of the response: the call is detached from the
//! caller (SPEC §1 step 6), so the upstream's answer still completes and is recorded,
//! and the caller's retry gets the replay of the whole response — executed once.
//! - gone mid-body: the caller reads the head and the first chunk, then closes (FIN) or
//!   resets (RST) its connection;
//! - stops reading: the caller never reads while a large response fills every buffer
//!   between idem and it, so idem's detached call stops feeding it (after the upstream
//!   `timeout`) and records without it.

use crate::store_cases;
use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::env::{Backend, Env};
use support::harness::{admin_url, post, send, url};
use support::poll::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const ROUTES: &str = r#"
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
    max_response_bytes: 16MiB
"#;

/// A raw HTTP/1.1 POST on a connection of its own; `recv_buffer` shrinks the caller's
/// receive buffer so a caller who does not read pushes back sooner.
async fn raw_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    recv_buffer: Option<u32>,
) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    let mut stream = socket.connect(addr).await.unwrap();
    let headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let request =
        format!("POST {path} HTTP/1.1\r\nhost: idem\r\ncontent-length: 2\r\n{headers}\r\n{{}}");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// Reads until `needle` has arrived.
async fn read_until(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !got.windows(needle.len()).any(|w| w == needle) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before {:?}", String::from_utf8_lossy(needle));
            got.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the first chunk reached the caller");
    got
}

/// Waits until the admin API shows the record completed (without shipping its body).
async fn wait_recorded(idem: &idem::app::Running, key: &str, within: Duration) {
    let record = admin_url(idem, &format!("/v1/keys/charge/{key}"));
    eventually(within, "the record written", async || {
        let r = send("GET", &record, &[], "").await;
        r.status == 200 && r.json()["state"] == "completed"
    })
    .await;
}

async fn caller_gone_mid_body_the_call_completes_and_the_retry_replays(b: Backend) {
    let env = Env::new(b).await;
    let idem = env.idem(ROUTES).await;
    let streamed = [("x-mock-chunks", "5"), ("x-mock-chunk-delay-ms", "200")];
    for (id, reset) in [("gone_fin", false), ("gone_rst", true)] {
        let path = format!("/invoices/{id}/charge");
        let mut caller = raw_post(idem.addr, &path, &streamed, None).await;
        let got = read_until(&mut caller, b"chunk0;").await;
        assert!(got.starts_with(b"HTTP/1.1 201 "), "{got:?}");
        if reset {
            #[allow(deprecated)]
            caller.set_linger(Some(Duration::ZERO)).unwrap();
        }
        drop(caller);
        let left = Instant::now();

        // The call runs on without its caller: repeats wait for it, then replay it all.
        let u = url(&idem, &path);
        let replay = eventually(Duration::from_secs(5), "the retry replayed", async || {
            let r = post(&u, &[], "{}").await;
            if !r.replayed() {
                assert_eq!(r.status, 409, "{id}: {}", r.text());
                assert_eq!(r.code(), "request_in_progress");
            }
            r.replayed().then_some(r)
        })
        .await;
        assert_eq!(replay.status, 201);
        assert_eq!(replay.text(), "chunk0;chunk1;chunk2;chunk3;chunk4;", "{id}");
        assert_eq!(env.upstream.executions(&format!("charge:{id}")), 1, "{id}");
        // Four more chunks 200 ms apart were still to come when the caller left.
        assert!(
            left.elapsed() >= Duration::from_millis(600),
            "{id}: replayed {:?} after the caller left, before the upstream finished",
            left.elapsed()
        );
    }
}

/// Decodes a chunked HTTP/1.1 response read raw: its body, and whether it ended with the
/// terminating chunk (a body that looks complete).
fn dechunk(raw: &[u8]) -> (Vec<u8>, bool) {
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (Vec::new(), false);
    };
    let mut rest = &raw[head_end + 4..];
    let mut body = Vec::new();
    loop {
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = std::str::from_utf8(&rest[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(size) = size else {
            return (body, false);
        };
        if size == 0 {
            return (body, true);
        }
        rest = &rest[line_end + 2..];
        if rest.len() < size + 2 {
            body.extend_from_slice(&rest[..size.min(rest.len())]);
            return (body, false);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

async fn caller_that_stops_reading_does_not_stop_the_record(b: Backend) {
    const CHUNKS: usize = 64;
    const CHUNK_BYTES: usize = 128 * 1024;
    let env = Env::new(b).await;
    // The upstream `timeout` also bounds how long idem waits for a caller who reads
    // nothing before carrying on without it.
    let idem = env.idem_with_timeout(ROUTES, "1s").await;
    let path = "/invoices/stall/charge";
    let chunk_bytes = CHUNK_BYTES.to_string();
    let chunks = CHUNKS.to_string();
    let big = [
        ("x-mock-chunks", chunks.as_str()),
        ("x-mock-chunk-bytes", chunk_bytes.as_str()),
    ];
    // 8 MiB: more than the caller's small receive buffer, idem's send buffer and its
    // queue towards the caller hold together.
    let mut caller = raw_post(idem.addr, path, &big, Some(4096)).await;
    let sent = Instant::now();
    wait_recorded(&idem, "charge:stall", Duration::from_secs(10)).await;
    let recorded_after = sent.elapsed();

    let replay = post(&url(&idem, path), &[], "{}").await;
    assert!(replay.replayed(), "{} {}", replay.status, replay.text());
    assert_eq!(replay.body.len(), CHUNKS * CHUNK_BYTES);
    let last = format!("chunk{};", CHUNKS - 1);
    assert!(replay.text().contains(&last), "the whole body was recorded");
    assert_eq!(env.upstream.executions("charge:stall"), 1);

    // The caller who reads again now gets either the whole body or one visibly cut
    // short — never a body that ends cleanly but short.
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), caller.read_to_end(&mut raw)).await;
    let (body, looks_complete) = dechunk(&raw);
    println!(
        "MEASURED caller stopped reading: recorded {recorded_after:?} after the request; the caller later read {} of {} body bytes, terminated={looks_complete}",
        body.len(),
        CHUNKS * CHUNK_BYTES
    );
    if looks_complete {
        assert_eq!(
            body.len(),
            CHUNKS * CHUNK_BYTES,
            "a truncated body that looks complete"
        );
    }
}

store_cases!([memory, redis, postgres] [
    caller_gone_mid_body_the_call_completes_and_the_retry_replays,
    caller_that_stops_reading_does_not_stop_the_record
]);
