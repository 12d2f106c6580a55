//! What the store holds, refreshed with the unknown-outcome count (`admin/counting.rs`):
//!
//! - `idem_store_records{state}`: `in_flight` (lease live), `unknown` (lease ended, not
//!   settled), `not_executed` (settled so, waiting for its repeat) — exact on every
//!   store — and `completed` (exact on memory; an estimate on Redis and PostgreSQL, see
//!   `Store::completed_count`);
//! - `idem_store_capacity`: the memory store's `max_records` (0 on the stores without
//!   a fixed capacity), so an alert can fire as it fills with records it cannot evict.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// Records by state, as last counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordCounts {
    pub in_flight: u64,
    pub unknown: u64,
    pub not_executed: u64,
    pub completed: u64,
}

/// The two metrics; cheap to clone.
#[derive(Clone, Default)]
pub struct RecordMetrics {
    records: Family<StateLabel, Gauge>,
    capacity: Gauge,
}

impl RecordMetrics {
    pub(super) fn register(registry: &mut Registry) -> RecordMetrics {
        let m = RecordMetrics::default();
        m.set(RecordCounts::default());
        registry.register(
            "store_records",
            "Records in the idempotency store by state (in_flight, unknown, not_executed, completed), counted every 30 s",
            m.records.clone(),
        );
        registry.register(
            "store_capacity",
            "The memory store's max_records (0: a store without a fixed capacity)",
            m.capacity.clone(),
        );
        m
    }

    pub fn set(&self, counts: RecordCounts) {
        for (state, n) in [
            ("in_flight", counts.in_flight),
            ("unknown", counts.unknown),
            ("not_executed", counts.not_executed),
            ("completed", counts.completed),
        ] {
            let gauge = self.records.get_or_create(&StateLabel { state });
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    pub fn set_capacity(&self, capacity: Option<usize>) {
        let capacity = capacity.map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX));
        self.capacity.set(capacity);
    }
}
