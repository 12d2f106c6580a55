//! `GET /v1/unknown[?route=R][&limit=N][&include=inflight]`: the unknown outcomes in
//! the store (so across replicas), and with `include=inflight` the intents still in
//! flight or resolved as not executed and waiting for their repeat (the console shows
//! both). And the `idem_unknown_outcomes{route}` gauge, counted from the same listing
//! every [`COUNT_EVERY`] and on every request here.
//!
//! ```json
//! {"now": "…", "routes": ["charge"], "truncated": false,
//!  "unknown": [{"route": "charge", "key": "…", "scope": "", "attempt": 1,
//!               "state": "unknown", "first_sent_at": "…", "lease_ended_at": "…",
//!               "trace_id": "…"}],
//!  "inflight": [{"state": "in_flight", "lease_ends_at": "…", …},
//!               {"state": "not_executed", "lease_ended_at": "…", …}]}
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use serde_json::{json, Value};

use super::keys::{any_store, time};
use super::reply::{error, json_response, param, AdminResponse};
use super::Admin;
use crate::key::StoreKey;
use crate::store::{Record, Settled, StoreError};

/// How often the gauge is counted from the store when nobody asks.
pub(super) const COUNT_EVERY: Duration = Duration::from_secs(30);
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// In-progress records read per listing. The store returns leases that ended first
/// first, so unknown outcomes are never cut in favour of calls in flight: the count is
/// exact below this many unknown outcomes at once.
const READ_CAP: usize = 10_000;

/// What an intent is, for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Intent {
    /// Its lease ended without an outcome, and nobody settled it.
    Unknown,
    /// Its lease is live: its owner is still at it.
    InFlight,
    /// Resolved as not executed: the next repeat forwards it.
    NotExecuted,
    Completed,
    /// Not what it was when read (only after a refused write).
    Changed,
}

impl Intent {
    pub(super) fn of(record: &Record, now_ms: u64) -> Intent {
        match (
            record.is_completed(),
            record.settled,
            record.lease_ended(now_ms),
        ) {
            (true, _, _) => Intent::Completed,
            (false, Some(Settled::NotExecuted), _) => Intent::NotExecuted,
            (false, _, true) => Intent::Unknown,
            (false, _, false) => Intent::InFlight,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Intent::Unknown => "unknown",
            Intent::InFlight => "in_flight",
            Intent::NotExecuted => "not_executed",
            Intent::Completed => "completed",
            Intent::Changed => "changed",
        }
    }

    pub(super) fn why_not_unknown(self) -> &'static str {
        match self {
            Intent::Completed => "it is completed (its outcome is recorded)",
            Intent::InFlight => "its lease is live: the call is still in flight",
            Intent::NotExecuted => "it was resolved as not executed; the next repeat forwards it",
            Intent::Unknown | Intent::Changed => "it changed",
        }
    }
}

pub(super) async fn list(admin: &Admin, query: Option<&str>) -> AdminResponse {
    let limit = match param(query, "limit").map(|l| l.parse::<usize>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            let message = format!("limit must be a number from 1 to {MAX_LIMIT}");
            return error(StatusCode::BAD_REQUEST, message);
        }
    };
    let route = param(query, "route");
    let include = param(query, "include").unwrap_or_default();
    let with_inflight = include.split(',').any(|i| i == "inflight");
    let (records, now) = match read(admin).await {
        Ok(read) => read,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    count(admin, &records, now);
    let mut unknown = Vec::new();
    let mut inflight = Vec::new();
    let wanted = records
        .iter()
        .filter(|(_, r)| route.as_deref().is_none_or(|name| r.route == name));
    for (_, record) in wanted {
        match Intent::of(record, now) {
            Intent::Unknown => unknown.push(item(record, Intent::Unknown)),
            intent if with_inflight => inflight.push(item(record, intent)),
            _ => {}
        }
    }
    // A typo in a route name must not read as "nothing unknown": a name neither in the
    // configuration nor on any record is refused, naming the routes there are. (A
    // route removed by a reload may still have records: those are listed.)
    let routes = admin.control.routes();
    if let Some(name) = route.as_deref() {
        let configured = routes.iter().any(|r| r.name == name);
        if !configured && unknown.is_empty() && inflight.is_empty() {
            let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
            let message = format!(
                "no route named {name:?} in the loaded configuration (routes: {}) and no record of it in the store",
                names.join(", ")
            );
            return error(StatusCode::NOT_FOUND, message);
        }
    }
    let truncated = unknown.len() > limit || inflight.len() > limit;
    unknown.truncate(limit);
    inflight.truncate(limit);
    let mut body = json!({
        "now": time(now),
        "routes": routes.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
        "truncated": truncated,
        "unknown": unknown,
    });
    if with_inflight {
        body["inflight"] = Value::Array(inflight);
    }
    json_response(StatusCode::OK, &body)
}

fn item(record: &Record, intent: Intent) -> Value {
    let mut v = json!({
        "route": record.route,
        "key": record.key,
        "scope": record.scope,
        "attempt": record.attempt,
        "state": intent.as_str(),
        "first_sent_at": time(record.sent_at_ms),
    });
    let lease_end = time(record.expires_at_ms);
    match intent {
        Intent::InFlight => v["lease_ends_at"] = json!(lease_end),
        _ => v["lease_ended_at"] = json!(lease_end),
    }
    if let Some(link) = &record.trace {
        v["trace_id"] = json!(link.trace_id_hex());
    }
    v
}

/// The in-progress records and the store's clock, which tells unknown outcomes (lease
/// ended) from calls in flight.
async fn read(admin: &Admin) -> Result<(Vec<(StoreKey, Record)>, u64), StoreError> {
    let listed = any_store(&admin.stores, |s| async {
        let records = s.list_in_progress(READ_CAP).await?;
        Ok((records, s.clock_ms().await?))
    })
    .await;
    listed.map(|(read, _)| read)
}

/// Sets `idem_unknown_outcomes` from a listing of the whole store.
fn count(admin: &Admin, records: &[(StoreKey, Record)], now: u64) {
    let mut counts: HashMap<String, i64> = HashMap::new();
    for (_, record) in records {
        if Intent::of(record, now) == Intent::Unknown {
            *counts.entry(record.route.clone()).or_default() += 1;
        }
    }
    let routes = admin.control.routes();
    let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
    let metrics = &admin.control.metrics().unknown;
    // Routes added by a reload get their series too.
    metrics.declare_routes(names.iter().copied());
    metrics.set_unknown(&names, &counts);
}

/// Counts unknown outcomes every `every` (the first at once), until aborted. A failed
/// listing keeps the last count: an outage must not look like "all settled".
pub(super) async fn keep_counting(admin: Arc<Admin>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match read(&admin).await {
            Ok((records, now)) => count(&admin, &records, now),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count unknown outcomes; keeping the last count")
            }
        }
    }
}
