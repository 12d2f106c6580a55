//! Prometheus metrics (SPEC §6), exposed on the admin listener in the format the
//! scraper asks for ([`exposition`]); latency histograms carry trace ids as exemplars
//! when traces are on ([`latency`]).
//!
//! Every series whose label values are known in advance exists from the start, at 0:
//! each route's requests by every outcome (once the route is loaded), every store
//! operation's histogram, every upstream failure reason. Prometheus' guidance: a series
//! that appears only at its first increment shows as "no data" rather than 0 in panels,
//! and leaves `rate()` and ratio alerts nothing to work on until then
//! (tests/admin/observability.rs checks the chart's dashboard and alerts on a fresh idem).

mod breaker;
mod exposition;
mod guards;
mod latency;
mod records;
mod unknown;

pub use breaker::{BreakerMetrics, RouteBreakerMetrics};
pub use exposition::Exposition;
pub use guards::GuardMetrics;
pub use latency::Latency;
pub use records::{RecordCounts, RecordMetrics};
pub use unknown::{Reconciliation, Resolution, UnknownMetrics};

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

use latency::LatencyBuckets;

pub use crate::vocabulary::{Outcome, StoreOp, UpstreamFailure, WokenBy};

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for StoreOp {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StoreLabels {
    pub op: StoreOp,
}

impl EncodeLabelValue for UpstreamFailure {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UpstreamFailureLabels {
    pub reason: UpstreamFailure,
}

impl EncodeLabelValue for WokenBy {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            WokenBy::Notification => "notification",
            WokenBy::Timer => "timer",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct WakeupLabels {
    pub by: WokenBy,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct WorkerLabels {
    pub worker: String,
}

/// Every metric idem exports; cheap to clone (all handles are `Arc`s inside).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub upstream_duration: Latency,
    pub store_duration: Family<StoreLabels, Latency, LatencyBuckets>,
    pub inflight: Gauge,
    pub lease_renewals: Counter,
    pub stale_completions: Counter,
    /// Requests forwarded unprotected because the store failed (`on_error: passthrough`);
    /// also counted as `store_error`, but these reached the upstream without a key.
    pub degraded: Counter,
    /// Protected calls the upstream did not answer (error path only: a family lookup).
    pub upstream_failures: Family<UpstreamFailureLabels, Counter>,
    pub config_generation: Gauge,
    /// Stored records no listed encryption key opens, per route (answered 409).
    pub unreadable_records: Family<RouteLabel, Counter>,
    /// Requests answered 503 `overloaded`: `server.max_buffered_bytes` was reached.
    pub overloaded_requests: Counter,
    /// Responses whose copy for the record did not fit `server.max_buffered_bytes`.
    pub overloaded_responses: Counter,
    /// Open client connections per worker thread (also what the acceptor balances on).
    pub connections: Family<WorkerLabels, Gauge>,
    /// Waiting duplicates woken, by what woke them (rare path: a family lookup).
    pub duplicate_wakeups: Family<WakeupLabels, Counter>,
    pub unknown: UnknownMetrics,
    pub breakers: BreakerMetrics,
    pub records: RecordMetrics,
    pub guards: GuardMetrics,
    /// Each operation's histogram, looked up in `store_duration` on first use: a family
    /// lookup takes the family's lock, hashes the labels and clones the handle, on a
    /// cache line every worker thread shares.
    store_ops: Arc<[OnceLock<Latency>; StoreOp::ALL.len()]>,
    registry: std::sync::Arc<Registry>,
}

impl Metrics {
    /// Metrics without exemplars (traces off).
    pub fn new() -> Metrics {
        Metrics::with_exemplars(false)
    }

    /// Metrics whose latency histograms keep exemplars when `exemplars` (traces on).
    pub fn with_exemplars(exemplars: bool) -> Metrics {
        let requests = Family::<RequestLabels, Counter>::default();
        let upstream_duration =
            LatencyBuckets::new(exponential_buckets(0.001, 2.0, 16), exemplars).new_metric();
        let store_duration = Family::new_with_constructor(LatencyBuckets::new(
            exponential_buckets(0.0001, 2.0, 14),
            exemplars,
        ));
        let inflight = Gauge::default();
        let lease_renewals = Counter::default();
        let stale_completions = Counter::default();
        let degraded = Counter::default();
        let upstream_failures = Family::<UpstreamFailureLabels, Counter>::default();
        let config_generation = Gauge::default();
        let unreadable_records = Family::<RouteLabel, Counter>::default();
        let overloaded_requests = Counter::default();
        let overloaded_responses = Counter::default();
        let connections = Family::<WorkerLabels, Gauge>::default();
        let duplicate_wakeups = Family::<WakeupLabels, Counter>::default();

        // The series whose label values are known, at 0 before anything happened.
        for reason in UpstreamFailure::ALL {
            let _ = upstream_failures.get_or_create(&UpstreamFailureLabels { reason });
        }
        for op in StoreOp::ALL {
            let _ = store_duration.get_or_create(&StoreLabels { op });
        }
        for by in [WokenBy::Notification, WokenBy::Timer] {
            let _ = duplicate_wakeups.get_or_create(&WakeupLabels { by });
        }

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
            "connections",
            "Open client connections by worker thread",
            connections.clone(),
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
            "degraded_requests",
            "Requests forwarded without idempotency because the store failed (on_error: passthrough)",
            degraded.clone(),
        );
        registry.register(
            "upstream_failures",
            "Protected upstream calls without an answer: not_sent (502) or ambiguous (timeout or reset after sending, 504)",
            upstream_failures.clone(),
        );
        registry.register(
            "unreadable_records",
            "Stored records that no listed store.encryption key opens (answered 409 record_unreadable, never executed again)",
            unreadable_records.clone(),
        );
        registry.register(
            "overloaded_requests",
            "Requests answered 503 overloaded: their body did not fit server.max_buffered_bytes (nothing reserved or sent)",
            overloaded_requests.clone(),
        );
        registry.register(
            "overloaded_responses",
            "Responses past server.max_buffered_bytes: a copy for the record that did not fit (recorded without a body: a repeat gets 409 response_not_stored), or an answer cut short because the frames waiting for its caller did not fit",
            overloaded_responses.clone(),
        );
        registry.register(
            "duplicate_wakeups",
            "Waiting duplicates woken, by the store's change notification or by the safety re-check at the end of a nap",
            duplicate_wakeups.clone(),
        );
        registry.register(
            "config_generation",
            "Generation of the loaded configuration (1 at start, +1 per reload)",
            config_generation.clone(),
        );
        let unknown = UnknownMetrics::register(&mut registry);
        let breakers = BreakerMetrics::register(&mut registry);
        let records = RecordMetrics::register(&mut registry);
        let guards = GuardMetrics::register(&mut registry);
        Metrics {
            requests,
            unknown,
            breakers,
            records,
            guards,
            upstream_duration,
            store_duration,
            inflight,
            lease_renewals,
            stale_completions,
            degraded,
            upstream_failures,
            config_generation,
            unreadable_records,
            overloaded_requests,
            overloaded_responses,
            connections,
            duplicate_wakeups,
            store_ops: Default::default(),
            registry: std::sync::Arc::new(registry),
        }
    }

    /// The request counters of `route`, to keep and increment without building label
    /// sets (a `String`) per request. Every outcome's series exists from here on, at 0.
    pub fn route_counters(&self, route: &str) -> Arc<RouteCounters> {
        for outcome in Outcome::ALL {
            let _ = self.requests.get_or_create(&RequestLabels {
                route: route.to_owned(),
                outcome,
            });
        }
        Arc::new(RouteCounters {
            route: route.to_owned(),
            family: self.requests.clone(),
            slots: Default::default(),
        })
    }

    pub fn count(&self, route: &str, outcome: Outcome) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_owned(),
                outcome,
            })
            .inc();
    }

    /// A stored record no key opened, on `route`.
    pub fn unreadable(&self, route: &str) {
        let labels = RouteLabel {
            route: route.to_owned(),
        };
        self.unreadable_records.get_or_create(&labels).inc();
    }

    pub fn woken(&self, by: WokenBy) {
        self.duplicate_wakeups
            .get_or_create(&WakeupLabels { by })
            .inc();
    }

    pub fn upstream_failure(&self, reason: UpstreamFailure) {
        self.upstream_failures
            .get_or_create(&UpstreamFailureLabels { reason })
            .inc();
    }

    /// Record one store round trip's duration under `op`; `trace`: the request's
    /// sampled trace id, the exemplar (see [`latency`]).
    pub fn store_op(&self, op: StoreOp, took: Duration, trace: Option<u128>) {
        self.store_ops[op.index()]
            .get_or_init(|| {
                self.store_duration
                    .get_or_create(&StoreLabels { op })
                    .clone()
            })
            .observe(took.as_secs_f64(), trace);
    }

    /// The exposition of every metric, in `format`.
    pub fn render(&self, format: Exposition) -> String {
        exposition::render(&self.registry, format)
    }
}

