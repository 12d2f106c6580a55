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
//! Everything under `/v1/keys/` and `/v1/unknown`, and the console, is behind the
//! [`Guard`] (`guard.rs`): `admin.token` when set (the console page itself holds no data
//! and asks for the token when the API answers 401); without one, loopback peers only on
//! an exposed listener, no foreign `Host` (DNS rebinding) and no cross-site writes.
//!
//! At most [`MAX_CONNECTIONS`] connections are open at once (more wait in the kernel's
//! backlog), and each must send its request head within `server.header_read_timeout`,
//! so a flood of idle connections cannot starve the kubelet's probes for long.

mod bulk;
pub mod config;
mod console;
mod counting;
mod eviction;
mod guard;
mod keys;
mod records;
mod reply;
mod resolve;
mod unknown;

pub use self::eviction::EvictionCheck;
pub use self::guard::Guard;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use self::records::describe;
use self::reply::{error, json_response, text, AdminResponse};
use crate::metrics::Exposition;
use crate::proxy::Control;
use crate::store::task::AbortOnDrop;
use crate::store::{Store, StoreError};

/// Connections the admin listener serves at once. Its clients are a few: the kubelet's
/// probes, a scraper, an operator. The limit keeps a flood of connections from taking
/// the process's file descriptors, as `server.max_connections` does for the proxy.
pub const MAX_CONNECTIONS: usize = 64;

/// Shared admin state.
pub struct Admin {
    pub control: Control,
    /// Every worker's store handle (one map, shared, for the memory store).
    pub stores: Vec<Store>,
    /// Who may read and change records (`admin.token`, or the checks that stand in).
    pub guard: Guard,
    pub draining: AtomicBool,
    pub store_timeout: Duration,
    /// How long a connection may take to send a request head (`server.header_read_timeout`).
    pub header_read_timeout: Duration,
    /// Whether the store may evict records (a Redis not on `noeviction`).
    pub eviction: EvictionCheck,
}

/// Serve the admin API until `shutdown` resolves; meanwhile count unknown outcomes
/// for `idem_unknown_outcomes` (every route's series exists before the first scrape).
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, shutdown: impl Future<Output = ()>) {
    let routes = admin.control.routes();
    let metrics = &admin.control.metrics().unknown;
    metrics.declare_routes(routes.iter().map(|r| r.name.as_str()));
    let counting = counting::keep_counting(admin.clone(), counting::COUNT_EVERY);
    let _counting = AbortOnDrop(tokio::spawn(counting));
    let checking = eviction::keep_checking(admin.clone(), eviction::CHECK_EVERY);
    let _checking = AbortOnDrop(tokio::spawn(checking));
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        // A slot first: at the limit, new connections wait in the kernel's backlog.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = &mut shutdown => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
            let _permit = permit;
            let timeout = admin.header_read_timeout;
            let service = service_fn(move |req| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(route(&admin, req, peer).await) }
            });
            // The first bytes within the timeout, then every request head within it
            // too. HTTP/1.1 only (issue 46 §3): probes, Prometheus and the CLI speak
            // it, and an idle HTTP/2 connection (a preface, then nothing) could hold a
            // slot of the admin listener's few for ever and starve the probes.
            let mut stream = stream;
            let Some(first) = crate::server::first_bytes(&mut stream, timeout).await else {
                return;
            };
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(timeout);
            let io = TokioIo::new(crate::server::Prefixed::new(first, stream));
            let _ = builder.serve_connection(io, service).await;
        });
    }
}

async fn route(admin: &Admin, req: Request<Incoming>, peer: SocketAddr) -> AdminResponse {
    let path = req.uri().path().to_owned();
    if guard::covers(&path) {
        if let Some(refused) = admin.guard.check(&req, peer) {
            return refused;
        }
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
        (&Method::POST, "/v1/unknown/resolve") => bulk::resolve_all(admin, req).await,
        (_, "/v1/unknown/resolve") => error(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
        (_, "/v1/unknown") => error(StatusCode::METHOD_NOT_ALLOWED, "use GET"),
        (_, p) if p.starts_with("/v1/keys/") => match keys::target(&req) {
            Ok(target) if target.resolving => resolve::resolve(admin, &target.at, req).await,
            Ok(target) => keys::handle(admin, target, req.method()).await,
            Err(refused) => *refused,
        },
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
    // Then the store must keep its records (a Redis that may evict is not ready): read
    // by the probe itself, within the rest of its budget, until the first check has.
    let started = tokio::time::Instant::now();
    let fit = async {
        all.await?;
        let left = budget.saturating_sub(started.elapsed());
        Ok::<_, StoreError>(eviction::refusal(admin, left).await)
    };
    match tokio::time::timeout(admin.store_timeout, fit).await {
        Ok(Ok(Some(why))) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        Ok(Ok(None)) => text(StatusCode::OK, "ready\n"),
        Ok(Err(e)) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "store unavailable: timeout\n",
        ),
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
