//! The request pipeline, top to bottom. This file is the map; each step lives in its
//! own module.
//!
//! 1. **Route** ([`crate::route`]): method + path template, first match wins. No match →
//!    the `default` action (passthrough streams the body untouched, or 404).
//! 2. **Protect** ([`idempotency`]): read the body (bounded, 413), derive key, scope,
//!    fingerprint and credential hash, then reserve the key in the store.
//! 3. **Loser** → replay ([`replay`]), 403, 422, 409 (+ `Retry-After`), or wait.
//! 4. **Winner** → [`execute`]: a detached task forwards once ([`forward`]) with the key
//!    passed on, renews the lease ([`lease`]), streams the response while capturing it
//!    ([`capture`], [`outbound`]), and records the outcome before releasing its end.
//! 5. Every proxy-made error is a [`problem`] (`application/problem+json`).

mod body;
mod capture;
mod execute;
pub mod forward;
pub mod headers;
mod idempotency;
mod intent;
mod lease;
mod outbound;
pub mod problem;
mod replay;
mod request_id;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use http::{request, Request, Response};
use http_body_util::Either;
use hyper::body::Incoming;
use tokio_util::task::TaskTracker;

pub use body::{BoxError, ProxyBody, UpstreamBody};

use crate::config::{Config, DefaultAction, OnStoreError, RoutePolicy, UpstreamConfig};
use crate::metrics::{Metrics, RouteCounters};
use crate::route::RouteTable;
use crate::store::Store;
use crate::upstream::UpstreamClient;

/// The parts of the configuration a reload may swap (SIGHUP).
pub struct Live {
    pub routes: RouteTable,
    /// Request counters per route name, built with the route table.
    pub counters: HashMap<String, Arc<RouteCounters>>,
    pub default: DefaultAction,
    pub on_store_error: OnStoreError,
    pub generation: u64,
}

/// State of one worker's requests. The metrics are shared by every worker; the
/// configuration copy, the detached-call tracker, the store handle and the upstream
/// connections are the worker's own, so its requests never wait on another thread's
/// I/O driver.
pub struct Inner {
    pub live: Arc<ArcSwap<Live>>,
    pub store: Store,
    pub client: UpstreamClient,
    pub upstream: UpstreamConfig,
    pub metrics: Metrics,
    /// Detached upstream calls; shutdown waits for them to record their outcome.
    pub tasks: TaskTracker,
    /// Every worker's copy of the configuration, for reloads.
    lives: Arc<Mutex<Lives>>,
    /// Background releases of reservations that timed out (see `idempotency`).
    orphans: Arc<AtomicUsize>,
}

/// Each worker reads a copy of the live configuration of its own (its own `Arc`s down to
/// the route policies): the reference counts a request bumps are then only ever
/// touched by one core. A reload rebuilds every copy from the new configuration.
struct Lives {
    config: Config,
    generation: u64,
    copies: Vec<Arc<ArcSwap<Live>>>,
}

/// The proxy service: cheap to clone, one per connection.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

impl Proxy {
    pub fn new(config: &Config, store: Store, metrics: Metrics) -> Proxy {
        metrics.config_generation.set(1);
        let copy = Arc::new(ArcSwap::from_pointee(live(config, 1, &metrics)));
        let lives = Lives {
            config: config.clone(),
            generation: 1,
            copies: vec![copy.clone()],
        };
        Proxy {
            inner: Arc::new(Inner {
                live: copy,
                store,
                client: UpstreamClient::new(&config.upstream),
                upstream: config.upstream.clone(),
                metrics,
                tasks: TaskTracker::new(),
                lives: Arc::new(Mutex::new(lives)),
                orphans: Arc::new(AtomicUsize::new(0)),
            }),
        }
    }

