//! Canonical JSON and the request-body view: any bytes. Never a panic; when the body
//! has a canonical form it is valid JSON of the same value, and canonical again
//! (idempotent), so two agents re-serialising the same arguments get the same bytes.
#![no_main]

use bytes::Bytes;
use idem::body::BodyView;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = BodyView::new(Bytes::copy_from_slice(data));
    let json = body.json().cloned();
    let exact = body.is_exact();
    let (is_canonical, identity) = body.identity_bytes();
    let identity = identity.to_vec();
    match body.canonical() {
        Some(canonical) => {
            assert!(is_canonical && exact);
            assert_eq!(identity, canonical);
            let value = json.expect("canonical implies JSON");
            let reparsed: serde_json::Value =
                serde_json::from_slice(canonical).expect("canonical JSON parses");
            assert_eq!(reparsed, value, "canonical JSON keeps the value");
            assert_eq!(idem::canonical::to_vec(&reparsed), canonical, "idempotent");
            let again = BodyView::new(Bytes::copy_from_slice(canonical));
            assert_eq!(
                again.canonical(),
                Some(canonical),
                "a canonical body is its own canonical form"
            );
        }
        None => {
            assert!(!is_canonical);
            assert_eq!(identity, data, "falls back to the raw bytes");
            assert!(json.is_none() || !exact);
        }
    }
});
