//! Issue 46 §3, against the idem binary: an HTTP/2 connection with no open stream is
//! closed after `header_read_timeout` (before its first request and after its last); a
//! peer that stops answering pings is dropped while its streams wait; the server
//! advertises `server.http2_max_streams`; the admin listener speaks HTTP/1.1 only, and
//! `server.http2: false` turns h2c off on the main listener.

use std::time::Duration;

use super::edges::on_memory;
use crate::support;
use support::harness::send;
use support::upstream::MockUpstream;

const CHARGE: &str = "routes:\n  - name: charge\n    path: /invoices/{invoice_id}/charge\n    key: \"charge:{path.invoice_id}\"\n";

/// An h2c client connection (prior knowledge) to `addr`: the request sender and
/// whether the connection has ended, once it has.
async fn h2c(
    addr: std::net::SocketAddr,
) -> Result<
    (
        hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
        tokio::task::JoinHandle<()>,
    ),
    String,
> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let io = hyper_util::rt::TokioIo::new(tcp);
    let handshake = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io);
    let (sender, conn) = tokio::time::timeout(ANSWER_WITHIN, handshake)
        .await
        .expect("the HTTP/2 handshake neither completed nor failed")
        .map_err(|e| e.to_string())?;
    let ended = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, ended))
}

async fn h2_get(
    sender: &mut hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    uri: &str,
) -> Result<u16, String> {
    let req = http::Request::get(uri)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    // A server that neither answers nor closes would hang the test (and CI) for ever:
    // that is a failure, never a refusal.
    let r = tokio::time::timeout(ANSWER_WITHIN, sender.send_request(req))
        .await
        .unwrap_or_else(|_| panic!("{uri}: no answer and no close within {ANSWER_WITHIN:?}"))
        .map_err(|e| e.to_string())?;
    Ok(r.status().as_u16())
}

/// How long an h2c exchange may take before the test fails instead of waiting.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// An h2c connection with no open stream is closed after `header_read_timeout`, both
/// before its first request and after its last (the client answers pings and settings
/// as any HTTP/2 client does, so only idleness ends it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed() {
    let upstream = MockUpstream::start().await;
    let idem = on_memory(&upstream, "  header_read_timeout: 1s\n", "5s", CHARGE).await;
    let within = Duration::from_secs(5);
    // Preface, then no request.
    let (_sender, ended) = h2c(idem.addr()).await.unwrap();
    let started = std::time::Instant::now();
    tokio::time::timeout(within, ended)
        .await
        .expect("an idle h2c connection is closed")
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // A request, then idle.
    let (mut sender, ended) = h2c(idem.addr()).await.unwrap();
    let u = idem.url("/status");
    assert_eq!(h2_get(&mut sender, &u).await.unwrap(), 201);
    tokio::time::timeout(within, ended)
        .await
        .expect("closed once idle after its last request")
        .unwrap();
    assert!(sender
        .send_request(http::Request::get(&u).body(Default::default()).unwrap())
        .await
        .is_err());
}

/// Whether an h2c GET of `uri` at `addr` fails: the handshake or the request.
async fn h2c_refused(addr: std::net::SocketAddr, uri: &str) -> bool {
    match h2c(addr).await {
        Ok((mut sender, _)) => h2_get(&mut sender, uri).await.is_err(),
        Err(_) => true,
    }
}

/// The admin listener speaks HTTP/1.1 only; `server.http2: false` turns h2c off on the
/// main listener, whose HTTP/1.1 keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_and_http2_off_refuse_h2c() {
    let upstream = MockUpstream::start().await;
    let on = on_memory(&upstream, "", "5s", CHARGE).await;
    let healthz = on.admin_url("/healthz");
    assert!(
        h2c_refused(on.admin_addr(), &healthz).await,
        "h2c on the admin listener"
    );
    assert_eq!(send("GET", &healthz, &[], "").await.status, 200);
    let (mut sender, _) = h2c(on.addr()).await.unwrap();
    assert_eq!(h2_get(&mut sender, &on.url("/status")).await.unwrap(), 201);

    let off = on_memory(&upstream, "  http2: false\n", "5s", CHARGE).await;
    let u = off.url("/status");
    assert!(
        h2c_refused(off.addr(), &u).await,
        "h2c with server.http2: false"
    );
    assert_eq!(send("GET", &u, &[], "").await.status, 201);
}

/// A bare HTTP/2 client on its own TCP connection: it sends the frames a test writes
/// and reads the server's one by one, and answers nothing by itself (no ping ack), so a
/// test sees what the server sends and what it does to a peer that stops answering.
struct RawH2(tokio::net::TcpStream);

