use std::time::Duration;

use super::*;
use crate::store::record::{decode, encode};

pub(super) fn keyring(keys: &[(&str, [u8; 32])]) -> (Keyring, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut listed = Vec::new();
    for (id, key) in keys {
        let path = dir.path().join(id);
        std::fs::write(&path, base64::engine::general_purpose::STANDARD.encode(key)).unwrap();
        listed.push((id.to_string(), path));
    }
    (Keyring::load(&listed).unwrap(), dir)
}

impl Keyring {
    /// `record` replaced by its sealed copy (as the store's sealing layer writes it).
    pub(in crate::store) fn seal(&self, record: &mut Record, store_key: &StoreKey) {
        *record = self.sealed_copy(record, store_key).expect("sealed");
    }
}

/// An in-progress record seals its raw key and scope (issue 32 §2: in flight and unknown
/// records too), and opens back to the same record; copied under another key, or turned
/// into a completed record, it does not open.
#[test]
fn in_progress_records_seal_their_key_and_scope() {
    let (ring, _dir) = keyring(&[("k1", [7; 32])]);
    let key = StoreKey::new("charge", "ada@example.com", "charge:ada");
    let original = Record::in_progress(
        "charge",
        "ada@example.com",
        "charge:ada",
        [1; 32],
        [2; 32],
        Duration::from_secs(30),
    );
    let mut r = original.clone();
    ring.seal(&mut r, &key);
    let bytes = encode(&r);
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains("ada"), "readable: {text}");
    assert!(
        text.starts_with('P') && text.contains("\"sealed\":\"k1\""),
        "{text}"
    );
    let mut back = decode(&bytes).unwrap();
    assert!(back.sealed.is_some());
    ring.open(&mut back, &key).unwrap();
    assert_eq!(
        back,
        Record {
            stamp: None,
            ..original.clone()
        }
    );
    let mut elsewhere = decode(&bytes).unwrap();
    assert!(ring
        .open(&mut elsewhere, &StoreKey::new("charge", "", "charge:ada"))
        .is_err());
    let mut flipped = bytes.clone();
    flipped[0] = b'C';
    let mut flipped = decode(&flipped).unwrap();
    assert!(
        ring.open(&mut flipped, &key).is_err(),
        "no response sealed in it"
    );
}

pub(super) fn completed() -> Record {
    let r = Record::in_progress("charge", "", "k", [1; 32], [2; 32], Duration::from_secs(30));
    r.completed(
        StoredResponse {
            status: 201,
            headers: vec![(
                HeaderName::from_static("x-card-holder"),
                HeaderValue::from_bytes(b"Ada \xe9").unwrap(),
            )],
            body: Some(Bytes::from_static(b"{\"holder\":\"Ada Lovelace\"}")),
        },
        Duration::from_secs(60),
    )
}

#[test]
fn sealed_records_round_trip_through_the_codec_and_hide_the_response() {
    let (ring, _dir) = keyring(&[("new", [7; 32])]);
    let key = StoreKey::new("charge", "", "k");
    let original = completed();
    let mut r = original.clone();
    ring.seal(&mut r, &key);
    assert!(r.response.is_none());
    let bytes = encode(&r);
    let text = String::from_utf8_lossy(&bytes);
    for secret in ["Ada", "holder", "x-card-holder"] {
        assert!(!text.contains(secret), "{secret} readable in {text}");
    }
    assert!(
        text.contains("\"status\":null"),
        "the status is sealed too: {text}"
    );
    assert!(text.contains("\"sealed\":\"new\""), "{text}");
    let mut back = decode(&bytes).unwrap();
    ring.open(&mut back, &key).unwrap();
    assert_eq!(back.response, original.response);
    assert!(back.sealed.is_none());
}

#[test]
fn a_value_copied_under_another_key_or_tampered_does_not_open() {
    let (ring, _dir) = keyring(&[("k1", [7; 32])]);
    let mut r = completed();
    ring.seal(&mut r, &StoreKey::new("charge", "", "k"));
    let mut copied = r.clone();
    let err = ring
        .open(&mut copied, &StoreKey::new("charge", "", "other"))
        .unwrap_err();
    assert!(err.0.contains("does not open"), "{err}");
    let mut tampered = r.clone();
    let mut bytes = tampered.sealed.as_ref().unwrap().bytes.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    tampered.sealed.as_mut().unwrap().bytes = Bytes::from(bytes);
    assert!(ring
        .open(&mut tampered, &StoreKey::new("charge", "", "k"))
        .is_err());
}

#[test]
fn rotation_the_first_key_seals_every_listed_key_opens() {
    let key = StoreKey::new("charge", "", "k");
    let (old_only, _d1) = keyring(&[("old", [1; 32])]);
    let mut old_record = completed();
    old_only.seal(&mut old_record, &key);
    let (both, _d2) = keyring(&[("new", [2; 32]), ("old", [1; 32])]);
    let mut opened = old_record.clone();
    both.open(&mut opened, &key).unwrap();
    let mut new_record = completed();
    both.seal(&mut new_record, &key);
    assert_eq!(new_record.sealed.as_ref().unwrap().key_id, "new");
    let mut not_with_old = new_record.clone();
    assert!(old_only.open(&mut not_with_old, &key).is_err());
    let (new_only, _d3) = keyring(&[("new", [2; 32])]);
    let mut dropped = old_record.clone();
    let err = new_only.open(&mut dropped, &key).unwrap_err();
    assert!(err.0.contains("\"old\", which is not listed"), "{err}");
    // Kept sealed, so the admin can name the key (`sealed_with`).
    assert_eq!(
        dropped.sealed.as_ref().map(|s| s.key_id.as_str()),
        Some("old")
    );
}

#[test]
fn key_files_are_checked_and_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(
        &short,
        base64::engine::general_purpose::STANDARD.encode([9u8; 16]),
    )
    .unwrap();
    let (at, err) = Keyring::load(&[("s".into(), short)]).unwrap_err();
    assert_eq!(at, Some(0));
    assert!(err.contains("holds 16 bytes"), "{err}");
    let junk = dir.path().join("junk");
    std::fs::write(&junk, "not base64 s3cr3t!").unwrap();
    let (_, err) = Keyring::load(&[("j".into(), junk)]).unwrap_err();
    assert!(!err.contains("s3cr3t"), "{err}");
    let (ring, _d) = keyring(&[("a", [3; 32]), ("b", [4; 32])]);
    assert_eq!(format!("{ring:?}"), "Keyring { ids: [\"a\", \"b\"] }");
    let fresh = new_key_base64();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&fresh)
        .unwrap();
    assert_eq!(bytes.len(), 32);
    assert_ne!(fresh, new_key_base64());
}
