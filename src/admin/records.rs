//! What the admin's handlers share about records, below all of them: which key a
//! request names, the first store connection that answers, a record as the API shows
//! it, and the one timestamp format. A leaf: it imports the store, never a handler.

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use serde_json::json;

use crate::key::StoreKey;
use crate::store::{Record, RecordState, Store, StoreError};

/// One key named by the path and `?scope=`.
pub(super) struct KeyRef {
    pub(super) route: String,
    pub(super) store_key: StoreKey,
}

/// At most `limit` records not completed, the store's clock, and the store handle that
/// answered (to write through the same one).
pub(super) async fn read_unsettled(
    stores: &[Store],
    limit: usize,
) -> Result<((Vec<(StoreKey, Record)>, u64), &Store), StoreError> {
    any_store(stores, |s| async {
        let records = s.list_in_progress(limit).await?;
        Ok((records, s.clock_ms().await?))
    })
    .await
}

/// Run `op` on the first worker store connection that answers, and say which: after a
/// Redis outage each worker's connection recovers on its own, and an operator's request
/// should not fail on the one that has not been used yet.
pub(super) async fn any_store<'a, T, F>(
    stores: &'a [Store],
    op: impl Fn(&'a Store) -> F,
) -> Result<(T, &'a Store), StoreError>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut last = StoreError::Unavailable("no store".to_owned());
    for store in stores {
        match op(store).await {
            Ok(value) => return Ok((value, store)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// RFC 3339 with milliseconds, as every admin timestamp.
pub(super) fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The record as the admin API shows it (SPEC §6), at `now` on the store's clock. The
/// body only when asked for. `expires_at` is when the record itself ends (`life` from
/// `now`, as the store says; else a completed record's own estimate); an in-progress
/// record's lease, which ends long before (the record outlives it, SPEC §1 "Unknown
/// outcomes"), is `lease_ends_at`.
pub fn describe(
    record: &Record,
    with_body: bool,
    now: u64,
    life: Option<Duration>,
) -> serde_json::Value {
    let in_progress = record.state == RecordState::InProgress;
    let mut v = json!({
        "route": record.route,
        "key": record.key,
        "scope": record.scope,
        "state": if in_progress { "in_progress" } else { "completed" },
        "attempt": record.attempt,
        "created_at": time(record.created_at_ms),
    });
    match life {
        Some(life) => v["expires_at"] = json!(time(now.saturating_add(life.as_millis() as u64))),
        None if !in_progress => v["expires_at"] = json!(time(record.expires_at_ms)),
        None => {}
    }
    if in_progress {
        v["lease_ends_at"] = json!(time(record.expires_at_ms));
    }
    if let Some(settled) = record.settled {
        // How an unknown outcome was settled: reconciled, resolved or not_executed.
        v["settled"] = json!(settled.as_str());
    } else if record.lease_ended(now) {
        v["outcome_unknown"] = json!(true);
    }
    if let Some(link) = &record.trace {
        // The execution that produced (or is producing) the answer, for a trace search.
        v["trace_id"] = json!(link.trace_id_hex());
        v["span_id"] = json!(crate::fast_hex::encode(&link.span_id));
    }
    if let Some(sealed) = &record.sealed {
        // Not opened by any listed key: only the id of the key that sealed it.
        v["sealed_with"] = json!(sealed.key_id);
    }
    if let Some(response) = &record.response {
        v["status"] = json!(response.status);
        v["body_stored"] = json!(response.body.is_some());
        if let (true, Some(body)) = (with_body, &response.body) {
            match std::str::from_utf8(body) {
                Ok(text) => v["body"] = json!(text),
                Err(_) => {
                    v["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(body))
                }
            }
        }
    }
    v
}
