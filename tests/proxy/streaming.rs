//! SPEC §1 step 6: a protected response streams to the caller as the upstream sends it;
//! only its end waits for the record. Each test's upstream sends a first part, then
//! *waits until the test has seen that part arrive through idem* before sending the
//! rest — so a proxy that holds a part back until the next one comes fails the test
//! (the gate opens by itself after 5 s, and the read of the first part times out at 3 s).
//! Callers speak HTTP/1.1 and h2c; after the whole response, a repeat is a replay.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

use support::harness::{self, post};

type Chunks = StreamBody<PartStream>;

/// How the gated upstream frames its answer.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Chunked,
    ContentLength,
    EventStream,
}

impl Framing {
    fn parts(self) -> [&'static str; 2] {
        match self {
            Framing::EventStream => ["event: progress\ndata: 50%\n\n", "data: done\n\n"],
            _ => ["first-part\n", "second-part\n"],
        }
    }
}

/// An upstream whose every response sends part one, waits for `gate`, sends part two.
struct GatedUpstream {
    addr: SocketAddr,
    gate: Arc<Notify>,
}

impl GatedUpstream {
    async fn start(framing: Framing) -> GatedUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Arc::new(Notify::new());
        let g = gate.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let g = g.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let g = g.clone();
                        async move {
                            let _ = req.into_body().collect().await;
                            Ok::<_, Infallible>(gated_response(framing, g))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        GatedUpstream { addr, gate }
    }
}

fn gated_response(framing: Framing, gate: Arc<Notify>) -> Response<Chunks> {
    let [one, two] = framing.parts();
    let (tx, rx) = mpsc::channel(2);
    tokio::spawn(async move {
        let _ = tx.send(Bytes::from_static(one.as_bytes())).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), gate.notified()).await;
        let _ = tx.send(Bytes::from_static(two.as_bytes())).await;
    });
    let mut response = Response::builder().status(201);
    match framing {
        Framing::ContentLength => {
            response = response.header("content-length", one.len() + two.len());
        }
        Framing::EventStream => response = response.header("content-type", "text/event-stream"),
        Framing::Chunked => {}
    }
    response.body(StreamBody::new(PartStream(rx))).unwrap()
}

/// The parts the upstream's task sends, as a stream of data frames.
struct PartStream(mpsc::Receiver<Bytes>);

impl futures_util::Stream for PartStream {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

const ROUTES: &str = "routes:\n  - name: stream\n    methods: [POST]\n    path: /stream\n    key: \"{header.idempotency-key}\"\n";

#[derive(Clone, Copy, Debug)]
enum Caller {
    Http1,
    H2c,
}

/// Send one POST on a fresh connection of the given protocol; return the response with
/// its body still streaming.
async fn open(caller: Caller, addr: SocketAddr, key: &str) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let io = TokioIo::new(stream);
    let req = Request::post(format!("http://{addr}/stream"))
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    match caller {
        Caller::Http1 => {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            send.send_request(req).await.unwrap()
        }
        Caller::H2c => {
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            send.send_request(req).await.unwrap()
        }
    }
}

/// The next data frame, or `None` at the end of the body.
async fn next_data(body: &mut Incoming, within: Duration) -> Option<Bytes> {
    loop {
        let frame = tokio::time::timeout(within, body.frame())
            .await
            .expect("a part the upstream has sent reached the caller in time")?
            .expect("body frame");
        if let Ok(data) = frame.into_data() {
            if !data.is_empty() {
                return Some(data);
            }
        }
    }
}

async fn streams_each_part_as_sent(framing: Framing, caller: Caller) {
    let upstream = GatedUpstream::start(framing).await;
    let idem = harness::start(&format!(
        "upstream:\n  url: http://{}\n{ROUTES}",
        upstream.addr
    ))
    .await;
    let key = format!("{framing:?}-{caller:?}");
    let [one, two] = framing.parts();

    let response = tokio::time::timeout(Duration::from_secs(3), open(caller, idem.addr, &key))
        .await
        .expect("the response head reached the caller before part two was sent");
    assert_eq!(response.status(), 201);
    let mut body = response.into_body();
    let mut got = Vec::new();
    // The gate is still closed: whatever arrives now was sent before part two existed.
    while got.len() < one.len() {
        let data = next_data(&mut body, Duration::from_secs(3)).await;
        got.extend_from_slice(&data.expect("the body ended before part two"));
    }
    assert!(
        one.as_bytes().starts_with(&got) || got.starts_with(one.as_bytes()),
        "first part: {:?}",
        String::from_utf8_lossy(&got)
    );
    upstream.gate.notify_one();
    while let Some(data) = next_data(&mut body, Duration::from_secs(5)).await {
        got.extend_from_slice(&data);
    }
    assert_eq!(String::from_utf8_lossy(&got), format!("{one}{two}"));

    // The caller has the whole response: a repeat is its replay, never a 409.
    let again = post(
        &harness::url(&idem, "/stream"),
        &[("idempotency-key", &key)],
        "{}",
    )
    .await;
    assert!(again.replayed(), "{} {}", again.status, again.text());
    assert_eq!(again.text(), format!("{one}{two}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_parts_stream_over_http1() {
    streams_each_part_as_sent(Framing::Chunked, Caller::Http1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_parts_stream_over_h2c() {
    streams_each_part_as_sent(Framing::Chunked, Caller::H2c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_body_in_two_parts_streams_over_http1() {
    streams_each_part_as_sent(Framing::ContentLength, Caller::Http1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_body_in_two_parts_streams_over_h2c() {
    streams_each_part_as_sent(Framing::ContentLength, Caller::H2c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_events_stream_over_http1() {
    streams_each_part_as_sent(Framing::EventStream, Caller::Http1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_events_stream_over_h2c() {
    streams_each_part_as_sent(Framing::EventStream, Caller::H2c).await;
}
