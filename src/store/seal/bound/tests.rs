//! The seal binds the fields the decision reads; records of format 1 still open.

use bytes::{BufMut, Bytes, BytesMut};
use ring::aead::{Aad, Nonce, NONCE_LEN};

use super::super::tests::{completed, keyring};
use super::super::{plaintext, Keyring, Sealed};
use super::*;
use crate::store::record::{decode, encode};

fn store_key() -> StoreKey {
    StoreKey::new("charge", "", "k")
}

/// `bytes` with the first `from` replaced by `to` (a field rewritten in the store).
fn rewrite(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = bytes.to_vec();
    let at = text
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("{from} not in the record"));
    let mut out = text[..at].to_vec();
    out.extend_from_slice(to.as_bytes());
    out.extend_from_slice(&text[at + from.len()..]);
    out
}

fn sealed_bytes(ring: &Keyring) -> Vec<u8> {
    let mut r = completed();
    ring.seal(&mut r, &store_key());
    encode(&r)
}

/// Issue 32 §2: an attacker who can write to the store puts their own credential hash
/// (or another fingerprint) on a victim's sealed record; it no longer opens.
#[test]
fn altered_metadata_does_not_open() {
    let (ring, _dir) = keyring(&[("k1", [7; 32])]);
    let bytes = sealed_bytes(&ring);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(text.contains("\"seal_format\":2"), "{text}");
    let mut intact = decode(&bytes).unwrap();
    ring.open(&mut intact, &store_key()).unwrap();
    let hex = |b: u8| format!("{b:02x}").repeat(32);
    let fields = [
        ("credentials", hex(2), hex(0xee)),
        ("fingerprint", hex(1), hex(0xee)),
        ("route", "\"charge\"".to_owned(), "\"chargf\"".to_owned()),
        ("attempt", "1".to_owned(), "2".to_owned()),
    ];
    for (name, from, to) in fields {
        let from = format!("\"{name}\":{}", quoted_if_hex(&from));
        let to = format!("\"{name}\":{}", quoted_if_hex(&to));
        let mut r = decode(&rewrite(&bytes, &from, &to)).unwrap();
        let err = ring.open(&mut r, &store_key()).unwrap_err();
        assert!(err.0.contains("does not open"), "{name}: {err}");
        assert!(r.response.is_none(), "{name}: nothing to replay");
    }
    // Relabelled as format 1 (store key only): the tag still binds what it was sealed with.
    let mut r = decode(&rewrite(&bytes, ",\"seal_format\":2", "")).unwrap();
    assert_eq!(r.sealed.as_ref().unwrap().format, 1);
    assert!(ring.open(&mut r, &store_key()).is_err());
    // A format this release does not know.
    let mut r = decode(&rewrite(&bytes, "\"seal_format\":2", "\"seal_format\":9")).unwrap();
    let err = ring.open(&mut r, &store_key()).unwrap_err();
    assert!(err.0.contains("format 9"), "{err}");
}

fn quoted_if_hex(s: &str) -> String {
    if s.len() == 64 {
        format!("\"{s}\"")
    } else {
        s.to_owned()
    }
}

/// Format 2 seals the raw key and scope with the response: empty in the store, back
/// when opened; a key or scope written into the readable metadata is not believed.
#[test]
fn the_raw_key_and_scope_are_sealed() {
    let (ring, _dir) = keyring(&[("k1", [7; 32])]);
    let mut r = completed();
    (r.key, r.scope) = ("charge:inv-SECRET".to_owned(), "tenant-SECRET".to_owned());
    let at = StoreKey::new(&r.route, &r.scope, &r.key);
    let original = r.clone();
    ring.seal(&mut r, &at);
    let bytes = encode(&r);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(!text.contains("SECRET"), "{text}");
    assert!(text.contains("\"scope\":\"\",\"key\":\"\""), "{text}");
    let mut back = decode(&bytes).unwrap();
    ring.open(&mut back, &at).unwrap();
    assert_eq!(
        (back.key, back.scope),
        (original.key.clone(), original.scope.clone())
    );
    let planted = rewrite(&bytes, "\"key\":\"\"", "\"key\":\"charge:other\"");
    let mut back = decode(&planted).unwrap();
    ring.open(&mut back, &at).unwrap();
    assert_eq!(back.key, original.key);
    // Opened under another store key (another key or scope asked for): no.
    let mut back = decode(&bytes).unwrap();
    let other = StoreKey::new(&original.route, &original.scope, "charge:other");
    assert!(ring.open(&mut back, &other).is_err());
}

/// A record sealed by the previous release (associated data: the store key only, no
/// `seal_format`) still opens: its metadata is trusted as before until it expires.
#[test]
fn format_1_records_still_open() {
    let (ring, _dir) = keyring(&[("k1", [7; 32])]);
    let mut r = completed();
    let response = r.response.take().unwrap();
    let mut text = plaintext(&response);
    let nonce = [5u8; NONCE_LEN];
    let (_, key) = &ring.keys[0];
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(&store_key().0),
        &mut text,
    )
    .unwrap();
    let mut sealed = BytesMut::new();
    sealed.put_slice(&nonce);
    sealed.put_slice(&text);
    r.sealed = Some(Box::new(Sealed {
        key_id: "k1".to_owned(),
        bytes: Bytes::from(sealed),
        format: UNBOUND,
    }));
    let bytes = encode(&r);
    assert!(!String::from_utf8_lossy(&bytes).contains("seal_format"));
    let mut back = decode(&bytes).unwrap();
    ring.open(&mut back, &store_key()).unwrap();
    assert_eq!(back.response, Some(response));
}