/// `idem_requests_total{route}` for one route: each outcome's counter is looked up in
/// the family once, on first use (the series themselves exist from the route's load).
pub struct RouteCounters {
    route: String,
    family: Family<RequestLabels, Counter>,
    slots: [OnceLock<Counter>; Outcome::ALL.len()],
}

impl RouteCounters {
    pub fn inc(&self, outcome: Outcome) {
        self.slots[outcome.index()]
            .get_or_init(|| {
                self.family
                    .get_or_create(&RequestLabels {
                        route: self.route.clone(),
                        outcome,
                    })
                    .clone()
            })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_counters_feed_the_family() {
        let m = Metrics::new();
        let c = m.route_counters("charge");
        c.inc(Outcome::Replayed);
        c.inc(Outcome::Replayed);
        m.count("charge", Outcome::Replayed);
        let text = m.render(Exposition::Prometheus);
        assert!(
            text.contains(r#"idem_requests_total{route="charge",outcome="replayed"} 3"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE idem_requests_total counter"),
            "{text}"
        );
        let open = m.render(Exposition::OpenMetrics);
        assert!(open.contains("# TYPE idem_requests counter"), "{open}");
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(
            text.contains(r#"idem_requests_total{route="charge",outcome="forwarded"} 0"#),
            "every outcome of a loaded route exists at 0: {text}"
        );
    }

    /// Series with known label values exist before anything happened (Prometheus'
    /// guidance), so dashboards and alerts see 0, not "no data".
    #[test]
    fn known_series_exist_at_zero_before_any_traffic() {
        let m = Metrics::new();
        let _ = m.route_counters("charge");
        let text = m.render(Exposition::Prometheus);
        let mut want: Vec<String> = Outcome::ALL
            .iter()
            .map(|o| {
                format!(
                    r#"idem_requests_total{{route="charge",outcome="{}"}} 0"#,
                    o.as_str()
                )
            })
            .collect();
        want.extend(StoreOp::ALL.iter().map(|op| {
            format!(
                r#"idem_store_duration_seconds_count{{op="{}"}} 0"#,
                op.as_str()
            )
        }));
        want.push(r#"idem_upstream_failures_total{reason="not_sent"} 0"#.into());
        want.push(r#"idem_upstream_failures_total{reason="ambiguous"} 0"#.into());
        assert_eq!(want.len(), 8 + 5 + 2);
        for series in want {
            assert!(text.lines().any(|l| l == series), "{series}:\n{text}");
        }
    }
}
