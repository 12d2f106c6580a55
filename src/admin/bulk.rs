//! `POST /v1/unknown/resolve`: settle every unknown outcome of a route as not executed
//! at once, after an outage (SPEC §1 "Unknown outcomes", bulk resolution).
//!
//! ```json
//! {"route": "charge", "outcome": "not_executed",
//!  "sent_after": "2026-12-05T10:00:00Z", "sent_before": "2026-12-05T10:20:00Z",
//!  "dry_run": true}
//! → {"matched": 12, "resolved": 0, "skipped": 0, "dry_run": true}
//! ```
//!
//! Every unknown outcome of the route is read (a cost that follows the unsettled
//! intents, see `Store::list_in_progress`). Each match gets the same fenced write as a single resolve: replaced only if it still
//! carries the token read and its lease has still ended on the store's clock. So an
//! intent whose lease is live is never matched, and one that a repeat took over or an
//! operator resolved in the meantime is `skipped`, unchanged. Only `not_executed`: a
//! recorded response is one intent's, never a whole outage's.

use std::time::{Duration, UNIX_EPOCH};

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use super::records;
use super::reply::{error, json_response, refuse_unless_json, AdminResponse};
use super::Admin;
use crate::store::Phase;
use crate::vocabulary::Resolution;

/// A bulk resolution is a few short fields.
const LIMIT: usize = 4 << 10;

const SHAPE: &str = r#"send {"route": "R", "outcome": "not_executed", "sent_after": "RFC 3339 time", "sent_before": "…", "dry_run": true}"#;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    route: String,
    outcome: String,
    sent_after: Option<String>,
    sent_before: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn millis(text: &str, field: &str) -> Result<u64, String> {
    let at = humantime::parse_rfc3339_weak(text.trim())
        .map_err(|e| format!("{field} {text:?} is not an RFC 3339 time ({e})"))?;
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Ok(since.as_millis() as u64)
}

pub(super) async fn resolve_all(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    if let Some(refused) = refuse_unless_json(&req, "resolution") {
        return refused;
    }
    let Ok(body) = Limited::new(req.into_body(), LIMIT).collect().await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a bulk resolution is under 4 KiB",
        );
    };
    let asked = match serde_json::from_slice::<Asked>(&body.to_bytes()) {
        Ok(asked) => asked,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("bad resolution: {e}; {SHAPE}"),
            )
        }
    };
    if asked.outcome != "not_executed" {
        let message = format!(
            "outcome {:?}: only not_executed can be recorded in bulk; record a completed \
             call with its own response, one key at a time",
            asked.outcome
        );
        return error(StatusCode::BAD_REQUEST, message);
    }
    let routes = admin.control.routes();
    let Some(policy) = routes.iter().find(|r| r.name == asked.route) else {
        let message = format!(
            "no route named {:?} in the loaded configuration",
            asked.route
        );
        return error(StatusCode::NOT_FOUND, message);
    };
    let bound = |text: &Option<String>, field| text.as_deref().map(|t| millis(t, field));
    let (after, before) = match (
        bound(&asked.sent_after, "sent_after").transpose(),
        bound(&asked.sent_before, "sent_before").transpose(),
    ) {
        (Ok(after), Ok(before)) => (after, before),
        (Err(e), _) | (_, Err(e)) => return error(StatusCode::BAD_REQUEST, e),
    };

    let ((records, now), store) = match records::read_unsettled(&admin.stores, usize::MAX).await {
        Ok(read) => read,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let matched: Vec<_> = records
        .iter()
        .filter(|(_, r)| r.route == asked.route && r.phase(now) == Phase::Unknown)
        .filter(|(_, r)| after.is_none_or(|t| r.sent_at_ms >= t))
        .filter(|(_, r)| before.is_none_or(|t| r.sent_at_ms < t))
        .collect();
    let (mut resolved, mut skipped) = (0, 0);
    if !asked.dry_run {
        for (key, record) in &matched {
            // Still sealed (no listed key opens it): left as it is, see `resolve.rs`.
            if record.sealed.is_some() {
                skipped += 1;
                continue;
            }
            let settled = record.not_executed();
            match store
                .take_over(key, &record.token, &settled, policy.retention, None)
                .await
            {
                Ok(true) => {
                    resolved += 1;
                    let metrics = admin.control.metrics();
                    metrics.resolved(&asked.route, Resolution::NotExecuted);
                }
                // Taken over or resolved since it was read: left as it is.
                Ok(false) => skipped += 1,
                Err(e) => {
                    let body = json!({
                        "error": format!("the store failed part way ({e}); run it again: what is settled stays settled"),
                        "matched": matched.len(), "resolved": resolved, "skipped": skipped,
                    });
                    return json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
                }
            }
        }
        tracing::info!(route = %asked.route, resolved, skipped, "unknown outcomes resolved in bulk as not executed");
        super::counting::recount(admin).await;
    }
    let body = json!({
        "matched": matched.len(),
        "resolved": resolved,
        "skipped": skipped,
        "dry_run": asked.dry_run,
    });
    json_response(StatusCode::OK, &body)
}
