//! What the code enforces of the proof's assumptions (SPEC §1 "What the code
//! enforces"), counted so an operator sees each guard act:
//!
//! - `idem_records_vanished_total`: a completion or renewal found no record at all (an
//!   evicting Redis, a flushed database): never reported as a takeover;
//! - `idem_sends_withheld_total`: calls not sent because the owner's lease had ended or
//!   was lost before the request could be written (answered 503 `lease_lost`);
//! - `idem_store_evicting`: 1 while a Redis master idem uses has a `maxmemory-policy`
//!   other than `noeviction` (idem is not ready then, unless `allow_eviction`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Default)]
pub struct GuardMetrics {
    pub records_vanished: Counter,
    pub sends_withheld: Counter,
    pub store_evicting: Gauge,
}

impl GuardMetrics {
    pub(super) fn register(registry: &mut Registry) -> GuardMetrics {
        let m = GuardMetrics::default();
        registry.register(
            "records_vanished",
            "Completions or renewals that found no record under their key (evicted or deleted from the store while its call ran)",
            m.records_vanished.clone(),
        );
        registry.register(
            "sends_withheld",
            "Protected calls not sent because the owner's lease ended or was lost before the request was written (503 lease_lost)",
            m.sends_withheld.clone(),
        );
        registry.register(
            "store_evicting",
            "1 while a Redis master idem uses may evict keys (maxmemory-policy other than noeviction)",
            m.store_evicting.clone(),
        );
        m
    }
}
