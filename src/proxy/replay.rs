//! Answering a repeat from the stored outcome.

use bytes::Bytes;
use http::{header, Response, StatusCode};

use super::body::{full, ProxyBody};
use super::headers::{APPLICATION_JSON, IDEMPOTENT_REPLAYED, TRUE};
use crate::mcp::ToolCall;
use crate::store::StoredResponse;

/// The stored response, with its `body`, marked `Idempotent-Replayed: true`.
pub fn replay(stored: &StoredResponse, body: &Bytes) -> Response<ProxyBody> {
    let mut response = Response::new(full(body.clone()));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    headers.reserve(stored.headers.len() + 1);
    for (name, value) in &stored.headers {
        // The length is recomputed from the stored body.
        if name != header::CONTENT_LENGTH {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(IDEMPOTENT_REPLAYED, TRUE);
    response
}

/// The stored final response of an MCP `tools/call`, under the new request's JSON-RPC
/// id (as sent), as one `application/json` message with HTTP 200 — never with the first
/// session's `Mcp-Session-Id` (SPEC §8).
/// Its result is fitted to the caller's era (`resultType`).
pub fn replay_mcp(stored: &StoredResponse, body: &Bytes, call: &ToolCall) -> Response<ProxyBody> {
    let body = crate::mcp::answer::with_id(body, &call.id, call.modern);
    let mut response = replay(stored, &body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.remove(crate::mcp::message::MCP_SESSION_ID);
    headers.insert(header::CONTENT_TYPE, APPLICATION_JSON);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn replay_marks_and_restores_headers() {
        let stored = StoredResponse {
            status: 201,
            headers: vec![(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body: Some(Bytes::from_static(b"{}")),
        };
        let r = replay(&stored, stored.body.as_ref().unwrap());
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    }
}
