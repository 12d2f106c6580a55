//! `X-Request-Id`: kept when the caller sent one, generated otherwise, and forwarded
//! upstream so one id ties the caller, idem's log line and the tool API together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderName, HeaderValue};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id, inserting a new one (`<process prefix>-<counter>`) when absent.
pub fn ensure(headers: &mut HeaderMap) -> HeaderValue {
    if let Some(id) = headers
        .get(&X_REQUEST_ID)
        .filter(|v| !v.is_empty() && v.len() <= 200)
    {
        return id.clone();
    }
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| format!("{:08x}", rand::random::<u32>()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let id = HeaderValue::try_from(format!("{prefix}-{n:x}"))
        .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
    headers.insert(X_REQUEST_ID, id.clone());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_given_id_and_generates_distinct_ones() {
        let mut h = HeaderMap::new();
        h.insert(X_REQUEST_ID, HeaderValue::from_static("abc"));
        assert_eq!(ensure(&mut h), "abc");
        let (mut a, mut b) = (HeaderMap::new(), HeaderMap::new());
        let (ia, ib) = (ensure(&mut a), ensure(&mut b));
        assert_ne!(ia, ib);
        assert_eq!(a[X_REQUEST_ID], ia);
    }
}
