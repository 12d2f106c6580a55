//! `/v1/keys/{route}/{key}[?scope=…]`: inspect (`GET`, `&body=true` for the stored body),
//! release (`DELETE`) or resolve (`POST …/resolve`, `resolve.rs`) one key (SPEC §6, §1).
//! The key may be given as `?key=` instead (`/v1/keys/{route}?key=K`,
//! `/v1/keys/{route}/resolve?key=K`), for keys a browser cannot put in a path.

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::reply::{decode, error, json_response, no_content, param, AdminResponse};
use super::{resolve, Admin};
use crate::key::StoreKey;
use crate::store::{Record, RecordState, Store, StoreError};

/// One key named by the path and `?scope=`.
pub(super) struct KeyRef {
    pub(super) route: String,
    pub(super) store_key: StoreKey,
}

pub(super) async fn handle(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let rest = &path["/v1/keys/".len()..];
    let post = req.method() == Method::POST;
    // `?key=` names the key instead of the path: a key `.` or `..` cannot be a path
    // segment in a browser (the URL standard resolves it away even percent-encoded), so
    // the console sends every key this way.
    let (route, key, resolving) = match (rest.split_once('/'), param(query.as_deref(), "key")) {
        (None, Some(key)) => (decode(rest), key, false),
        (Some((route, "resolve")), Some(key)) if post => (decode(route), key, true),
        (Some(_), Some(_)) => {
            let message = "give the key in the path or as ?key=, not both: \
                           /v1/keys/{route}?key=K, POST /v1/keys/{route}/resolve?key=K";
            return error(StatusCode::BAD_REQUEST, message);
        }
        (None, None) => return error(StatusCode::NOT_FOUND, "use /v1/keys/{route}/{key}"),
        // A key is URL-encoded in the path, so a literal `/resolve` ending is the action.
        (Some((route, key)), None) => match key.strip_suffix("/resolve") {
            Some(key) if post => (decode(route), decode(key), true),
            _ => (decode(route), decode(key), false),
        },
    };
    let scope = param(query.as_deref(), "scope").unwrap_or_default();
    let with_body = param(query.as_deref(), "body").is_some_and(|v| v == "true");
    let at = KeyRef {
        store_key: StoreKey::new(&route, &scope, &key),
        route,
    };
    let stores = &admin.stores;
    match *req.method() {
        Method::POST if resolving => resolve::resolve(admin, &at, req).await,
        Method::GET => match any_store(stores, |s| read_with_life(s, &at.store_key)).await {
            Ok(((Some((mut record, life)), now), _)) => {
                // A sealed response is shown opened when a listed key opens it, else
                // as `sealed` (the key's id, never its material).
                if let Some(keyring) = admin.control.keyring() {
                    let _ = keyring.open(&mut record, &at.store_key);
                }
                // Still sealed, its raw key and scope with it: they are the ones asked
                // for (the store key is their hash).
                if record.sealed.is_some() && record.key.is_empty() {
                    (record.key, record.scope) = (key, scope);
                }
                json_response(
                    StatusCode::OK,
                    &describe(&record, with_body, now, Some(life)),
                )
            }
            Ok(((None, _), _)) => error(StatusCode::NOT_FOUND, "no such key"),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        },
        Method::DELETE => match any_store(stores, |s| s.delete(&at.store_key)).await {
            Ok((true, _)) => no_content(),
            Ok((false, _)) => error(StatusCode::NOT_FOUND, "no such key"),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        },
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "use GET or DELETE on /v1/keys/{route}/{key}, or POST /v1/keys/{route}/{key}/resolve",
        ),
    }
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

/// The record under `key` and the store's clock, which judges its lease (a second round
/// trip: the admin reads without a reservation, whose reply carries the clock).
pub(super) async fn read_at(
    store: &Store,
    key: &StoreKey,
) -> Result<(Option<Record>, u64), StoreError> {
    let record = store.get(key).await?;
    Ok((record, store.clock_ms().await?))
}

/// As [`read_at`], with the record's own remaining life (its end, beyond an in-progress
/// record's lease).
async fn read_with_life(
    store: &Store,
    key: &StoreKey,
) -> Result<(Option<(Record, Duration)>, u64), StoreError> {
    let record = store.get_with_life(key).await?;
    Ok((record, store.clock_ms().await?))
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
