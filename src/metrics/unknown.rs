//! Unknown outcomes (SPEC §1 "Unknown outcomes"): how many there are per route, how
//! operators resolved them, and what reconciliation lookups found.
//!
//! - `idem_unknown_outcomes{route}`: a gauge the admin side refreshes from the store
//!   (`crate::admin`), so every replica reports the count across replicas.
//! - `idem_resolutions_total{route,outcome}`: `POST /v1/keys/{route}/{key}/resolve`.
//! - `idem_reconciliations_total{route,result}`: `on_unknown: reconcile` lookups.
//!
//! Every series of every configured route exists, at 0, before any traffic
//! ([`UnknownMetrics::declare_routes`]), so alerts and dashboards see a value and not a
//! gap.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use strum::IntoEnumIterator;

pub use crate::vocabulary::{Reconciliation, Resolution};

use super::{Metrics, RouteLabel};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResolutionLabels {
    route: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReconciliationLabels {
    route: String,
    result: &'static str,
}

/// The three families; cheap to clone.
#[derive(Clone, Default)]
pub struct UnknownMetrics {
    outcomes: Family<RouteLabel, Gauge>,
    resolutions: Family<ResolutionLabels, Counter>,
    reconciliations: Family<ReconciliationLabels, Counter>,
    /// The routes `outcomes` has a series for (a family cannot list its label sets).
    gauged: Arc<Mutex<HashSet<String>>>,
}

impl UnknownMetrics {
    pub(super) fn register(registry: &mut Registry) -> UnknownMetrics {
        let m = UnknownMetrics::default();
        registry.register(
            "unknown_outcomes",
            "Attempts whose lease ended without an outcome, by route (read from the store periodically)",
            m.outcomes.clone(),
        );
        registry.register(
            "resolutions",
            "Unknown outcomes resolved by an operator, by route and outcome (completed, not_executed)",
            m.resolutions.clone(),
        );
        registry.register(
            "reconciliations",
            "Reconciliation lookups of unknown outcomes, by route and result (found, absent, failed)",
            m.reconciliations.clone(),
        );
        m
    }

    /// Creates every series of `routes` (at 0 unless already counted).
    pub fn declare_routes<'a>(&self, routes: impl IntoIterator<Item = &'a str>) {
        let mut gauged = self.gauged.lock().unwrap_or_else(|e| e.into_inner());
        for route in routes {
            let _ = self.outcomes.get_or_create(&route_label(route));
            gauged.insert(route.to_owned());
            for outcome in Resolution::iter() {
                let _ = self.resolutions.get_or_create(&ResolutionLabels {
                    route: route.to_owned(),
                    outcome: outcome.into(),
                });
            }
            for result in Reconciliation::iter() {
                let _ = self.reconciliations.get_or_create(&ReconciliationLabels {
                    route: route.to_owned(),
                    result: result.into(),
                });
            }
        }
    }

    /// Sets the gauge from a fresh count over the whole store: `counts` per route, 0 for
    /// the `configured` routes without any. A route neither configured nor counted (it
    /// was removed by a reload and its last unknown outcome is gone) loses its series.
    pub fn set_unknown(&self, configured: &[&str], counts: &HashMap<String, i64>) {
        let keep: HashSet<&str> = configured
            .iter()
            .copied()
            .chain(counts.keys().map(String::as_str))
            .collect();
        let mut gauged = self.gauged.lock().unwrap_or_else(|e| e.into_inner());
        gauged.retain(|route| {
            let kept = keep.contains(route.as_str());
            if !kept {
                self.outcomes.remove(&route_label(route));
            }
            kept
        });
        for route in keep {
            gauged.insert(route.to_owned());
            let n = counts.get(route).copied().unwrap_or(0);
            self.outcomes.get_or_create(&route_label(route)).set(n);
        }
    }
}

fn route_label(route: &str) -> RouteLabel {
    RouteLabel {
        route: route.to_owned(),
    }
}

// === impl Metrics ===

impl Metrics {
    /// An operator resolved an unknown outcome of `route`.
    pub fn resolved(&self, route: &str, outcome: Resolution) {
        let labels = ResolutionLabels {
            route: route.to_owned(),
            outcome: outcome.into(),
        };
        self.unknown.resolutions.get_or_create(&labels).inc();
    }

    /// A reconciliation lookup of `route` ended with `result`.
    pub fn reconciled(&self, route: &str, result: Reconciliation) {
        let labels = ReconciliationLabels {
            route: route.to_owned(),
            result: result.into(),
        };
        self.unknown.reconciliations.get_or_create(&labels).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Exposition;

    #[test]
    fn every_series_exists_at_zero_and_follows_counts() {
        let m = Metrics::new();
        m.unknown.declare_routes(["charge", "old"]);
        let text = m.render(Exposition::Prometheus);
        for series in [
            r#"idem_unknown_outcomes{route="charge"} 0"#,
            r#"idem_resolutions_total{route="charge",outcome="completed"} 0"#,
            r#"idem_resolutions_total{route="charge",outcome="not_executed"} 0"#,
            r#"idem_reconciliations_total{route="charge",result="found"} 0"#,
            r#"idem_reconciliations_total{route="charge",result="absent"} 0"#,
            r#"idem_reconciliations_total{route="charge",result="failed"} 0"#,
        ] {
            assert!(text.contains(series), "{series} missing in\n{text}");
        }
        m.resolved("charge", Resolution::NotExecuted);
        m.reconciled("charge", Reconciliation::Found);
        let counts = HashMap::from([("gone".to_owned(), 2), ("charge".to_owned(), 1)]);
        m.unknown.set_unknown(&["charge", "refund"], &counts);
        let text = m.render(Exposition::Prometheus);
        for series in [
            r#"idem_unknown_outcomes{route="charge"} 1"#,
            r#"idem_unknown_outcomes{route="refund"} 0"#,
            r#"idem_unknown_outcomes{route="gone"} 2"#,
            r#"idem_resolutions_total{route="charge",outcome="not_executed"} 1"#,
            r#"idem_reconciliations_total{route="charge",result="found"} 1"#,
        ] {
            assert!(text.contains(series), "{series} missing in\n{text}");
        }
        m.unknown.set_unknown(&["charge"], &HashMap::new());
        let text = m.render(Exposition::Prometheus);
        assert!(!text.contains(r#"route="gone""#), "{text}");
        assert!(!text.contains(r#"idem_unknown_outcomes{route="refund"}"#));
        assert!(!text.contains(r#"idem_unknown_outcomes{route="old"}"#));
    }
}
