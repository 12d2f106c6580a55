//! A mock tool API that counts executions per idempotency key, so tests can prove
//! "exactly once" from the upstream's side. Its behaviour is steered per request by
//! test-only headers:
//! - `x-mock-status: 503`: answer with that status.
//! - `x-mock-delay-ms: 500`: wait before answering (after counting the execution).
//! - `x-mock-body-bytes: N`: answer with N bytes of `a` instead of JSON.
//! - `x-mock-chunks: N` + `x-mock-chunk-delay-ms: D`: stream N chunks D ms apart
//!   (`chunk0;chunk1;…`; with `x-mock-chunk-bytes: B` each is padded with `.` to B bytes).
//! - `x-mock-stall-ms: D`: send the head and one chunk, then stall D ms before the rest.
//! - `x-mock-reset: true`: count the execution, then drop the connection unanswered.
//! - `x-mock-echo: text`: the JSON answer carries `"echo": "text"`.
//! - `x-mock-set-cookie: v`: answer with `Set-Cookie: v`, `X-Session-Token: v`,
//!   `Authentication-Info` and `Proxy-Authentication-Info` carrying `v`, and `X-Charge-Id`.
//!
//! `GET /count?key=K` answers `{"count": n}` for the `--check-url` style check.
//! `GET /lookup?key=K` is a provider's "find by idempotency key" (reconciliation): 200
//! with `{"found": K, "executions": n, "lookup": seq}` once K was executed, else 404; a header
//! `x-mock-lookup-status: N` forces status N (the lookup carries the repeat's headers).
//! `GET /search?key=K` is a provider's search: always 200, `{"data": [{"key": K, …}]}`
//! once K was executed, else `{"data": []}`; `x-mock-search-empty: true` answers empty.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When it arrived (its execution began).
    pub at: Instant,
}

#[derive(Default)]
struct State {
    executions: Mutex<HashMap<String, u64>>,
    received: Mutex<Vec<Received>>,
    seq: AtomicU64,
}

