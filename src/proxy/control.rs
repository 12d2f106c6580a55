//! The control side of the proxy, built before the workers start: the configuration
//! every worker serves from, its generation, SIGHUP reloads and the shared metrics.
//! Each worker builds its own [`Proxy`] from it ([`Control::worker_proxy`]).

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use tokio_util::task::TaskTracker;

use super::breaker::Breaker;
use super::config::{ProxyConfig, Reloaded};
use super::{Buffers, Proxy, RequestContext, Worker};
use crate::metrics::{Metrics, RouteCounters};
use crate::policy::{DefaultAction, RoutePolicy};
use crate::route::RouteTable;
use crate::store::config::OnStoreError;
use crate::store::{Sealing, Store};
use crate::traces::Traces;
use crate::upstream::UpstreamClient;

/// The part of the configuration a reload swaps, as one worker reads it.
pub struct Reloadable {
    pub routes: RouteTable,
    /// Request counters per route name, built with the route table.
    pub counters: HashMap<String, Arc<RouteCounters>, foldhash::fast::RandomState>,
    pub default: DefaultAction,
    pub on_store_error: OnStoreError,
    /// The circuit breakers of the routes that have one, by route name: one per route
    /// for the whole replica (every worker's copy shares it), kept across reloads.
    pub breakers: HashMap<String, Arc<Breaker>, foldhash::fast::RandomState>,
    pub generation: u64,
}

/// Reload, generation and metrics for every worker: cheap to clone.
#[derive(Clone)]
pub struct Control {
    metrics: Metrics,
    state: Arc<Mutex<State>>,
    /// Background releases of reservations that timed out, across workers.
    orphans: Arc<AtomicUsize>,
    traces: Option<Traces>,
    /// The store's sealing layer (`store.encryption`), shared by every store handle: a
    /// reload swaps its keys.
    sealing: Sealing,
    /// `server.max_buffered_bytes`, one budget for every worker.
    buffers: Buffers,
}

/// Each worker reads a copy of the reloadable configuration of its own (its own `Arc`s
/// down to the route policies): the reference counts a request bumps are then only
/// ever touched by one core. A reload rebuilds every copy from the new configuration.
struct State {
    config: ProxyConfig,
    generation: u64,
    copies: Vec<Arc<ArcSwap<Reloadable>>>,
    /// Every breaker made so far, by route name: a reload keeps a route's state.
    breakers: HashMap<String, Arc<Breaker>>,
}

impl Control {
    pub fn new(
        config: ProxyConfig,
        metrics: Metrics,
        traces: Option<Traces>,
        sealing: Sealing,
    ) -> Control {
        metrics.config_generation.set(1);
        let buffers = Buffers::counted(config.max_buffered_bytes, &metrics);
        let state = State {
            config,
            generation: 1,
            copies: Vec::new(),
            breakers: HashMap::new(),
        };
        Control {
            buffers,
            metrics,
            state: Arc::new(Mutex::new(state)),
            orphans: Arc::new(AtomicUsize::new(0)),
            traces,
            sealing,
        }
    }

    /// A worker's proxy: `store` (a handle made on that worker's runtime), upstream
    /// connections and detached calls of its own, and a copy of the configuration that
    /// reloads keep current. Call it on the worker's runtime.
    pub fn worker_proxy(&self, store: Store) -> Proxy {
        let mut state = self.lock();
        let breakers = breakers(&mut state, &self.metrics);
        let copy = Arc::new(ArcSwap::from_pointee(reloadable(
            &state.config.reloaded,
            state.generation,
            &self.metrics,
            breakers,
        )));
        state.copies.push(copy.clone());
        let worker = Arc::new(Worker {
            reloadable: copy,
            store,
            client: UpstreamClient::new(&state.config.upstream),
            upstream: state.config.upstream.clone(),
            metrics: self.metrics.clone(),
            // The worker's own: its detached calls run on its runtime, so its drain
            // waits for them (and only them), and spawning one touches no counter
            // another core shares.
            tasks: TaskTracker::new(),
            orphans: self.orphans.clone(),
            traces: self.traces.clone(),
            buffers: self.buffers.clone(),
            body_read_timeout: state.config.body_read_timeout,
        });
        Proxy {
            plain: RequestContext::new(worker, None),
        }
    }

    /// Swap in the routes and the `store.encryption` keys of a newly loaded
    /// configuration; in-flight requests finish with the routes they started with.
    /// Returns the new generation, or why the keys could not be read (then nothing
    /// changes).
    pub fn reload(&self, reloaded: Reloaded) -> Result<u64, String> {
        let mut state = self.lock();
        self.sealing.reload(reloaded.encryption.as_ref())?;
        state.generation += 1;
        state.config.reloaded = reloaded;
        let breakers = breakers(&mut state, &self.metrics);
        for copy in &state.copies {
            copy.store(Arc::new(reloadable(
                &state.config.reloaded,
                state.generation,
                &self.metrics,
                breakers.clone(),
            )));
        }
        self.metrics.config_generation.set(state.generation as i64);
        Ok(state.generation)
    }

    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The loaded configuration's routes: the admin API resolves an unknown outcome
    /// with its route's retention, and counts unknown outcomes per configured route.
    pub fn routes(&self) -> Vec<Arc<RoutePolicy>> {
        self.lock().config.reloaded.routes.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The breakers of the loaded routes: a route keeps its breaker (and its state) across
/// reloads, with the new settings.
fn breakers(
    state: &mut State,
    metrics: &Metrics,
) -> HashMap<String, Arc<Breaker>, foldhash::fast::RandomState> {
    let mut current = HashMap::default();
    for route in &state.config.reloaded.routes {
        let Some(policy) = route.breaker else {
            continue;
        };
        let breaker = state.breakers.entry(route.name.clone()).or_insert_with(|| {
            let series = metrics.breakers.route(&route.name);
            Arc::new(Breaker::new(policy, series))
        });
        breaker.configure(policy);
        current.insert(route.name.clone(), breaker.clone());
    }
    // A breaker taken out of the config starts afresh if it comes back.
    state.breakers.retain(|route, breaker| {
        let kept = current.contains_key(route);
        if !kept {
            breaker.retire();
        }
        kept
    });
    current
}

fn reloadable(
    config: &Reloaded,
    generation: u64,
    metrics: &Metrics,
    breakers: HashMap<String, Arc<Breaker>, foldhash::fast::RandomState>,
) -> Reloadable {
    let counters = config
        .routes
        .iter()
        .map(|r| (r.name.clone(), metrics.route_counters(&r.name)))
        .collect();
    // Deep copies: each worker's policies are its own (see `State`).
    let policies = config
        .routes
        .iter()
        .map(|r| Arc::new(RoutePolicy::clone(r)));
    Reloadable {
        routes: RouteTable::new(policies.collect()),
        counters,
        default: config.default,
        on_store_error: config.on_store_error,
        breakers,
        generation,
    }
}
