//! What of a response is kept for the record: its headers, without those that carry or
//! set credentials ([`stored_headers`]), and a copy of its body up to
//! `max_response_bytes` ([`Capture`]). Past the cap the copy is dropped (the record will
//! say "completed, body not stored") while the live response keeps streaming.

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue};

use super::buffers::{Buffers, Held};
use crate::policy::RoutePolicy;

/// `Authentication-Info` (RFC 9110 §11.6.3): the server's answer to a successful
/// authentication, e.g. Digest's `nextnonce` and `rspauth`: a credential for this caller.
pub const AUTHENTICATION_INFO: HeaderName = HeaderName::from_static("authentication-info");
/// `Proxy-Authentication-Info` (RFC 9110 §11.7.3): the same, from a proxy.
pub const PROXY_AUTHENTICATION_INFO: HeaderName =
    HeaderName::from_static("proxy-authentication-info");

/// Headers that carry or set credentials: never stored, so never replayed to a repeat
/// and never at rest in a shared store (SPEC §1 "Stored responses").
pub static CREDENTIAL_HEADERS: [HeaderName; 7] = [
    header::SET_COOKIE,
    header::AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::WWW_AUTHENTICATE,
    AUTHENTICATION_INFO,
    PROXY_AUTHENTICATION_INFO,
];

/// The response headers a record keeps (hop-by-hop headers are already gone): every
/// end-to-end header but the credential ones and the route's `store_headers.exclude`,
/// or only those of `store_headers.include` (credential headers never). The caller of
/// the first execution still gets every header; replays get these.
pub fn stored_headers(headers: &HeaderMap, policy: &RoutePolicy) -> Vec<(HeaderName, HeaderValue)> {
    let rule = &policy.store_headers;
    let kept = |name: &HeaderName| {
        !CREDENTIAL_HEADERS.contains(name)
            && !rule.exclude.contains(name)
            && rule
                .include
                .as_ref()
                .is_none_or(|include| include.contains(name))
    };
    headers
        .iter()
        .filter(|(name, _)| kept(name))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// The copy of a response body for the record, up to `limit` bytes and within
/// `server.max_buffered_bytes` ([`Buffers`]): past either, the copy is dropped (the
/// record then says "completed, body not stored") while the response keeps streaming.
pub struct Capture {
    buf: BytesMut,
    limit: usize,
    overflowed: bool,
    buffers: Buffers,
    held: Held,
}

impl Capture {
    pub fn new(limit: usize, size_hint: Option<u64>, buffers: &Buffers) -> Capture {
        let mut overflowed = size_hint.is_some_and(|n| n > limit as u64);
        let capacity = size_hint.map_or(0, |n| n.min(limit as u64) as usize);
        let mut held = Held::default();
        if !overflowed && !buffers.cover(&mut held, capacity) {
            buffers.dropped.inc();
            overflowed = true;
        }
        Capture {
            buf: BytesMut::with_capacity(if overflowed { 0 } else { capacity }),
            limit,
            overflowed,
            buffers: buffers.clone(),
            held,
        }
    }

    pub fn push(&mut self, chunk: &Bytes) {
        if self.overflowed {
            return;
        }
        let len = self.buf.len() + chunk.len();
        if len > self.limit
            || !self
                .buffers
                .cover(&mut self.held, len.max(self.buf.capacity()))
        {
            if len <= self.limit {
                self.buffers.dropped.inc();
            }
            self.overflowed = true;
            self.buf = BytesMut::new();
            self.held = Held::default();
            return;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The body, or `None` when it exceeded the limit or the budget. Its share of the
    /// budget is given back now, not with the body: the memory store keeps a record's
    /// body for its whole `retention`, which must not hold the budget of bodies in
    /// flight (the store has its own bound, `store.memory.max_records`).
    pub fn finish(self) -> Option<Bytes> {
        (!self.overflowed).then(|| self.buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_never_kept_and_the_route_chooses_the_rest() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("set-cookie", "session=abc"),
            ("www-authenticate", "Bearer"),
            ("authorization", "Bearer x"),
            ("proxy-authenticate", "Basic"),
            ("proxy-authorization", "Basic y"),
            ("authentication-info", "nextnonce=\"n\", rspauth=\"r\""),
            ("proxy-authentication-info", "nextnonce=\"p\""),
            ("content-type", "application/json"),
            ("location", "/charges/1"),
            ("x-session-token", "t"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let names = |policy: &RoutePolicy| -> Vec<String> {
            stored_headers(&headers, policy)
                .into_iter()
                .map(|(n, _)| n.to_string())
                .collect()
        };
        let mut policy = crate::route::tests::policy("r", &[http::Method::POST], "/r", &["k"]);
        assert_eq!(
            names(&policy),
            ["content-type", "location", "x-session-token"]
        );
        policy.store_headers.exclude = vec![HeaderName::from_static("x-session-token")];
        assert_eq!(names(&policy), ["content-type", "location"]);
        policy.store_headers.include = Some(vec![header::LOCATION, header::SET_COOKIE]);
        assert_eq!(
            names(&policy),
            ["location"],
            "an allow-list never lets a credential through"
        );
    }

    #[test]
    fn keeps_body_under_limit_and_drops_it_over() {
        let any = Buffers::unbounded();
        let mut c = Capture::new(5, None, any);
        c.push(&Bytes::from_static(b"abc"));
        c.push(&Bytes::from_static(b"de"));
        assert_eq!(c.finish().unwrap(), "abcde");
        let mut c = Capture::new(5, None, any);
        c.push(&Bytes::from_static(b"abc"));
        c.push(&Bytes::from_static(b"def"));
        assert!(c.finish().is_none());
        assert!(Capture::new(5, Some(6), any).finish().is_none());
    }

    #[test]
    fn a_copy_past_the_budget_is_dropped_and_counted_and_finishing_gives_its_share_back() {
        let buffers = Buffers::new(8);
        let mut first = Capture::new(100, None, &buffers);
        first.push(&Bytes::from_static(b"abcdef"));
        let mut c = Capture::new(100, None, &buffers);
        c.push(&Bytes::from_static(b"abc"));
        assert!(c.finish().is_none(), "6 held by the first + 3 > 8");
        assert_eq!(buffers.dropped.get(), 1);
        let kept = first.finish().unwrap();
        let mut c = Capture::new(100, Some(8), &buffers);
        c.push(&Bytes::from_static(b"abcdefgh"));
        assert_eq!(
            c.finish().unwrap(),
            "abcdefgh",
            "a stored body holds nothing"
        );
        drop(kept);
    }
}
