//! `GET /v1/unknown[?route=R][&limit=N][&include=inflight]`: the unknown outcomes in
//! the store (so across replicas), and with `include=inflight` the intents still in
//! flight or resolved as not executed and waiting for their repeat (the console shows
//! both). Each request here also recounts `idem_unknown_outcomes{route}`
//! (`counting.rs`).
//!
//! ```json
//! {"now": "…", "routes": ["charge"], "truncated": false,
//!  "unknown": [{"route": "charge", "key": "…", "scope": "", "attempt": 1,
//!               "state": "unknown", "first_sent_at": "…", "lease_ended_at": "…",
//!               "trace_id": "…"}],
//!  "inflight": [{"state": "in_flight", "lease_ends_at": "…", …},
//!               {"state": "not_executed", "lease_ended_at": "…", …}]}
//! ```

use http::StatusCode;
use serde_json::{json, Value};

use super::records::{read_unsettled, time};
use super::reply::{error, json_response, param, AdminResponse};
use super::Admin;
use crate::key::StoreKey;
use crate::store::{Phase, Record, StoreError};

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// In-progress records read per listing. The store returns leases that ended first
/// first, so unknown outcomes are never cut in favour of calls in flight: the count is
/// exact below this many unknown outcomes at once.
pub(super) const READ_CAP: usize = 10_000;

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
    // The gauges follow what the operator sees: from this read when it holds every
    // record not completed, else from a full count.
    match records.len() < READ_CAP {
        true => super::counting::count(admin, &records, now).await,
        false => super::counting::recount(admin).await,
    }
    let mut unknown = Vec::new();
    let mut inflight = Vec::new();
    let wanted = records
        .iter()
        .filter(|(_, r)| route.as_deref().is_none_or(|name| r.route == name));
    for (_, record) in wanted {
        match record.phase(now) {
            Phase::Unknown => unknown.push(item(record, Phase::Unknown)),
            phase if with_inflight => inflight.push(item(record, phase)),
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

fn item(record: &Record, phase: Phase) -> Value {
    let mut v = json!({
        "route": record.route,
        "key": record.key,
        "scope": record.scope,
        "attempt": record.attempt,
        "state": phase.as_str(),
        "first_sent_at": time(record.sent_at_ms),
    });
    let lease_end = time(record.expires_at_ms);
    match phase {
        Phase::InFlight => v["lease_ends_at"] = json!(lease_end),
        _ => v["lease_ended_at"] = json!(lease_end),
    }
    if let Some(link) = &record.trace {
        v["trace_id"] = json!(link.trace_id_hex());
    }
    if let Some(sealed) = &record.sealed {
        // No listed key opens it: its key and scope stay sealed; the id of the key
        // that sealed it says where to look.
        v["sealed_with"] = json!(sealed.key_id);
    }
    v
}

/// The in-progress records and the store's clock, which tells unknown outcomes (lease
/// ended) from calls in flight.
async fn read(admin: &Admin) -> Result<(Vec<(StoreKey, Record)>, u64), StoreError> {
    read_unsettled(&admin.stores, READ_CAP)
        .await
        .map(|(read, _)| read)
}
