//! The gauges read from the store rather than from this replica's traffic, so every
//! replica reports the same store-wide figures (aggregate them with `max`):
//! `idem_unknown_outcomes{route}` (exact: every record not completed is read, which
//! costs what the unsettled intents cost, see `Store::list_in_progress`),
//! `idem_store_records{state}` and `idem_store_capacity`. Counted every
//! [`COUNT_EVERY`], after each listing and after each resolution.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::records::any_store;
use super::Admin;
use crate::key::StoreKey;
use crate::metrics::RecordCounts;
use crate::store::{Phase, Record, StoreError};

/// How often the gauges are counted from the store when nobody asks.
pub(super) const COUNT_EVERY: Duration = Duration::from_secs(30);

/// Every record not completed, and the store's clock.
async fn read_all(admin: &Admin) -> Result<(Vec<(StoreKey, Record)>, u64), StoreError> {
    let read = super::records::read_unsettled(&admin.stores, usize::MAX).await;
    read.map(|(read, _)| read)
}

/// Counts again now (after a change made here), keeping the last count on a failure.
pub(super) async fn recount(admin: &Admin) {
    match read_all(admin).await {
        Ok((records, now)) => count(admin, &records, now).await,
        Err(e) => {
            tracing::warn!(error = %e, "cannot count unknown outcomes; keeping the last count")
        }
    }
}

/// Sets the gauges from `records`, every record not completed at `now`.
pub(super) async fn count(admin: &Admin, records: &[(StoreKey, Record)], now: u64) {
    let mut per_route: HashMap<String, i64> = HashMap::new();
    let mut counts = RecordCounts::default();
    for (_, record) in records {
        match record.phase(now) {
            Phase::Unknown => {
                *per_route.entry(record.route.clone()).or_default() += 1;
                counts.unknown += 1;
            }
            Phase::NotExecuted => counts.not_executed += 1,
            _ => counts.in_flight += 1,
        }
    }
    let routes = admin.control.routes();
    let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
    let metrics = admin.control.metrics();
    // Routes added by a reload get their series too.
    metrics.unknown.declare_routes(names.iter().copied());
    metrics.unknown.set_unknown(&names, &per_route);
    let open = records.len() as u64;
    let completed = any_store(&admin.stores, |s| s.completed_count(open)).await;
    // A failed estimate keeps the last completed figure rather than claim 0.
    if let Ok((completed, _)) = completed {
        counts.completed = completed;
        metrics.records.set(counts);
    }
}

/// Counts every `every` (the first at once), until aborted. A failed count keeps the
/// last one: an outage must not look like "all settled". Before the first count, the
/// records a release before Redis's open index wrote are indexed (once; retried at
/// each tick until it succeeds).
pub(super) async fn keep_counting(admin: Arc<Admin>, every: Duration) {
    let capacity = admin.stores.first().and_then(|s| s.capacity());
    admin.control.metrics().records.set_capacity(capacity);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut indexed = false;
    loop {
        tick.tick().await;
        if !indexed {
            match any_store(&admin.stores, |s| s.index_existing()).await {
                Ok((0, _)) => indexed = true,
                Ok((n, _)) => {
                    tracing::info!(
                        records = n,
                        "indexed the records in progress written before the open index"
                    );
                    indexed = true;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot index the records in progress yet; retrying")
                }
            }
        }
        recount(&admin).await;
    }
}
