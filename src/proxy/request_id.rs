//! `X-Request-Id`: kept when the caller sent one, generated otherwise, and forwarded
//! upstream so one id ties the caller, idem's log line and the tool API together.

use std::cell::Cell;
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
    static PREFIX: OnceLock<[u8; 8]> = OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let mut hex = [0u8; 8];
        // 8 hex digits for 4 bytes.
        crate::fast_hex::encode_into(&rand::random::<u32>().to_be_bytes(), &mut hex);
        hex
    });
    // `<prefix>-<counter in hex, no leading zeros>`.
    let mut digits = [0u8; 16];
    // 16 hex digits for 8 bytes.
    crate::fast_hex::encode_into(&next_number().to_be_bytes(), &mut digits);
    let first = digits.iter().position(|&d| d != b'0').unwrap_or(15);
    let mut text = [0u8; 25];
    let len = 9 + 16 - first;
    text[..8].copy_from_slice(prefix);
    text[8] = b'-';
    text[9..len].copy_from_slice(&digits[first..]);
    let id = HeaderValue::from_bytes(&text[..len])
        .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
    headers.insert(X_REQUEST_ID, id.clone());
    id
}

/// Numbers handed out per thread in blocks taken from one process-wide counter: ids stay
/// unique, and the shared counter is touched once per block rather than by every
/// request on every core.
fn next_number() -> u64 {
    const BLOCK: u64 = 1024;
    static TAKEN: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    NEXT.with(|next| {
        let (mut n, mut end) = next.get();
        if n == end {
            n = TAKEN.fetch_add(BLOCK, Ordering::Relaxed);
            end = n + BLOCK;
        }
        next.set((n + 1, end));
        n
    })
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

    #[test]
    fn generated_ids_are_prefix_dash_hex_and_unique_across_threads() {
        let ids: Vec<String> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..3000)
                        .map(|_| ensure(&mut HeaderMap::new()).to_str().unwrap().to_owned())
                        .collect::<Vec<_>>()
                })
            })
            .flat_map(|t| t.join().unwrap())
            .collect();
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        for id in &ids {
            let (prefix, n) = id.split_once('-').unwrap();
            assert_eq!(prefix.len(), 8);
            assert_eq!(format!("{:x}", u64::from_str_radix(n, 16).unwrap()), n);
        }
    }
}
