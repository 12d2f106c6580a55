//! Building admin responses, and reading query strings.
//!
//! The guard's refusals and a resolution past its cap are `application/problem+json`
//! (RFC 9457) with a stable `code`, as the proxy's own errors (SPEC §5): they are what a
//! client sees first when something stands between it and the records, so they say why
//! and what to do. The API's other errors are `{"error": message}`, which the console
//! and `idem keys` have always read.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use percent_encoding::percent_decode_str;
use serde_json::json;

use crate::proxy::problem::Problem;

pub(super) type AdminResponse = Response<Full<Bytes>>;

pub(super) fn text(status: StatusCode, body: impl Into<Bytes>) -> AdminResponse {
    with_type(status, body.into(), "text/plain; charset=utf-8")
}

pub(super) fn json_response(status: StatusCode, value: &serde_json::Value) -> AdminResponse {
    with_type(status, Bytes::from(value.to_string()), "application/json")
}

/// 415 unless the request says its body is JSON: a page on another site cannot send
/// `Content-Type: application/json` without a CORS preflight this listener never grants.
pub(super) fn refuse_unless_json<B>(req: &http::Request<B>, what: &str) -> Option<AdminResponse> {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    let message = format!("send the {what} as Content-Type: application/json");
    (!json).then(|| error(StatusCode::UNSUPPORTED_MEDIA_TYPE, message))
}

/// `{"error": message}` with `status`.
pub(super) fn error(status: StatusCode, message: impl std::fmt::Display) -> AdminResponse {
    json_response(status, &json!({ "error": message.to_string() }))
}

/// An RFC 9457 problem document with `status`, a stable `code` and a `detail` that
/// says what to do next.
pub(super) fn problem(
    status: StatusCode,
    code: &'static str,
    title: &'static str,
    detail: String,
) -> AdminResponse {
    let body = Problem::new(status, code, title, detail).body();
    with_type(status, body, "application/problem+json")
}

pub(super) fn no_content() -> AdminResponse {
    let mut r = Response::new(Full::default());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}

fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> AdminResponse {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A percent-encoded path segment or query value, decoded.
pub(super) fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The decoded value of query parameter `name` (`+` is a space), if present.
pub(super) fn param(query: Option<&str>, name: &str) -> Option<String> {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then(|| decode(&v.replace('+', " ")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_decoded() {
        let q = Some("scope=a%2Fb+c&body=true&flag");
        assert_eq!(param(q, "scope").as_deref(), Some("a/b c"));
        assert_eq!(param(q, "flag").as_deref(), Some(""));
        assert_eq!(param(q, "missing"), None);
        assert_eq!(param(None, "scope"), None);
    }
}
