//! Circuit breakers (SPEC §1 "Upstream outages"), per route and per replica:
//!
//! - `idem_breaker_open{route}`: 1 while the route's breaker refuses new intents
//!   (open, or half-open with its probe in flight), 0 when closed;
//! - `idem_breaker_trips_total{route}`: how often it opened (a failed probe counts).
//!
//! Series exist, at 0, for every route with a `breaker:` as soon as it is loaded.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::RouteLabel;

/// The two families; cheap to clone.
#[derive(Clone, Default)]
pub struct BreakerMetrics {
    open: Family<RouteLabel, Gauge>,
    trips: Family<RouteLabel, Counter>,
}

/// One route's two series, looked up once when its breaker is made.
#[derive(Clone)]
pub struct RouteBreakerMetrics {
    pub open: Gauge,
    pub trips: Counter,
}

impl BreakerMetrics {
    pub(super) fn register(registry: &mut Registry) -> BreakerMetrics {
        let m = BreakerMetrics::default();
        registry.register(
            "breaker_open",
            "1 while the route's circuit breaker refuses new intents (its upstream stopped answering), by route",
            m.open.clone(),
        );
        registry.register(
            "breaker_trips",
            "Times the route's circuit breaker opened, a failed probe included, by route",
            m.trips.clone(),
        );
        m
    }

    /// `route`'s series (created at 0).
    pub fn route(&self, route: &str) -> RouteBreakerMetrics {
        let label = RouteLabel {
            route: route.to_owned(),
        };
        RouteBreakerMetrics {
            open: self.open.get_or_create(&label).clone(),
            trips: self.trips.get_or_create(&label).clone(),
        }
    }
}