/// Frame types (RFC 9113 §6).
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const HEADERS: u8 = 0x1;
/// `SETTINGS_MAX_CONCURRENT_STREAMS`.
const MAX_CONCURRENT_STREAMS: u16 = 0x3;

impl RawH2 {
    /// Connects, sends the preface and an empty SETTINGS.
    async fn connect(addr: std::net::SocketAddr) -> RawH2 {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut h2 = RawH2(tcp);
        h2.send(SETTINGS, 0, 0, &[]).await;
        h2
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut frame = vec![len[1], len[2], len[3], kind, flags];
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.extend_from_slice(payload);
        self.0.write_all(&frame).await.unwrap();
    }

    /// The server's next frame (type, flags, payload), or `None` once the connection
    /// is closed.
    async fn next(&mut self) -> Option<(u8, u8, Vec<u8>)> {
        use tokio::io::AsyncReadExt;
        let mut head = [0u8; 9];
        self.0.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        self.0.read_exact(&mut payload).await.ok()?;
        Some((head[3], head[4], payload))
    }

    /// Reads frames until one of type `kind` (acknowledging the server's SETTINGS, as
    /// the protocol requires of any peer), or `None` if the connection closes first.
    async fn until(&mut self, kind: u8) -> Option<(u8, Vec<u8>)> {
        loop {
            let (k, flags, payload) = self.next().await?;
            if k == kind {
                return Some((flags, payload));
            }
            if k == SETTINGS && flags & 0x1 == 0 {
                self.send(SETTINGS, 0x1, 0, &[]).await;
            }
        }
    }
}

/// A `GET {path}` with one extra header, HPACK-encoded without Huffman or indexing
/// state: `:method GET` and `:scheme http` from the static table, the rest literal.
fn get_headers(path: &str, name: &str, value: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86];
    let mut literal = |prefix: &[u8], value: &str| {
        block.extend_from_slice(prefix);
        block.push(u8::try_from(value.len()).unwrap());
        block.extend_from_slice(value.as_bytes());
    };
    literal(&[0x04], path); // :path, literal without indexing
    literal(&[0x01], "idem"); // :authority
    block.extend_from_slice(&[0x00, u8::try_from(name.len()).unwrap()]);
    block.extend_from_slice(name.as_bytes());
    block.push(u8::try_from(value.len()).unwrap());
    block.extend_from_slice(value.as_bytes());
    block
}

/// The server's first SETTINGS carries `server.http2_max_streams` (100 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_advertises_its_stream_limit() {
    let upstream = MockUpstream::start().await;
    for (server, want) in [("", 100), ("  http2_max_streams: 7\n", 7)] {
        let idem = on_memory(&upstream, server, "5s", CHARGE).await;
        let mut h2 = RawH2::connect(idem.addr()).await;
        let (_, settings) = tokio::time::timeout(ANSWER_WITHIN, h2.until(SETTINGS))
            .await
            .expect("the server's SETTINGS")
            .expect("the connection stays open for its SETTINGS");
        let advertised = settings.chunks_exact(6).find_map(|entry| {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            (id == MAX_CONCURRENT_STREAMS).then_some(value)
        });
        assert_eq!(advertised, Some(want), "{server:?}");
    }
}

/// While a stream waits on a slow upstream, the server pings the peer every
/// `header_read_timeout`; a peer that does not answer is dropped after the same time
/// again (its stream with it), not held while the call runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_answering_pings_is_dropped() {
    let upstream = MockUpstream::start().await;
    let idem = on_memory(
        &upstream,
        "  header_read_timeout: 1s\n",
        "60s",
        &format!("default: passthrough\n{CHARGE}"),
    )
    .await;
    let mut h2 = RawH2::connect(idem.addr()).await;
    // END_STREAM | END_HEADERS: a GET the upstream answers in 30 s.
    let headers = get_headers("/slow", "x-mock-delay-ms", "30000");
    h2.send(HEADERS, 0x5, 1, &headers).await;
    let started = std::time::Instant::now();
    let ping = tokio::time::timeout(ANSWER_WITHIN, h2.until(PING))
        .await
        .expect("a ping within 15 s while the stream waits");
    let (flags, payload) = ping.expect("the connection open until the ping");
    assert_eq!((flags, payload.len()), (0, 8), "a PING, not an ack");
    // Not answered: the connection ends (GOAWAY or close) well before the upstream.
    let ended = tokio::time::timeout(ANSWER_WITHIN, async {
        loop {
            match h2.next().await {
                None => return "closed",
                Some((GOAWAY, ..)) => return "goaway",
                Some((HEADERS, ..)) => panic!("the slow call answered before the drop"),
                Some(_) => {}
            }
        }
    })
    .await
    .expect("a peer that ignores pings is dropped within 15 s");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{ended} after {:?}",
        started.elapsed()
    );
}
