//! Answering a repeat from the stored outcome.

use bytes::Bytes;
use http::{header, HeaderName, Response, StatusCode};

use super::body::{full, ProxyBody};
use super::capture::CREDENTIAL_HEADERS;
use super::headers::{APPLICATION_JSON, IDEMPOTENT_REPLAYED, TRUE};
use crate::mcp::ToolCall;
use crate::store::StoredResponse;

/// The stored response, with its `body`, marked `Idempotent-Replayed: true`.
///
/// Never with a header idem does not store (the credential headers and the route's
/// `store_headers.exclude`), whatever the record holds: idem never writes them, so a
/// record that has them was written by someone else (issue 46 §1, a second line of
/// defence behind sealing).
pub fn replay(
    stored: &StoredResponse,
    body: &Bytes,
    exclude: &[HeaderName],
) -> Response<ProxyBody> {
    let mut response = Response::new(full(body.clone()));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    headers.reserve(stored.headers.len() + 1);
    for (name, value) in &stored.headers {
        // The length is recomputed from the stored body.
        if name != header::CONTENT_LENGTH
            && !CREDENTIAL_HEADERS.contains(name)
            && !exclude.contains(name)
        {
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
pub fn replay_mcp(
    stored: &StoredResponse,
    body: &Bytes,
    call: &ToolCall,
    exclude: &[HeaderName],
) -> Response<ProxyBody> {
    let body = crate::mcp::answer::with_id(body, &call.id, call.modern);
    let mut response = replay(stored, &body, exclude);
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
            headers: vec![
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
                (header::SET_COOKIE, HeaderValue::from_static("sid=planted")),
                (
                    HeaderName::from_static("x-session-token"),
                    HeaderValue::from_static("t"),
                ),
            ],
            body: Some(Bytes::from_static(b"{}")),
        };
        let exclude = [HeaderName::from_static("x-session-token")];
        let r = replay(&stored, stored.body.as_ref().unwrap(), &exclude);
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        assert!(
            r.headers().get(header::SET_COOKIE).is_none(),
            "never replayed"
        );
        assert!(r.headers().get("x-session-token").is_none(), "excluded");
    }
}
