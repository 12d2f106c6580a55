//! The request pipeline, top to bottom. This file is the map; each step lives in its
//! own module.
//!
//! 1. **Route** ([`crate::route`]): method + path template, first match wins. No match →
//!    the `default` action (passthrough streams the body untouched, or 404).
//! 2. **Protect** ([`idempotency`]): read the body (bounded, 413), derive key, scope,
//!    fingerprint and credential hash, then reserve the key in the store.
//! 3. **Loser** → replay ([`replay`]), 403, 422, 409 (+ `Retry-After`), or wait.
//! 4. **Winner** → [`execute`]: a detached task forwards once with the key passed on,
//!    renews the lease ([`lease`]), streams the response while capturing it
//!    ([`capture`], [`outbound`]), and records the outcome before releasing its end.
//! 5. Every proxy-made error is a [`problem`] (`application/problem+json`).
//!
//! Every call to the upstream, protected or not, is one [`exchange`]; what a duplicate
//! does and what an ended exchange does to the reservation are the two pure functions
//! of [`decide`]. A protected request's spans and store timings travel in its
//! [`RequestContext`].

mod body;
mod breaker;
mod buffers;
pub mod capture;
mod config;
mod context;
mod control;
mod decide;
mod exchange;
mod execute;
pub mod forward;
pub mod headers;
mod idempotency;
mod intent;
mod lease;
mod mcp;
mod outbound;
pub mod problem;
mod refusal;
mod replay;
mod request_id;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::{request, Request, Response};
use http_body_util::Either;
use hyper::body::Incoming;
use tokio_util::task::TaskTracker;

pub use body::{BoxError, ProxyBody, UpstreamBody};
pub use buffers::Buffers;
use problem::ProblemFormat;

pub use crate::vocabulary::{Outcome, StoreOp};
pub use config::{ProxyConfig, Reloaded};
pub use context::RequestContext;
pub use control::{Control, Reloadable};

use crate::key::StoreKey;
use crate::metrics::Metrics;
use crate::policy::DefaultAction;
use crate::store::Store;
use crate::traces::{RequestTrace, Traces};
use crate::upstream::config::UpstreamConfig;
use crate::upstream::UpstreamClient;

/// One worker's proxy state: its copy of the reloadable configuration, its store
/// handle, upstream connections and detached calls; the metrics are shared by every
/// worker. Its requests never wait on another thread's I/O driver.
pub struct Worker {
    pub reloadable: Arc<ArcSwap<Reloadable>>,
    pub store: Store,
    pub client: UpstreamClient,
    pub upstream: UpstreamConfig,
    pub metrics: Metrics,
    /// Detached upstream calls; shutdown waits for them to record their outcome.
    pub tasks: TaskTracker,
    /// Background releases of reservations that timed out (see `lease`).
    orphans: Arc<AtomicUsize>,
    /// The tracer, when traces are on (`crate::traces`); `None` costs one check per
    /// protected request and nothing else.
    pub traces: Option<Traces>,
    /// `server.max_buffered_bytes`, shared by every worker ([`buffers`]).
    pub buffers: Buffers,
    /// `server.body_read_timeout`: a protected request's whole body, within it.
    pub body_read_timeout: Duration,
}

/// The proxy service of one worker: cheap to clone, one per connection. Built by
/// [`Control::worker_proxy`].
pub struct Proxy {
    /// The worker, as the context of a request without spans: what an unmatched
    /// request is forwarded with, so the passthrough path builds no context of its own.
    plain: RequestContext,
}

impl Clone for Proxy {
    /// The service is cloned per request: the worker's `Arc` and no spans, spelled out
    /// so it inlines (a derived clone of the context goes through its optional trace).
    #[inline]
    fn clone(&self) -> Proxy {
        Proxy {
            plain: RequestContext::new(self.plain.worker.clone(), None),
        }
    }
}

impl Proxy {
    pub fn store(&self) -> &Store {
        &self.plain.worker.store
    }

    /// Detached upstream calls still running (graceful shutdown waits on these).
    pub fn tasks(&self) -> &TaskTracker {
        &self.plain.worker.tasks
    }

    /// Handle one request from `remote`.
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        remote: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        let current = self.plain.worker.reloadable.load_full();
        let client_ip = remote.map(|a| a.ip());
        let (parts, body) = req.into_parts();

