//! Prometheus metrics (SPEC §6), exposed in text format on the admin listener.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// What happened to one request (`idem_requests_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    forwarded,
    replayed,
    conflict,
    mismatch,
    rejected,
    passthrough,
    store_error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::forwarded => "forwarded",
            Outcome::replayed => "replayed",
            Outcome::conflict => "conflict",
            Outcome::mismatch => "mismatch",
            Outcome::rejected => "rejected",
            Outcome::passthrough => "passthrough",
            Outcome::store_error => "store_error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: String,
    pub outcome: Outcome,
}

/// Store operations timed in `idem_store_duration_seconds{op}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum StoreOp {
    reserve,
    renew,
    complete,
    release,
    takeover,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StoreLabels {
    pub op: StoreOp,
}

/// Every metric idem exports; cheap to clone (all handles are `Arc`s inside).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub upstream_duration: Histogram,
    pub store_duration: Family<StoreLabels, Histogram>,
    pub inflight: Gauge,
    pub lease_renewals: Counter,
    pub stale_completions: Counter,
    pub config_generation: Gauge,
    registry: std::sync::Arc<Registry>,
}

impl Metrics {
    pub fn new() -> Metrics {
        let requests = Family::<RequestLabels, Counter>::default();
        let upstream_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let store_duration = Family::<StoreLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 14))
        });
        let inflight = Gauge::default();
        let lease_renewals = Counter::default();
        let stale_completions = Counter::default();
        let config_generation = Gauge::default();

        let mut registry = Registry::with_prefix("idem");
        registry.register(
            "requests",
            "Requests by route and outcome",
            requests.clone(),
        );
        registry.register(
            "upstream_duration_seconds",
            "Time until the upstream response completed",
            upstream_duration.clone(),
        );
        registry.register(
            "store_duration_seconds",
            "Idempotency store round trips by operation",
            store_duration.clone(),
        );
        registry.register(
            "inflight",
            "Protected upstream calls in flight",
            inflight.clone(),
        );
        registry.register(
            "lease_renewals",
            "Lease renewals written",
            lease_renewals.clone(),
        );
        registry.register(
            "stale_completions",
            "Completions refused because the lease had been taken over",
            stale_completions.clone(),
        );
        registry.register(
            "config_generation",
            "Generation of the loaded configuration (1 at start, +1 per reload)",
            config_generation.clone(),
        );
        Metrics {
            requests,
            upstream_duration,
            store_duration,
            inflight,
            lease_renewals,
            stale_completions,
            config_generation,
            registry: std::sync::Arc::new(registry),
        }
    }

    pub fn count(&self, route: &str, outcome: Outcome) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_owned(),
                outcome,
            })
            .inc();
    }

    pub fn store_op(&self, op: StoreOp, took: Duration) {
        self.store_duration
            .get_or_create(&StoreLabels { op })
            .observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
