//! Header names and values used on the hot path (built once, never parsed per request),
//! and the RFC 9110 §7.6.1 hop-by-hop rules.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// On a replay whose outcome came from the upstream's records (`on_unknown: reconcile`).
pub const IDEMPOTENT_RECONCILED: HeaderName = HeaderName::from_static("idempotent-reconciled");
pub const IDEMPOTENCY_DEGRADED: HeaderName = HeaderName::from_static("idempotency-degraded");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
pub const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

pub const TRUE: HeaderValue = HeaderValue::from_static("true");
pub const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");
pub const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// Connection-scoped headers that must not be forwarded (RFC 9110 §7.6.1), plus the
/// legacy `Keep-Alive`/`Proxy-Connection`. A `static`, not a `const`: every use of a
/// `const` array builds and drops the nine names again (measured: ~300 instructions per
/// request in `drop_in_place<[HeaderName; 9]>`).
static HOP_BY_HOP: [HeaderName; 9] = [
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

/// Whether `name` is one of [`HOP_BY_HOP`]: a match on the (lowercase) name, which
/// compiles to a length switch and one comparison, where scanning the array compares
/// `HeaderName`s one by one (measured: ~900 instructions per request more).
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    hop_by_hop(name.as_str())
}

/// [`is_hop_by_hop`], always inlined into the proxy's strip (an out-of-line call, once
/// the admin shared it, cost every request ~75 instructions).
#[inline(always)]
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Remove hop-by-hop headers, including every header the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names (no hashing) settles that, where
    // removing each of the nine would hash and probe nine times.
    if !headers.keys().any(|name| hop_by_hop(name.as_str())) {
        return;
    }
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
/// Built on the stack: one allocation per header value, none for formatting.
pub fn append_forwarded(headers: &mut HeaderMap, client: Option<IpAddr>) {
    let Some(ip) = client else { return };
    let mut ip_buf = [0u8; 48];
    let ip_text = format_ip(ip, &mut ip_buf);
    let xff = append_value(headers.get(&X_FORWARDED_FOR), &[ip_text]);
    if let Ok(value) = xff {
        headers.insert(X_FORWARDED_FOR, value);
    }
    let node: [&[u8]; 3] = match ip {
        IpAddr::V4(_) => [b"for=", ip_text, b""],
        IpAddr::V6(_) => [b"for=\"[", ip_text, b"]\""],
    };
    if let Ok(value) = append_value(headers.get(header::FORWARDED), &node) {
        headers.insert(header::FORWARDED, value);
    }
}

/// `ip` as text in `buf` (an IPv6 address takes at most 45 bytes). IPv4, the common
/// case, is written digit by digit: `Display` goes through the formatting machinery,
/// which cost more than the rest of building the upstream request.
fn format_ip(ip: IpAddr, buf: &mut [u8; 48]) -> &[u8] {
    use std::io::Write;
    if let IpAddr::V4(v4) = ip {
        let mut len = 0;
        for (i, octet) in v4.octets().into_iter().enumerate() {
            if i > 0 {
                buf[len] = b'.';
                len += 1;
            }
            if octet >= 100 {
                buf[len] = b'0' + octet / 100;
                len += 1;
            }
            if octet >= 10 {
                buf[len] = b'0' + octet / 10 % 10;
                len += 1;
            }
            buf[len] = b'0' + octet % 10;
            len += 1;
        }
        return &buf[..len];
    }
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{ip}");
    let len = cursor.position() as usize;
    &buf[..len]
}

/// `prev, parts…` (or just `parts…` without a previous value) as one header value.
fn append_value(
    prev: Option<&HeaderValue>,
    parts: &[&[u8]],
) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    let prev = prev.map(HeaderValue::as_bytes);
    let len = prev.map_or(0, |p| p.len() + 2) + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    if let Some(prev) = prev {
        out.extend_from_slice(prev);
        out.extend_from_slice(b", ");
    }
    for part in parts {
        out.extend_from_slice(part);
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(out))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_match_and_the_list_agree() {
        for name in &HOP_BY_HOP {
            assert!(is_hop_by_hop(name), "{name}");
        }
        for name in [
            "content-type",
            "te-x",
            "upgrades",
            "connection-id",
            "x-keep-alive",
        ] {
            assert!(!is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
    }

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
    fn formats_addresses_like_display() {
        let samples = [
            "0.0.0.0",
            "1.2.3.4",
            "10.20.30.40",
            "100.200.250.255",
            "127.0.0.1",
        ];
        for text in samples
            .into_iter()
            .chain(["::1", "2001:db8::8a2e:370:7334"])
        {
            let ip: IpAddr = text.parse().unwrap();
            let mut buf = [0u8; 48];
            assert_eq!(format_ip(ip, &mut buf), ip.to_string().as_bytes());
        }
        for octet in 0..=255u8 {
            let ip = IpAddr::from([octet, 0, 9, 255]);
            let mut buf = [0u8; 48];
            assert_eq!(format_ip(ip, &mut buf), ip.to_string().as_bytes());
        }
    }

    #[test]
    fn leaves_end_to_end_headers_alone() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
        h.insert(KEEP_ALIVE, HeaderValue::from_static("timeout=5"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
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