        // 1. Route. Unmatched requests never have their body touched.
        let Some((policy, captures)) = current.routes.find(&parts.method, parts.uri.path()) else {
            return match current.default {
                DefaultAction::Passthrough => {
                    let path = parts.uri.path();
                    if let Some(route) = current.routes.behind_encoded_slash(&parts.method, path) {
                        return problem::ambiguous_path(&route.name).into_response();
                    }
                    let body = Either::Right(body);
                    let format = ProblemFormat::default();
                    forward_unprotected(&self.plain, parts, body, client_ip, &format).await
                }
                DefaultAction::Reject => {
                    problem::no_route(parts.method.as_str(), parts.uri.path()).into_response()
                }
            };
        };
        let policy = policy.clone();

        // 2–5. Protect. Every protected request carries a request id, end to end.
        let mut parts = parts;
        let request_id = request_id::ensure(&mut parts.headers);
        let started = Instant::now();
        // Traces on: the request's server span (boxed: one pointer in the futures).
        let trace = self.plain.worker.traces.as_ref().map(|traces| {
            Box::new(RequestTrace::start(
                traces,
                &parts.method,
                &policy.name,
                policy.path.as_str(),
                &parts.headers,
            ))
        });
        // Boxed: the protected flow's future is several KB, and hyper moves the
        // connection's request future by value; boxing keeps the passthrough path and
        // every move small.
        let inbound = idempotency::Inbound {
            policy: policy.clone(),
            captures,
            parts,
            client_ip,
            on_store_error: current.on_store_error,
            // Looked up only on routes with a breaker.
            breaker: policy
                .breaker
                .and_then(|_| current.breakers.get(&policy.name).cloned()),
        };
        let cx = RequestContext::new(self.plain.worker.clone(), trace);
        let handled = match &policy.mcp {
            None => Box::pin(idempotency::protect(&cx, inbound, body)).await,
            // An MCP endpoint: only its protected `tools/call` go through the flow.
            Some(route) => Box::pin(mcp::handle(&cx, route, inbound, body)).await,
        };
        if let Some(trace) = cx.trace() {
            let status = handled.response.status().as_u16();
            trace.finish(handled.outcome, status, handled.key.as_ref());
        }
        match current.counters.get(&policy.name) {
            Some(counters) => counters.inc(handled.outcome),
            None => self
                .plain
                .worker
                .metrics
                .count(&policy.name, handled.outcome),
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        tracing::info!(
            target: "idem::request",
            request_id = request_id.to_str().unwrap_or("-"),
            route = %policy.name,
            outcome = handled.outcome.as_str(),
            key_hash = %handled.key.map(|k| k.to_string()).unwrap_or_default(),
            status = handled.response.status().as_u16(),
            duration_ms = ms(started.elapsed()),
            store_ms = ms(handled.store_time),
            upstream_ms = handled.upstream_time.map(ms),
        );
        handled.response
    }
}

/// What the pipeline needs to answer and log one matched request.
pub struct Handled {
    pub response: Response<ProxyBody>,
    pub outcome: Outcome,
    pub key: Option<StoreKey>,
    /// Time spent in store round trips.
    pub store_time: Duration,
    /// Time until the upstream answered (when it was called).
    pub upstream_time: Option<Duration>,
}

impl Handled {
    /// The one constructor: `response`, answered with `outcome`. A protected request
    /// adds its key and store time ([`Handled::keyed`]), a call to the upstream its time
    /// ([`Handled::upstream_since`]).
    pub fn answered(response: Response<ProxyBody>, outcome: Outcome) -> Handled {
        Handled {
            response,
            outcome,
            key: None,
            store_time: Duration::ZERO,
            upstream_time: None,
        }
    }

    /// The request's store key (once derived) and the time its store round trips took.
    pub fn keyed(mut self, key: Option<StoreKey>, store_time: Duration) -> Handled {
        self.key = key;
        self.store_time = store_time;
        self
    }

    /// The upstream was called at `started`.
    pub fn upstream_since(mut self, started: Instant) -> Handled {
        self.upstream_time = Some(started.elapsed());
        self
    }
}

/// Forward without idempotency (unmatched routes, `require_key: false` without a key,
/// or a degraded store). The body streams through untouched, both ways.
async fn forward_unprotected(
    cx: &RequestContext,
    parts: request::Parts,
    body: body::UpstreamBody,
    client_ip: Option<IpAddr>,
    format: &ProblemFormat,
) -> Response<ProxyBody> {
    let url = &cx.worker.upstream.url;
    let request = forward::upstream_request(url, parts, body, client_ip, None);
    match exchange::forward(cx, request, format).await {
        Ok(response) => response.map(body::stream),
        Err(problem) => problem,
    }
}
