//! The admin listener (loopback by default):
//! - `GET /`: the operators' console (`console.rs`): unknown outcomes and intents in
//!   flight, and resolving them.
//! - `GET /healthz`: the process is up.
//! - `GET /readyz`: the store answers, config is loaded, not draining.
//! - `GET /metrics`: OpenMetrics when the scraper asks for it, Prometheus text otherwise.
//! - `GET /v1/config`: the loaded configuration's generation.
//! - `GET|DELETE /v1/keys/{route}/{key}[?scope=…][&body=true]`: inspect or release a
//!   key (`keys.rs`).
//! - `POST /v1/keys/{route}/{key}/resolve[?scope=…]`: record the outcome of an unknown
//!   outcome (`resolve.rs`).
//! - `GET /v1/unknown[?route=…][&limit=…][&include=inflight]`: unknown outcomes (and
//!   intents in flight) from the store (`unknown.rs`).
//!
//! Everything under `/v1/keys/` and `/v1/unknown` honours `admin.token`. The console
//! page itself holds no data and asks for the token when the API answers 401.

mod console;
mod keys;
mod reply;
mod resolve;
mod unknown;

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::json;
use tokio::net::TcpListener;

pub use self::keys::describe;
use self::reply::{error, json_response, text, AdminResponse};
use crate::metrics::Exposition;
use crate::proxy::Control;
use crate::store::task::AbortOnDrop;
use crate::store::{Store, StoreError};

/// Shared admin state.
pub struct Admin {
    pub control: Control,
    /// Every worker's store handle (one map, shared, for the memory store).
    pub stores: Vec<Store>,
    pub token: Option<String>,
    pub draining: AtomicBool,
    pub store_timeout: Duration,
}

/// Serve the admin API until `shutdown` resolves; meanwhile count unknown outcomes
/// for `idem_unknown_outcomes` (every route's series exists before the first scrape).
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, shutdown: impl Future<Output = ()>) {
    let routes = admin.control.routes();
    let metrics = &admin.control.metrics().unknown;
    metrics.declare_routes(routes.iter().map(|r| r.name.as_str()));
    let counting = unknown::keep_counting(admin.clone(), unknown::COUNT_EVERY);
    let _counting = AbortOnDrop(tokio::spawn(counting));
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
    let guarded = path.starts_with("/v1/keys/") || path == "/v1/unknown";
    if guarded && !authorized(admin, &req) {
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    match (req.method(), path.as_str()) {
        (&Method::GET, "/") => console::page(),
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
        (&Method::GET, "/v1/unknown") => unknown::list(admin, req.uri().query()).await,
        (_, "/v1/unknown") => error(StatusCode::METHOD_NOT_ALLOWED, "use GET"),
        (_, p) if p.starts_with("/v1/keys/") => keys::handle(admin, req).await,
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
