//! The upstream side: a pooled hyper-util client, and building the upstream request.
//! The destination is always the configured upstream: the request's Host header or an
//! absolute-form URI never chooses it.

use std::net::IpAddr;

use http::uri::{PathAndQuery, Uri};
use http::{request, HeaderValue, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::body::UpstreamBody;
use super::headers::{append_forwarded, strip_hop_by_hop};
use crate::config::UpstreamConfig;

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpstreamBody>;

/// Build the pooled client used for every upstream call: plain HTTP, or HTTPS verified
/// against the system's trust store (`SSL_CERT_FILE`/`SSL_CERT_DIR` are honoured).
pub fn client(cfg: &UpstreamConfig) -> UpstreamClient {
    crate::tls::install_crypto_provider();
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(cfg.connect_timeout));
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(crate::tls::client_config())
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .build(connector)
}

/// Rewrite the incoming request for the upstream: its scheme and authority, the
/// caller's path and query, hop-by-hop headers removed, `X-Forwarded-For`/`Forwarded`
/// appended, and (for protected routes) the idempotency key header set.
pub fn upstream_request(
    base: &Uri,
    mut parts: request::Parts,
    body: UpstreamBody,
    client_ip: Option<IpAddr>,
    key_header: Option<(&http::HeaderName, HeaderValue)>,
) -> Request<UpstreamBody> {
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut uri = http::uri::Parts::default();
    uri.scheme = base.scheme().cloned();
    uri.authority = base.authority().cloned();
    uri.path_and_query = Some(path);
    parts.uri = Uri::from_parts(uri).unwrap_or_else(|_| base.clone());
    // HTTP/2 callers carry no Host header; the upstream speaks HTTP/1.1.
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
        assert_eq!(out.uri(), "http://127.0.0.1:3000/charge?x=1");
        assert!(out.headers().get("connection").is_none());
    }
}
