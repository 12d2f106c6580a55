//! Header names and values used on the hot path (built once, never parsed per request),
//! and the RFC 9110 §7.6.1 hop-by-hop rules.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
pub const IDEMPOTENCY_DEGRADED: HeaderName = HeaderName::from_static("idempotency-degraded");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
pub const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

pub const TRUE: HeaderValue = HeaderValue::from_static("true");
pub const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// Connection-scoped headers that must not be forwarded (RFC 9110 §7.6.1), plus the
/// legacy `Keep-Alive`/`Proxy-Connection`.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Remove hop-by-hop headers, including every header the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Append the client address to `X-Forwarded-For` and `Forwarded` (RFC 7239).
pub fn append_forwarded(headers: &mut HeaderMap, client: Option<IpAddr>) {
    let Some(ip) = client else { return };
    let xff = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&xff) {
        headers.insert(X_FORWARDED_FOR, value);
    }
    let node = match ip {
        IpAddr::V4(v4) => format!("for={v4}"),
        IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
    };
    let forwarded = match headers.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {node}"),
        None => node,
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded) {
        headers.insert(header::FORWARDED, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::CONTENT_TYPE));
    }

    #[test]
    fn appends_forwarded_headers() {
        let mut h = HeaderMap::new();
        h.insert(X_FORWARDED_FOR, HeaderValue::from_static("10.0.0.1"));
        append_forwarded(&mut h, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(h[X_FORWARDED_FOR], "10.0.0.1, 127.0.0.1");
        assert_eq!(h[header::FORWARDED], "for=127.0.0.1");
        append_forwarded(&mut h, Some("::1".parse().unwrap()));
        assert_eq!(h[header::FORWARDED], "for=127.0.0.1, for=\"[::1]\"");
    }
}