/// A running mock upstream on a free loopback port.
#[derive(Clone)]
pub struct MockUpstream {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl MockUpstream {
    pub async fn start() -> MockUpstream {
        let state = Arc::new(State::default());
        let st = state.clone();
        let addr = serve_http("mock upstream", move |req| handle(st.clone(), req)).await;
        MockUpstream { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many times the upstream executed a request carrying this idempotency key.
    pub fn executions(&self, key: &str) -> u64 {
        self.state.count(key)
    }

    /// Executions over all keys.
    pub fn total_executions(&self) -> u64 {
        self.state.executions.lock().unwrap().values().sum()
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }
}

/// Serve `handle` (HTTP/1.1 or h2c) on a free loopback port, each connection on its
/// own task, for as long as the test runs: the test support's HTTP servers.
pub async fn serve_http<H, F, B, E>(what: &str, handle: H) -> SocketAddr
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Response<B>, E>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind {what}: {e}"));
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service_fn(handle))
                    .await;
            });
        }
    });
    addr
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The URL-decoded `key=` query parameter (`/count`, `/lookup`).
fn key_param(uri: &http::Uri) -> String {
    let raw = uri
        .query()
        .and_then(|q| q.strip_prefix("key="))
        .unwrap_or("");
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

impl State {
    /// Executions counted for `key`.
    fn count(&self, key: &str) -> u64 {
        self.executions
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

fn num(h: &HeaderMap, name: &str) -> u64 {
    header(h, name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn handle(
    st: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, std::io::Error> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    if path == "/lookup" {
        let key = key_param(&parts.uri);
        st.received.lock().unwrap().push(Received {
            method: parts.method.to_string(),
            path: format!("/lookup?key={key}"),
            headers: parts.headers.clone(),
            body: Bytes::new(),
            at: Instant::now(),
        });
        let n = st.count(&key);
        let forced = num(&parts.headers, "x-mock-lookup-status");
        return Ok(match (forced, n) {
            (0, 0) => full(StatusCode::NOT_FOUND, "{\"error\":\"no such charge\"}"),
            // Each answer numbered: an outcome settled twice would show two numbers.
            (0, n) => full(
                StatusCode::OK,
                format!(
                    "{{\"found\":{key:?},\"executions\":{n},\"lookup\":{}}}",
                    st.seq.fetch_add(1, Ordering::SeqCst)
                ),
            ),
            (status, _) => full(
                StatusCode::from_u16(status as u16).unwrap_or(StatusCode::BAD_GATEWAY),
                "{\"error\":\"forced\"}",
            ),
        });
    }
    if path == "/search" {
        let key = key_param(&parts.uri);
        st.received.lock().unwrap().push(Received {
            method: parts.method.to_string(),
            path: format!("/search?{}", parts.uri.query().unwrap_or("")),
            headers: parts.headers.clone(),
            body: Bytes::new(),
            at: Instant::now(),
        });
        let n = st.count(&key);
        let body = match (n, header(&parts.headers, "x-mock-search-empty")) {
            (0, _) | (_, Some("true")) => "{\"data\":[]}".to_owned(),
            (n, _) => format!("{{\"data\":[{{\"key\":{key:?},\"executions\":{n}}}]}}"),
        };
        return Ok(full(StatusCode::OK, body));
    }
    if path == "/count" {
        let key = key_param(&parts.uri);
        let n = st.count(&key);
        return Ok(full(StatusCode::OK, format!("{{\"count\":{n}}}")));
    }
    let h = &parts.headers;
    let key = header(h, "idempotency-key")
        .or_else(|| header(h, "paypal-request-id"))
        .unwrap_or(&path)
        .to_owned();
    let execution = {
        let mut map = st.executions.lock().unwrap();
        let n = map.entry(key.clone()).or_default();
        *n += 1;
        *n
    };
    st.received.lock().unwrap().push(Received {
        method: parts.method.to_string(),
        path: path.clone(),
        headers: parts.headers.clone(),
        body,
        at: Instant::now(),
    });
    let delay = num(h, "x-mock-delay-ms");
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if header(h, "x-mock-reset") == Some("true") {
        return Err(std::io::Error::other("mock reset"));
    }
    let status =
        StatusCode::from_u16(num(h, "x-mock-status") as u16).unwrap_or(StatusCode::CREATED);
    let id = st.seq.fetch_add(1, Ordering::SeqCst);
    let size = num(h, "x-mock-body-bytes");
    if size > 0 {
        return Ok(full(status, "a".repeat(size as usize)));
    }
    let echo = header(h, "x-mock-echo").unwrap_or_default();
    let json = format!(
        "{{\"id\":\"ch_{id}\",\"key\":{key:?},\"execution\":{execution},\"path\":{path:?},\"echo\":{echo:?}}}"
    );
    let chunks = num(h, "x-mock-chunks");
    let stall = num(h, "x-mock-stall-ms");
    if chunks > 0 || stall > 0 {
        let gap = Duration::from_millis(num(h, "x-mock-chunk-delay-ms"));
        let pad_to = num(h, "x-mock-chunk-bytes") as usize;
        let n = chunks.max(2);
        let stream = futures_util::stream::unfold(0u64, move |i| async move {
            if i >= n {
                return None;
            }
            if i == 1 && stall > 0 {
                tokio::time::sleep(Duration::from_millis(stall)).await;
            } else if i > 0 {
                tokio::time::sleep(gap).await;
            }
            let mut chunk = format!("chunk{i};");
            if chunk.len() < pad_to {
                chunk.push_str(&".".repeat(pad_to - chunk.len()));
            }
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))), i + 1))
        });
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        *r.status_mut() = status;
        return Ok(r);
    }
    let mut r = full(status, json);
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    if let Some(cookie) = header(h, "x-mock-set-cookie") {
        r.headers_mut()
            .insert("set-cookie", cookie.parse().unwrap());
        r.headers_mut()
            .insert("x-session-token", cookie.parse().unwrap());
        r.headers_mut()
            .insert("x-charge-id", format!("ch_{id}").parse().unwrap());
        let info = format!("nextnonce=\"{cookie}\"");
        r.headers_mut()
            .insert("authentication-info", info.parse().unwrap());
        r.headers_mut()
            .insert("proxy-authentication-info", info.parse().unwrap());
    }
    Ok(r)
}

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<BoxBody> {
    let mut r = Response::new(BodyExt::boxed(Full::new(body.into())));
    *r.status_mut() = status;
    r
}