    /// The proxy for one worker thread: the same routes, metrics and drain, with
    /// `store` (a handle made on that worker's runtime) and upstream connections of its
    /// own. Call it on the worker's runtime.
    pub fn for_worker(&self, store: Store) -> Proxy {
        let inner = &self.inner;
        let copy = {
            let mut lives = lock(&inner.lives);
            let live = live(&lives.config, lives.generation, &inner.metrics);
            let copy = Arc::new(ArcSwap::from_pointee(live));
            lives.copies.push(copy.clone());
            copy
        };
        Proxy {
            inner: Arc::new(Inner {
                live: copy,
                store,
                client: inner.client.fresh(),
                upstream: inner.upstream.clone(),
                metrics: inner.metrics.clone(),
                // The worker's own: its detached calls run on its runtime, so its drain
                // waits for them (and only them), and spawning one touches no counter
                // another core shares.
                tasks: TaskTracker::new(),
                lives: inner.lives.clone(),
                orphans: inner.orphans.clone(),
            }),
        }
    }

    /// Swap in the routes of a newly loaded configuration; in-flight requests finish
    /// with the routes they started with. Returns the new generation.
    pub fn reload(&self, config: &Config) -> u64 {
        let metrics = &self.inner.metrics;
        let mut lives = lock(&self.inner.lives);
        lives.generation += 1;
        lives.config = config.clone();
        for copy in &lives.copies {
            copy.store(Arc::new(live(config, lives.generation, metrics)));
        }
        metrics.config_generation.set(lives.generation as i64);
        lives.generation
    }

    pub fn generation(&self) -> u64 {
        self.inner.live.load().generation
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Detached upstream calls still running (graceful shutdown waits on these).
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// Handle one request from `remote`.
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        remote: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        let live = self.inner.live.load_full();
        let client_ip = remote.map(|a| a.ip());
        let (parts, body) = req.into_parts();

        // 1. Route. Unmatched requests never have their body touched.
        let Some((policy, captures)) = live.routes.find(&parts.method, parts.uri.path()) else {
            return match live.default {
                DefaultAction::Passthrough => {
                    forward_unprotected(&self.inner, parts, Either::Right(body), client_ip).await
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
        // Boxed: the protected flow's future is several KB, and hyper moves the
        // connection's request future by value; boxing keeps the passthrough path and
        // every move small.
        let handled = Box::pin(idempotency::protect(
            &self.inner,
            policy.clone(),
            captures,
            parts,
            body,
            client_ip,
            live.on_store_error,
        ))
        .await;
        match live.counters.get(&policy.name) {
            Some(counters) => counters.inc(handled.outcome),
            None => self.inner.metrics.count(&policy.name, handled.outcome),
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

fn lock(lives: &Mutex<Lives>) -> std::sync::MutexGuard<'_, Lives> {
    lives.lock().unwrap_or_else(|e| e.into_inner())
}

fn live(config: &Config, generation: u64, metrics: &Metrics) -> Live {
    let counters = config
        .routes
        .iter()
        .map(|r| (r.name.clone(), metrics.route_counters(&r.name)))
        .collect();
    // Deep copies: each worker's policies are its own (see `Lives`).
    let policies = config
        .routes
        .iter()
        .map(|r| Arc::new(RoutePolicy::clone(r)));
    Live {
        routes: RouteTable::new(policies.collect()),
        counters,
        default: config.default,
        on_store_error: config.store.on_error,
        generation,
    }
}

/// Forward without idempotency (unmatched routes, `require_key: false` without a key,
/// or a degraded store). The body streams through untouched.
async fn forward_unprotected(
    inner: &Inner,
    parts: request::Parts,
    body: body::UpstreamBody,
    client_ip: Option<IpAddr>,
) -> Response<ProxyBody> {
    let request = forward::upstream_request(&inner.upstream.url, parts, body, client_ip, None);
    let timeout = inner.upstream.timeout;
    match tokio::time::timeout(timeout, inner.client.request(request)).await {
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            headers::strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body::stream(body))
        }
        Ok(Err(e)) if e.is_connect() => problem::upstream_unavailable().into_response(),
        Ok(Err(_)) | Err(_) => problem::upstream_timeout(None).into_response(),
    }
}
