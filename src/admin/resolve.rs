//! `POST /v1/keys/{route}/{key}/resolve[?scope=…]`: an operator records what became of
//! an unknown outcome (SPEC §1 "Unknown outcomes").
//!
//! Fenced: the record read here is replaced only if it still carries the token read and
//! its lease has still ended (`Store::take_over`). A record that is not an unknown
//! outcome (completed, in flight, already resolved), or that changed between the read
//! and the write (a repeat took it over, another operator resolved it), is a 409 and
//! nothing changes.
//!
//! The body is JSON, sent as `Content-Type: application/json` — which a page on another
//! site cannot send without a CORS preflight this listener never grants:
//! - `{"outcome": "completed", "status": 201, "headers": {"content-type": "…"},
//!   "body": "…"}` (or `body_base64` for bytes): replayed to every repeat from then on,
//!   kept for the route's `retention`;
//! - `{"outcome": "not_executed"}`: the next repeat is forwarded once, with the same
//!   upstream key.

use std::collections::BTreeMap;

use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use super::records::{any_store, describe, KeyRef};
use super::reply::{error, json_response, problem, refuse_unless_json, AdminResponse};
use super::Admin;
use crate::proxy::capture::CREDENTIAL_HEADERS;
use crate::proxy::headers::is_hop_by_hop;
use crate::store::{Phase, Settled, StoredResponse};
use crate::vocabulary::Resolution;

/// Room in a resolution for its JSON around the body: outcome, status, headers.
const ENVELOPE_BYTES: usize = 64 << 10;

/// The largest resolution read for a route whose responses are kept up to `max_body`
/// bytes: that body twice over (base64 adds a third; JSON escapes of quotes and line
/// breaks double what they escape) plus the envelope. Read with this cap, not read
/// whole and measured after: a client cannot make idem buffer more than the route
/// could ever store. A text body that escapes to more fits as `body_base64`.
fn read_limit(max_body: usize) -> usize {
    max_body.saturating_mul(2).saturating_add(ENVELOPE_BYTES)
}

/// Whether a resolution may not set `name`: connection-scoped headers (the proxy's own
/// list), the length (computed when replaying), and those carrying credentials (never
/// stored, SPEC §1 "Stored responses": the capture's own list).
fn refused_header(name: &HeaderName) -> bool {
    is_hop_by_hop(name) || name == header::CONTENT_LENGTH || CREDENTIAL_HEADERS.contains(name)
}

const SHAPE: &str = r#"send {"outcome": "completed", "status": 201, "headers": {...}, "body": "..."} or {"outcome": "not_executed"}"#;

#[derive(Debug, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
enum Asked {
    Completed {
        status: u16,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        body: Option<String>,
        body_base64: Option<String>,
    },
    NotExecuted {},
}

pub(super) async fn resolve(admin: &Admin, at: &KeyRef, req: Request<Incoming>) -> AdminResponse {
    if let Some(refused) = refuse_unless_json(&req, "resolution") {
        return refused;
    }
    let routes = admin.control.routes();
    let Some(policy) = routes.iter().find(|r| r.name == at.route) else {
        let message = format!("no route named {:?} in the loaded configuration", at.route);
        return error(StatusCode::NOT_FOUND, message);
    };
    let limit = read_limit(policy.max_response_bytes);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let too_large = || {
        let detail = format!(
            "The resolution is larger than {limit} bytes (twice route {:?}'s \
             max_response_bytes, plus 64 KiB), or was cut off, and nothing was recorded. A \
             body larger than max_response_bytes cannot be stored; a text body that grows \
             past the cap when escaped as JSON fits when sent as body_base64.",
            at.route
        );
        let title = "Resolution too large";
        problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "resolution_too_large",
            title,
            detail,
        )
    };
    // Refused before a byte of it is read when its length says so.
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let Ok(body) = Limited::new(req.into_body(), limit).collect().await else {
        return too_large();
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
    let outcome = match asked {
        Asked::NotExecuted {} => None,
        Asked::Completed {
            status,
            headers,
            body,
            body_base64,
        } => {
            match response(
                status,
                headers,
                body,
                body_base64,
                policy.max_response_bytes,
            ) {
                Ok(response) => Some(response),
                Err((status, message)) => return error(status, message),
            }
        }
    };

    let read = any_store(&admin.stores, |s| s.get_at(&at.store_key)).await;
    let (record, now, store) = match read {
        Ok((Some((record, now)), store)) => (record, now, store),
        Ok((None, _)) => return error(StatusCode::NOT_FOUND, "no such key"),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    // Judged on the store's clock; the fenced write judges again on it.
    let phase = record.phase(now);
    if phase != Phase::Unknown {
        return conflict(phase.as_str(), why_not_unknown(phase));
    }
    // Still sealed (no listed key opens it): its key and scope are unknown here, and a
    // resolution written from it would lose them. Resolved where its key is listed.
    if let Some(why) = store.sealing().why_unreadable(&record) {
        let body = json!({
            "error": format!("the record does not open on this replica ({why}): resolve it where its key is listed"),
            "state": "record_unreadable",
        });
        return json_response(StatusCode::CONFLICT, &body);
    }
    let (settled, counted) = match outcome {
        Some(response) => {
            let settled = record.settled_with(Settled::Resolved, response, policy.retention);
            (settled, Resolution::Completed)
        }
        None => (record.not_executed(), Resolution::NotExecuted),
    };
    let written = store.take_over(
        &at.store_key,
        &record.token,
        &settled,
        policy.retention,
        None,
    );
    match written.await {
        Ok(true) => {
            admin.control.metrics().resolved(&at.route, counted);
            let outcome: &str = counted.into();
            tracing::info!(route = %at.route, key = %at.store_key, outcome, "unknown outcome resolved by an operator");
            json_response(StatusCode::OK, &describe(&settled, false, now, None))
        }
        Ok(false) => conflict(
            "changed",
            "the record changed while it was being resolved (a repeat took it over, or \
             someone resolved it first); nothing was changed: read it again",
        ),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the resolution may or may not have been recorded ({e}): GET the key to see"),
        ),
    }
}

