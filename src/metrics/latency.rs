//! Latency histograms that carry trace ids as exemplars when traces are on (SPEC §6).
//!
//! With traces off a [`Latency`] is prometheus-client's plain `Histogram`, exactly what
//! it was before exemplars existed: no second lock. With traces on it is a
//! `HistogramWithExemplars`, and each observation passes the request's sampled trace id
//! (`RequestTrace::exemplar`), so a slow bucket on a dashboard links to one trace that
//! landed in it.

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::MetricConstructor;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A W3C trace id, written as the 32 lowercase hex digits tracing backends search for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub u128);

impl EncodeLabelValue for TraceId {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        write!(encoder, "{:032x}", self.0)
    }
}

/// The exemplar's label set: `# {trace_id="…"} 0.0123`, the name Grafana's exemplar
/// data link and Prometheus' `exemplar-storage` expect by default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TraceExemplar {
    pub trace_id: TraceId,
}

/// A latency histogram, with or without exemplars (chosen once, at startup).
#[derive(Debug, Clone)]
pub enum Latency {
    Plain(Histogram),
    Exemplars(HistogramWithExemplars<TraceExemplar>),
}

impl Latency {
    /// `trace`: the measured request's trace id, if sampled (a plain histogram ignores it).
    pub fn observe(&self, seconds: f64, trace: Option<u128>) {
        match self {
            Latency::Plain(histogram) => histogram.observe(seconds),
            Latency::Exemplars(histogram) => {
                let exemplar = trace.map(|id| TraceExemplar {
                    trace_id: TraceId(id),
                });
                histogram.observe(seconds, exemplar, None)
            }
        }
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        match self {
            Latency::Plain(histogram) => histogram.encode(encoder),
            Latency::Exemplars(histogram) => histogram.encode(encoder),
        }
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Builds the histograms of one metric (and of each label set of a family): the buckets,
/// and whether they keep exemplars (traces on).
#[derive(Debug, Clone)]
pub struct LatencyBuckets {
    pub buckets: Vec<f64>,
    pub exemplars: bool,
}

impl LatencyBuckets {
    pub fn new(buckets: impl Iterator<Item = f64>, exemplars: bool) -> Self {
        LatencyBuckets {
            buckets: buckets.collect(),
            exemplars,
        }
    }
}

impl MetricConstructor<Latency> for LatencyBuckets {
    fn new_metric(&self) -> Latency {
        let buckets = self.buckets.iter().copied();
        match self.exemplars {
            false => Latency::Plain(Histogram::new(buckets)),
            true => Latency::Exemplars(HistogramWithExemplars::new(buckets)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::exposition::{render, Exposition};
    use prometheus_client::registry::Registry;

    const SAMPLED: Option<u128> = Some(0x0af7651916cd43dd8448eb211c80319c);

    fn registry_with(latency: &Latency) -> Registry {
        let mut registry = Registry::with_prefix("idem");
        registry.register("upstream_duration_seconds", "test", latency.clone());
        registry
    }

    #[test]
    fn exemplars_only_when_traces_are_on_and_only_in_openmetrics() {
        let buckets = [0.01, 0.1, 1.0];
        let on = LatencyBuckets::new(buckets.into_iter(), true).new_metric();
        on.observe(0.05, SAMPLED);
        let open = render(&registry_with(&on), Exposition::OpenMetrics);
        assert!(
            open.contains(r#"idem_upstream_duration_seconds_bucket{le="0.1"} 1 # {trace_id="0af7651916cd43dd8448eb211c80319c"} 0.05"#),
            "{open}"
        );
        let text = render(&registry_with(&on), Exposition::Prometheus);
        assert!(!text.contains("trace_id"), "{text}");
        assert!(
            text.contains(r#"idem_upstream_duration_seconds_bucket{le="0.1"} 1"#),
            "{text}"
        );

        let off = LatencyBuckets::new(buckets.into_iter(), false).new_metric();
        off.observe(0.05, SAMPLED);
        assert!(matches!(off, Latency::Plain(_)));
        let open = render(&registry_with(&off), Exposition::OpenMetrics);
        assert!(!open.contains("trace_id"), "{open}");
    }

    #[test]
    fn an_unsampled_request_leaves_no_exemplar() {
        let on = LatencyBuckets::new([0.1].into_iter(), true).new_metric();
        on.observe(0.05, None);
        let open = render(&registry_with(&on), Exposition::OpenMetrics);
        assert!(!open.contains(" # {"), "{open}");
    }
}
