//! Building the upstream request (the client itself is [`crate::upstream`]).
//! The destination is always the configured upstream: the request's Host header or an
//! absolute-form URI never chooses it.

use std::net::IpAddr;

use http::uri::{PathAndQuery, Uri};
use http::{header, request, HeaderValue, Request};

use super::body::UpstreamBody;
use super::headers::{append_forwarded, strip_hop_by_hop};

/// Rewrite the incoming request for the upstream: the caller's path and query (the
/// destination is `base`, whatever the request's URI or Host say), hop-by-hop headers removed, `X-Forwarded-For`/`Forwarded`
/// appended, and (for protected routes) the idempotency key header set.
pub fn upstream_request(
    base: &Uri,
    mut parts: request::Parts,
    body: UpstreamBody,
    client_ip: Option<IpAddr>,
    key_header: Option<(&http::HeaderName, HeaderValue)>,
) -> Request<UpstreamBody> {
    // Origin-form (`/path?query`): the connection already goes to `base`.
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    parts.uri = Uri::from(path);
    // HTTP/2 callers carry no Host header (`:authority` instead); the upstream speaks
    // HTTP/1.1, which requires one. A caller's Host is passed on as it came.
    if !parts.headers.contains_key(header::HOST) {
        if let Some(value) = base
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            parts.headers.insert(header::HOST, value);
        }
    }
    parts.version = http::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    append_forwarded(&mut parts.headers, client_ip);
    if let Some((name, value)) = key_header {
        parts.headers.insert(name.clone(), value);
    }
    Request::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Either, Full};

    #[test]
    fn absolute_uri_and_host_never_choose_the_destination() {
        let base: Uri = "http://127.0.0.1:3000".parse().unwrap();
        let req = Request::builder()
            .uri("http://evil.example:80/charge?x=1")
            .header("host", "evil.example")
            .header("connection", "keep-alive")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let out = upstream_request(&base, parts, Either::Left(Full::default()), None, None);
        assert_eq!(out.uri(), "/charge?x=1");
        // Sent on a connection to `base`: the Host header is only passed on.
        assert_eq!(out.headers()["host"], "evil.example");
        assert!(out.headers().get("connection").is_none());
    }
}