/// 409 with the record's `state` (a phase, or `changed` after a refused write).
fn conflict(state: &str, why: &str) -> AdminResponse {
    let body = json!({ "error": format!("not an unknown outcome: {why}"), "state": state });
    json_response(StatusCode::CONFLICT, &body)
}

fn why_not_unknown(phase: Phase) -> &'static str {
    match phase {
        Phase::Completed => "it is completed (its outcome is recorded)",
        Phase::InFlight => "its lease is live: the call is still in flight",
        Phase::NotExecuted => "it was resolved as not executed; the next repeat forwards it",
        Phase::Unknown => "it changed",
    }
}

/// The stored response an operator described, checked like one idem would store.
fn response(
    status: u16,
    headers: BTreeMap<String, String>,
    body: Option<String>,
    body_base64: Option<String>,
    max_body: usize,
) -> Result<StoredResponse, (StatusCode, String)> {
    let bad = |message: String| (StatusCode::BAD_REQUEST, message);
    if !(200..=599).contains(&status) {
        return Err(bad(format!("status {status}: a final response is 200-599")));
    }
    let body = match (body, body_base64) {
        (Some(_), Some(_)) => return Err(bad("give body or body_base64, not both".to_owned())),
        (Some(text), None) => Bytes::from(text),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map(Bytes::from)
            .map_err(|e| bad(format!("body_base64 is not base64: {e}")))?,
        (None, None) => Bytes::new(),
    };
    if body.len() > max_body {
        let message = format!(
            "the body ({} bytes) is larger than the route's max_response_bytes ({max_body})",
            body.len()
        );
        return Err((StatusCode::PAYLOAD_TOO_LARGE, message));
    }
    let mut stored = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            bad(format!(
                "header name {name:?} is not a valid HTTP header name"
            ))
        })?;
        if refused_header(&parsed) {
            return Err(bad(format!(
                "header {name:?} cannot be recorded: it is connection-scoped, computed when \
                 replaying, or carries credentials"
            )));
        }
        let value = HeaderValue::from_str(&value).map_err(|_| {
            bad(format!(
                "the value of header {name:?} is not a valid header value"
            ))
        })?;
        stored.push((parsed, value));
    }
    Ok(StoredResponse {
        status,
        headers: stored,
        body: Some(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Asked, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn shapes_are_strict() {
        assert!(matches!(
            parse(r#"{"outcome":"not_executed"}"#),
            Ok(Asked::NotExecuted {})
        ));
        assert!(matches!(
            parse(r#"{"outcome":"completed","status":201,"body":"{}"}"#),
            Ok(Asked::Completed { status: 201, .. })
        ));
        for bad in [
            r#"{"outcome":"done"}"#,
            r#"{"outcome":"completed"}"#,
            r#"{"outcome":"completed","status":201,"bdy":"x"}"#,
            r#"{"outcome":"not_executed","status":201}"#,
            r#"{"status":201}"#,
            "not json",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn responses_are_checked_like_stored_ones() {
        let headers = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ok = response(
            201,
            headers(&[("Content-Type", "application/json")]),
            Some("{}".into()),
            None,
            10,
        )
        .unwrap();
        assert_eq!((ok.status, ok.headers[0].0.as_str()), (201, "content-type"));
        assert_eq!(ok.body.as_deref(), Some(&b"{}"[..]));
        let bytes = response(200, headers(&[]), None, Some("AP8=".into()), 10).unwrap();
        assert_eq!(bytes.body.as_deref(), Some(&[0u8, 255][..]));
        assert_eq!(
            response(200, headers(&[]), None, None, 0)
                .unwrap()
                .body
                .as_deref(),
            Some(&b""[..])
        );
        for (status, h, body, b64, max) in [
            (199, headers(&[]), None, None, 10),
            (600, headers(&[]), None, None, 10),
            (200, headers(&[("set-cookie", "a=b")]), None, None, 10),
            (
                200,
                headers(&[("authentication-info", "rspauth=\"x\"")]),
                None,
                None,
                10,
            ),
            (200, headers(&[("content-length", "3")]), None, None, 10),
            (200, headers(&[("bad name", "v")]), None, None, 10),
            (200, headers(&[("x", "a\nb")]), None, None, 10),
            (200, headers(&[]), Some("x".into()), Some("eA==".into()), 10),
            (200, headers(&[]), None, Some("***".into()), 10),
        ] {
            assert_eq!(
                response(status, h, body, b64, max).unwrap_err().0,
                StatusCode::BAD_REQUEST
            );
        }
        let too_big = response(200, headers(&[]), Some("12345".into()), None, 4).unwrap_err();
        assert_eq!(too_big.0, StatusCode::PAYLOAD_TOO_LARGE);
    }
}
