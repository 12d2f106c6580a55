//! The admin listener (loopback by default):
//! - `GET /healthz`: the process is up.
//! - `GET /readyz`: the store answers, config is loaded, not draining.
//! - `GET /metrics`: OpenMetrics when the scraper asks for it, Prometheus text otherwise.
//! - `GET /v1/config`: the loaded configuration's generation.
//! - `GET|DELETE /v1/keys/{route}/{key}[?scope=…][&body=true]`: inspect or release a
//!   key (honours `admin.token`).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use percent_encoding::percent_decode_str;
use serde_json::json;
use tokio::net::TcpListener;

use crate::key::StoreKey;
use crate::metrics::Exposition;
use crate::proxy::Control;
use crate::store::{Record, RecordState, Store, StoreError};

/// Shared admin state.
pub struct Admin {
    pub control: Control,
    /// Every worker's store handle (one map, shared, for the memory store).
    pub stores: Vec<Store>,
    pub token: Option<String>,
    pub draining: AtomicBool,
    pub store_timeout: Duration,
}

type AdminResponse = Response<Full<Bytes>>;

/// Serve the admin API until `shutdown` resolves.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors (EMFILE) must not spin this loop.
                Err(e) => {
                    crate::server::accept_error(e).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(route(&admin, req).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn route(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => ready(admin).await,
        (&Method::GET, "/metrics") => {
            let accept = req.headers().get(header::ACCEPT);
            let format = Exposition::negotiate(accept.and_then(|v| v.to_str().ok()));
            let mut r = text(StatusCode::OK, admin.control.metrics().render(format));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(format.content_type()),
            );
            r
        }
        (&Method::GET, "/v1/config") => json_response(
            StatusCode::OK,
            &json!({ "generation": admin.control.generation() }),
        ),
        (method, p) if p.starts_with("/v1/keys/") => {
            if !authorized(admin, &req) {
                return json_response(
                    StatusCode::UNAUTHORIZED,
                    &json!({"error": "missing or wrong bearer token"}),
                );
            }
            keys(admin, method, &p["/v1/keys/".len()..], req.uri().query()).await
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

async fn ready(admin: &Admin) -> AdminResponse {
    if admin.draining.load(Ordering::Relaxed) {
        return text(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
    }
    // Ready when every worker's store connection answers: a worker whose connection is
    // still recovering would refuse its requests. A failed PING makes that connection
    // reconnect, so each is asked again until the probe's budget runs out.
    let budget = admin.store_timeout.mul_f32(0.8);
    let pings = admin
        .stores
        .iter()
        .map(|store| ping_until_answered(store, budget));
    let all = async {
        for result in futures_util::future::join_all(pings).await {
            result?;
        }
        Ok::<(), StoreError>(())
    };
    match tokio::time::timeout(admin.store_timeout, all).await {
        Ok(Ok(())) => text(StatusCode::OK, "ready\n"),
        Ok(Err(e)) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {e}\n"),
        ),
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "store unavailable: timeout\n",
        ),
    }
}

fn authorized(admin: &Admin, req: &Request<Incoming>) -> bool {
    let Some(token) = &admin.token else {
        return true;
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn keys(admin: &Admin, method: &Method, rest: &str, query: Option<&str>) -> AdminResponse {
    let Some((route, key)) = rest.split_once('/') else {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": "use /v1/keys/{route}/{key}"}),
        );
    };
    let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
    let (route, key) = (decode(route), decode(key));
    let param = |name: &str| {
        query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (k == name).then(|| decode(&v.replace('+', " ")))
            })
    };
    let scope = param("scope").unwrap_or_default();
    let with_body = param("body").is_some_and(|v| v == "true");
    let store_key = StoreKey::new(&route, &scope, &key);
    let stores = &admin.stores;
    match *method {
        Method::GET => match any_store(stores, |s| s.get(&store_key)).await {
            Ok(Some(record)) => json_response(StatusCode::OK, &describe(&record, with_body)),
            Ok(None) => json_response(StatusCode::NOT_FOUND, &json!({"error": "no such key"})),
            Err(e) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"error": e.to_string()}),
            ),
        },
        Method::DELETE => match any_store(stores, |s| s.delete(&store_key)).await {
            Ok(true) => Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::default())
                .unwrap_or_default(),
            Ok(false) => json_response(StatusCode::NOT_FOUND, &json!({"error": "no such key"})),
            Err(e) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"error": e.to_string()}),
            ),
        },
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "use GET or DELETE\n"),
    }
}

/// PING until it answers or `budget` is spent (then the last error).
async fn ping_until_answered(store: &Store, budget: Duration) -> Result<(), StoreError> {
    let deadline = tokio::time::Instant::now() + budget;
    loop {
        let error = match store.ping().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let again = tokio::time::Instant::now() + Duration::from_millis(25);
        if again >= deadline {
            return Err(error);
        }
        tokio::time::sleep_until(again).await;
    }
}

/// Run `op` on the first worker store connection that answers: after a Redis outage
/// each worker's connection recovers on its own, and an operator's request should not
/// fail on the one that has not been used yet.
async fn any_store<'a, T, F>(
    stores: &'a [Store],
    op: impl Fn(&'a Store) -> F,
) -> Result<T, StoreError>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut last = StoreError::Unavailable("no store".to_owned());
    for store in stores {
        match op(store).await {
            Ok(value) => return Ok(value),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The record as the admin API shows it (SPEC §6). The body only when asked for.
pub fn describe(record: &Record, with_body: bool) -> serde_json::Value {
    let time = |ms: u64| {
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    };
    let mut v = json!({
        "route": record.route,
        "key": record.key,
        "scope": record.scope,
        "state": match record.state { RecordState::InProgress => "in_progress", RecordState::Completed => "completed" },
        "attempt": record.attempt,
        "created_at": time(record.created_at_ms),
        "expires_at": time(record.expires_at_ms),
    });
    if let Some(link) = &record.trace {
        // The execution that produced (or is producing) the answer, for a trace search.
        v["trace_id"] = json!(link.trace_id_hex());
        v["span_id"] = json!(hex::encode(link.span_id));
    }
    if let Some(response) = &record.response {
        v["status"] = json!(response.status);
        v["body_stored"] = json!(response.body.is_some());
        if let (true, Some(body)) = (with_body, &response.body) {
            match std::str::from_utf8(body) {
                Ok(text) => v["body"] = json!(text),
                Err(_) => {
                    v["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(body))
                }
            }
        }
    }
    v
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> AdminResponse {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> AdminResponse {
    let mut r = Response::new(Full::new(Bytes::from(value.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}
