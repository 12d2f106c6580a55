//! The upstream client's connection handling, against a scripted raw-TCP upstream:
//! keep-alive reuse, connections the upstream closed while idle, half-read bodies,
//! `Connection: close`, refused connections and requests that got no answer.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Either, Full};
use idem::config::UpstreamConfig;
use idem::upstream::UpstreamClient;
use support::poll::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted upstream does with each request on a connection.
#[derive(Clone, Copy)]
enum Script {
    /// Answer every request with `body`, keeping the connection open.
    KeepAlive(&'static str),
    /// Answer one request, then close the connection (without saying so).
    AnswerThenClose,
    /// Answer with `Connection: close`, then close.
    ConnectionClose,
    /// Read the request, then close without answering.
    Vanish,
    /// Answer 204 (no body) and keep the connection open.
    NoContent,
}

struct Upstream {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// Connections whose peer (idem) closed them.
    closed_by_client: Arc<AtomicUsize>,
}

async fn upstream(script: Script) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let closed_by_client = Arc::new(AtomicUsize::new(0));
    let (a, c) = (accepted.clone(), closed_by_client.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, script, c.clone()));
        }
    });
    Upstream {
        addr,
        accepted,
        closed_by_client,
    }
}

async fn serve(mut stream: TcpStream, script: Script, closed: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    loop {
        // One request: a head and a Content-Length body.
        let Some(len) = read_request(&mut stream, &mut buf).await else {
            closed.fetch_add(1, Ordering::SeqCst);
            return;
        };
        buf.drain(..len);
        let reply = match script {
            Script::KeepAlive(body) => {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
            Script::AnswerThenClose => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".into(),
            Script::ConnectionClose => {
                "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok".into()
            }
            Script::Vanish => return,
            Script::NoContent => "HTTP/1.1 204 No Content\r\n\r\n".into(),
        };
        if stream.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
        if matches!(script, Script::AnswerThenClose | Script::ConnectionClose) {
            return;
        }
    }
}

/// Read one whole request into `buf`; its length, or `None` at EOF.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let body_len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse::<usize>().unwrap())
                .unwrap_or(0);
            if buf.len() >= end + 4 + body_len {
                return Some(end + 4 + body_len);
            }
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn client(addr: std::net::SocketAddr) -> UpstreamClient {
    UpstreamClient::new(&UpstreamConfig {
        url: format!("http://{addr}").parse().unwrap(),
        connect_timeout: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
    })
}

fn post(body: &'static str) -> Request<idem::proxy::UpstreamBody> {
    Request::post("/charges")
        .header("host", "upstream")
        .body(Either::Left(Full::new(Bytes::from_static(body.as_bytes()))))
        .unwrap()
}

async fn body_text(client: &UpstreamClient, body: &'static str) -> String {
    let response = client.request(post(body)).await.expect("response");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn sequential_requests_share_one_keep_alive_connection() {
    let _panics = crate::support::panics::watched();
    sequential(Script::KeepAlive("hello"), "hello", 20, (1, 1)).await;
}

/// `n` requests one after the other: each answered `body`, and then `(connections the
/// upstream accepted, connections idle in the pool)`.
async fn sequential(script: Script, body: &str, n: usize, expected: (usize, usize)) {
    let up = upstream(script).await;
    let client = client(up.addr);
    for _ in 0..n {
        assert_eq!(body_text(&client, "{}").await, body);
    }
    let accepted = up.accepted.load(Ordering::SeqCst);
    assert_eq!((accepted, client.idle_connections()), expected);
}

#[tokio::test]
async fn concurrent_requests_open_connections_and_pool_them() {
    let _panics = crate::support::panics::watched();
    let up = upstream(Script::KeepAlive("hi")).await;
    let client = client(up.addr);
    let calls = (0..8).map(|_| {
        let client = client.clone();
        tokio::spawn(async move { body_text(&client, "{}").await })
    });
    for call in calls {
        assert_eq!(call.await.unwrap(), "hi");
    }
    let opened = up.accepted.load(Ordering::SeqCst);
    assert!((1..=8).contains(&opened), "{opened} connections");
    assert_eq!(client.idle_connections(), opened);
    // The next round reuses them.
    for _ in 0..8 {
        body_text(&client, "{}").await;
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), opened);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let _panics = crate::support::panics::watched();
    let up = upstream(Script::AnswerThenClose).await;
    let client = client(up.addr);
    for n in 1..=5 {
        assert_eq!(body_text(&client, "{}").await, "ok");
        // Let the upstream's FIN arrive: the pooled connection is now dead.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(up.accepted.load(Ordering::SeqCst), n);
    }
}

#[tokio::test]
async fn connection_close_responses_are_not_pooled() {
    let _panics = crate::support::panics::watched();
    sequential(Script::ConnectionClose, "ok", 3, (3, 0)).await;
}

#[tokio::test]
async fn a_body_dropped_half_read_closes_its_connection() {
    let _panics = crate::support::panics::watched();
    let big: &'static str = Box::leak("x".repeat(1 << 20).into_boxed_str());
    let up = upstream(Script::KeepAlive(big)).await;
    let client = client(up.addr);
    let mut response = client.request(post("{}")).await.unwrap();
    let first = response.body_mut().frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some_and(|d| d.len() < big.len()));
    drop(response);
    let closed = "the upstream seeing the connection closed";
    eventually(Duration::from_secs(2), closed, async || {
        up.closed_by_client.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(client.idle_connections(), 0);
    // The next request gets a whole response on a new connection.
    assert_eq!(body_text(&client, "{}").await.len(), big.len());
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn empty_bodies_return_their_connection_unread() {
    let _panics = crate::support::panics::watched();
    let up = upstream(Script::NoContent).await;
    let client = client(up.addr);
    for _ in 0..5 {
        let response = client.request(post("{}")).await.unwrap();
        assert_eq!(response.status(), 204);
        drop(response); // never polled, as hyper's server does with an empty body
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn refused_is_a_connect_error_and_no_answer_is_not() {
    let _panics = crate::support::panics::watched();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let err = client(addr).request(post("{}")).await.unwrap_err();
    assert!(err.is_connect(), "{err}");

    // Sent, then the upstream vanished: the effect may have happened.
    let up = upstream(Script::Vanish).await;
    let err = client(up.addr).request(post("{}")).await.unwrap_err();
    assert!(!err.is_connect(), "{err}");
}
