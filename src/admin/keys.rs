//! `/v1/keys/{route}/{key}[?scope=…]`: which key a request names ([`target`]), and
//! inspect (`GET`, `&body=true` for the stored body) or release (`DELETE`) it (SPEC §6).
//! `POST …/resolve` is routed to `resolve.rs` from `admin/mod.rs`.
//! The key may be given as `?key=` instead (`/v1/keys/{route}?key=K`,
//! `/v1/keys/{route}/resolve?key=K`), for keys a browser cannot put in a path.

use std::time::Duration;

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;

use super::records::{any_store, describe, KeyRef};
use super::reply::{decode, error, json_response, no_content, param, AdminResponse};
use super::Admin;
use crate::key::StoreKey;
use crate::store::{Record, Store, StoreError};

/// The key a `/v1/keys/…` request names, and whether it asks to resolve it.
pub(super) struct Target {
    pub(super) at: KeyRef,
    /// The raw key and scope asked for (shown for a record still sealed).
    key: String,
    scope: String,
    with_body: bool,
    pub(super) resolving: bool,
}

/// Read the key from the path (or `?key=`), or the error to answer (boxed: an error
/// is the rare case, and a response is larger than the target).
pub(super) fn target(req: &Request<Incoming>) -> Result<Target, Box<AdminResponse>> {
    let path = req.uri().path();
    let query = req.uri().query();
    let rest = &path["/v1/keys/".len()..];
    let post = req.method() == Method::POST;
    // `?key=` names the key instead of the path: a key `.` or `..` cannot be a path
    // segment in a browser (the URL standard resolves it away even percent-encoded), so
    // the console sends every key this way.
    let (route, key, resolving) = match (rest.split_once('/'), param(query, "key")) {
        (None, Some(key)) => (decode(rest), key, false),
        (Some((route, "resolve")), Some(key)) if post => (decode(route), key, true),
        (Some(_), Some(_)) => {
            let message = "give the key in the path or as ?key=, not both: \
                           /v1/keys/{route}?key=K, POST /v1/keys/{route}/resolve?key=K";
            return Err(Box::new(error(StatusCode::BAD_REQUEST, message)));
        }
        (None, None) => {
            let refused = error(StatusCode::NOT_FOUND, "use /v1/keys/{route}/{key}");
            return Err(Box::new(refused));
        }
        // A key is URL-encoded in the path, so a literal `/resolve` ending is the action.
        (Some((route, key)), None) => match key.strip_suffix("/resolve") {
            Some(key) if post => (decode(route), decode(key), true),
            _ => (decode(route), decode(key), false),
        },
    };
    let scope = param(query, "scope").unwrap_or_default();
    let with_body = param(query, "body").is_some_and(|v| v == "true");
    let at = KeyRef {
        store_key: StoreKey::new(&route, &scope, &key),
        route,
    };
    Ok(Target {
        at,
        key,
        scope,
        with_body,
        resolving,
    })
}

/// Inspect (`GET`) or release (`DELETE`) the key `target` names.
pub(super) async fn handle(admin: &Admin, target: Target, method: &Method) -> AdminResponse {
    let Target {
        at,
        key,
        scope,
        with_body,
        ..
    } = target;
    let stores = &admin.stores;
    match *method {
        Method::GET => match any_store(stores, |s| read_with_life(s, &at.store_key)).await {
            Ok(((Some((mut record, life)), now), _)) => {
                // The store opened it when a listed key does; still sealed, it is
                // shown as `sealed_with` (the key's id, never its material), and its
                // raw key and scope are the ones asked for (the store key is their hash).
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

/// As [`Store::get_at`], with the record's own remaining life (its end, beyond an in-progress
/// record's lease).
async fn read_with_life(
    store: &Store,
    key: &StoreKey,
) -> Result<(Option<(Record, Duration)>, u64), StoreError> {
    let record = store.get_with_life(key).await?;
    Ok((record, store.clock_ms().await?))
}
