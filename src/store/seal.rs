//! Stored responses sealed at rest (SPEC §1 "Stored responses", `store.encryption`).
//!
//! A completed record's status, headers and body are sealed together with AES-256-GCM;
//! what stays readable is what the store needs to work (key hash, state, token,
//! timestamps, attempt, fingerprint and credential hashes). The nonce is fresh per
//! record (96 random bits from the system's CSPRNG). The associated data is the record's
//! store key and every readable field the decision reads (`bound.rs`), so a sealed value
//! copied under another key, or whose credential hash or fingerprint was changed in the
//! store, does not open.
//!
//! The cipher is `ring`'s AEAD: `ring` is already in the binary under rustls, is
//! maintained and audited, and its AES-GCM uses the CPU's AES and carry-less multiply
//! instructions in constant time — no second crypto stack for the same primitive.
//!
//! The first key seals; every key opens (rotation: add the new key first, drop the old
//! one after `retention`). A sealed record says which key sealed it, so opening tries
//! that key only.

use std::fmt;
use std::path::Path;

use base64::Engine;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::{Record, RecordState, StoredResponse};
use crate::store_key::StoreKey;

mod bound;
mod credential_key;

pub use bound::FORMAT;

/// A stored response as sealed bytes: `nonce || ciphertext || tag`, the id of the
/// key that sealed it and the format of its associated data (`bound.rs`: 1 = the store
/// key only, written by earlier releases; 2 = the store key and the decision's fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Sealed {
    pub key_id: String,
    pub bytes: Bytes,
    pub format: u8,
}

/// The format of [`Sealed::unsealed`]: no sealed bytes at all.
pub const UNSEALED: u8 = 0;

impl Sealed {
    /// What a record read in clear while encryption is on carries instead of sealed
    /// bytes (issue 46 §1): a store writer without the key could have made it, so it is
    /// as unreadable as a sealed record no key opens (409 `record_unreadable`), unless
    /// `accept_unsealed_until` dates it from before encryption was turned on.
    pub fn unsealed() -> Sealed {
        Sealed {
            key_id: "(not sealed)".to_owned(),
            bytes: Bytes::new(),
            format: UNSEALED,
        }
    }
}

/// The keys of `store.encryption`, loaded from their files. Its `Debug` shows the ids
/// only: key material never reaches a log line.
pub struct Keyring {
    keys: Vec<(String, LessSafeKey)>,
    /// Keys the credential hash (`credential_key.rs`); `None` keeps it plain SHA-256.
    credential_key: Option<ring::hmac::Key>,
    /// `accept_unsealed_until` (unix ms): unsealed records created before it are read
    /// as they are; `None`: none is.
    accept_unsealed_until_ms: Option<u64>,
}

/// A sealed record none of the keys opens (a dropped key, a replica without keys, a
/// value copied under another key, tampering).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

/// 32 random bytes from the system's CSPRNG, in base64: `idem keys new-encryption-key`.
pub fn new_key_base64() -> String {
    let mut key = [0u8; 32];
    // The system CSPRNG does not fail on the systems idem runs on; `rand` is the fallback.
    if SystemRandom::new().fill(&mut key).is_err() {
        key = rand::random();
    }
    base64::engine::general_purpose::STANDARD.encode(key)
}

impl Keyring {
    /// Load `(id, file)` pairs, each file read once; each holds 32 bytes in base64 (a
    /// Kubernetes Secret key). Errors name the file, never its content, with the index
    /// of the pair (`None`: the list itself).
    pub fn load(keys: &[(String, std::path::PathBuf)]) -> Result<Keyring, (Option<usize>, String)> {
        let mut loaded = Vec::with_capacity(keys.len());
        for (i, (id, file)) in keys.iter().enumerate() {
            loaded.push((id.clone(), read_key(file).map_err(|e| (Some(i), e))?));
        }
        if loaded.is_empty() {
            let message = "list at least one key: the first seals, all open".to_owned();
            return Err((None, message));
        }
        Ok(Keyring {
            keys: loaded,
            credential_key: None,
            accept_unsealed_until_ms: None,
        })
    }

    /// Read unsealed records created before `until_ms` (unix ms) as they are: records
    /// written before encryption was turned on on a live store.
    pub fn accepting_unsealed_until(mut self, until_ms: Option<u64>) -> Keyring {
        self.accept_unsealed_until_ms = until_ms;
        self
    }

    /// Whether an unsealed record created at `created_at_ms` is read as it is. Its
    /// `created_at` is as readable as the rest of it, so this trusts the store writer
    /// for records dated before the setting: keep the setting only for one `retention`
    /// after turning encryption on (README).
    pub fn accepts_unsealed(&self, created_at_ms: u64) -> bool {
        self.accept_unsealed_until_ms
            .is_some_and(|until| created_at_ms < until)
    }

    /// The ids, sealing key first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| id.as_str())
    }

    /// `record` as the store keeps it, sealed under `store_key` with the first key: its
    /// raw key and scope, and its response when it has one, become `nonce || ciphertext
    /// || tag`; route, token and the other fields the store and the decision read stay
    /// readable, bound as associated data (`bound.rs`). Every phase is sealed, so the
    /// raw key and scope are never readable at rest, in flight or unknown included.
    /// `None` for a record already sealed (written as it is) or, never in practice, when
    /// the cipher refuses. Only the store's sealing layer calls it (`sealing.rs`).
    pub(in crate::store) fn sealed_copy(
        &self,
        record: &Record,
        store_key: &StoreKey,
    ) -> Option<Record> {
        if record.sealed.is_some() {
            return None;
        }
        let (id, key) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        if SystemRandom::new().fill(&mut nonce).is_err() {
            nonce = rand::random();
        }
        let response = record.response.as_ref();
        let size = NONCE_LEN
            + bound::identity_len(record)
            + response.map_or(0, plaintext_len)
            + AES_256_GCM.tag_len();
        // Sealed in place after the nonce, the tag appended: one buffer, no copy.
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(&nonce);
        bound::identity_into(&mut out, record);
        if let Some(response) = response {
            plaintext_into(&mut out, response);
        }
        let aad = Aad::from(bound::associated_data(FORMAT, record, store_key));
        let nonce = Nonce::assume_unique_for_key(nonce);
        // Sealing with a valid key cannot fail for inputs under 64 GiB.
        let tag = key
            .seal_in_place_separate_tag(nonce, aad, &mut out[NONCE_LEN..])
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(Record {
            state: record.state,
            token: record.token,
            route: record.route.clone(),
            // Sealed, so no longer readable in the store (the store key binds them).
            scope: String::new(),
            key: String::new(),
            fingerprint: record.fingerprint,
            credentials: record.credentials,
            attempt: record.attempt,
            created_at_ms: record.created_at_ms,
            expires_at_ms: record.expires_at_ms,
            response: None,
            trace: record.trace.clone(),
            sent_at_ms: record.sent_at_ms,
            settled: record.settled,
            sealed: Some(Box::new(Sealed {
                key_id: id.clone(),
                bytes: Bytes::from(out),
                format: FORMAT,
            })),
            stamp: record.stamp,
        })
    }

    /// Open `record` under `store_key`, in place. A record no listed key opens keeps
    /// its sealed part, so the admin can still say which key sealed it (`sealed_with`).
    /// The associated data is rebuilt from the record as read, so a changed credential
    /// hash, fingerprint, route, attempt or settlement fails the tag like a changed
    /// ciphertext does. The raw key and scope come back from the sealed bytes (format 2);
    /// a completed record must hold a response, one in progress none. Only the store's
    /// sealing layer calls it (`sealing.rs`).
    pub(in crate::store) fn open(
        &self,
        record: &mut Record,
        store_key: &StoreKey,
    ) -> Result<(), Unreadable> {
        let Some(sealed) = &record.sealed else {
            return Ok(());
        };
        let Some((_, key)) = self.keys.iter().find(|(id, _)| *id == sealed.key_id) else {
            return Err(self.why_unreadable(sealed));
        };
        if sealed.format != FORMAT && sealed.format != bound::UNBOUND {
            return Err(self.why_unreadable(sealed));
        }
        let fail = || Unreadable(format!("does not open with key {:?}", sealed.key_id));
        let aad = bound::associated_data(sealed.format, record, store_key);
        if sealed.bytes.len() < NONCE_LEN {
            return Err(fail());
        }
        let (nonce, text) = sealed.bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| fail())?;
        // Opened in a buffer of its own that the stored body then points into: one
        // copy of a replayed body, not two.
        let mut text = BytesMut::from(text);
        let len = key
            .open_in_place(nonce, Aad::from(aad), &mut text)
            .map_err(|_| fail())?
            .len();
        text.truncate(len);
        let opened = text.freeze();
        let (identity, rest) = match sealed.format {
            bound::UNBOUND => (None, 0),
            _ => {
                let (key, scope, at) = bound::parse_identity(&opened).ok_or_else(fail)?;
                (Some((key, scope)), at)
            }
        };
        let response = match (record.state, rest == opened.len()) {
            // Format 2 seals an in-progress record's key and scope, and nothing after.
            (RecordState::InProgress, true) => None,
            (RecordState::Completed, false) => Some(parse(&opened, rest).ok_or_else(fail)?),
            _ => return Err(fail()),
        };
        record.response = response;
        if let Some((key, scope)) = identity {
            (record.key, record.scope) = (key, scope);
        }
        record.sealed = None;
        Ok(())
    }

    /// Why `sealed` does not open here (its key not listed, a format this release does
    /// not know, or it fails to open): for the log line of a 409 `record_unreadable`.
    pub fn why_unreadable(&self, sealed: &Sealed) -> Unreadable {
        if sealed.format == UNSEALED && sealed.bytes.is_empty() {
            return Unreadable(
                "stored unsealed while store.encryption is on (a store writer without the key, \
                 or a record from before encryption that store.encryption.accept_unsealed_until \
                 does not cover)"
                    .to_owned(),
            );
        }
        if !self.keys.iter().any(|(id, _)| *id == sealed.key_id) {
            let message = format!("sealed with key {:?}, which is not listed", sealed.key_id);
            return Unreadable(message);
        }
        if sealed.format != FORMAT && sealed.format != bound::UNBOUND {
            let message = format!(
                "sealed in format {}, unknown to this release",
                sealed.format
            );
            return Unreadable(message);
        }
        Unreadable(format!("does not open with key {:?}", sealed.key_id))
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

fn read_key(file: &Path) -> Result<LessSafeKey, String> {
    let bytes = read_key_bytes(file)?;
    let key = UnboundKey::new(&AES_256_GCM, &bytes)
        .map_err(|_| format!("key file {} is not a usable key", file.display()))?;
    Ok(LessSafeKey::new(key))
}

/// A key file's 32 bytes (base64).
fn read_key_bytes(file: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read key file {}: {e}", file.display()))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| format!("key file {} is not base64", file.display()))?;
    if bytes.len() != 32 {
        return Err(format!(
            "key file {} holds {} bytes; AES-256 needs 32 (make one with `idem keys new-encryption-key`)",
            file.display(),
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// The response as sealed in format 1 (no key and scope ahead of it): the tests build
/// records of the previous release with it.
#[cfg(test)]
fn plaintext(response: &StoredResponse) -> Vec<u8> {
    let mut out = Vec::with_capacity(plaintext_len(response) + 16);
    plaintext_into(&mut out, response);
    out
}

/// `status u16 | header count u16 | (name len u16, name, value len u32, value)* |
/// body flag u8 | body`, appended to `out` (after the sealed key and scope, with no
/// second copy of the body).
fn plaintext_into(out: &mut Vec<u8>, response: &StoredResponse) {
    out.put_u16(response.status);
    out.put_u16(u16::try_from(response.headers.len()).unwrap_or(u16::MAX));
    for (name, value) in response.headers.iter().take(usize::from(u16::MAX)) {
        out.put_u16(name.as_str().len() as u16);
        out.put_slice(name.as_str().as_bytes());
        out.put_u32(value.len() as u32);
        out.put_slice(value.as_bytes());
    }
    match &response.body {
        Some(body) => {
            out.put_u8(1);
            out.put_slice(body);
        }
        None => out.put_u8(0),
    }
}

fn plaintext_len(response: &StoredResponse) -> usize {
    let headers: usize = response
        .headers
        .iter()
        .map(|(n, v)| 6 + n.as_str().len() + v.len())
        .sum();
    5 + headers + response.body.as_ref().map_or(0, Bytes::len)
}

/// The response sealed in `opened` from byte `at` on; the body is a view into `opened`.
fn parse(opened: &Bytes, at: usize) -> Option<StoredResponse> {
    let mut text = opened.get(at..)?;
    let need = |text: &[u8], n: usize| (text.remaining() >= n).then_some(());
    need(text, 4)?;
    let status = text.get_u16();
    let count = text.get_u16();
    let mut headers = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        need(text, 2)?;
        let len = usize::from(text.get_u16());
        need(text, len)?;
        let name = HeaderName::from_bytes(&text[..len]).ok()?;
        text.advance(len);
        need(text, 4)?;
        let len = text.get_u32() as usize;
        need(text, len)?;
        let value = HeaderValue::from_bytes(&text[..len]).ok()?;
        text.advance(len);
        headers.push((name, value));
    }
    need(text, 1)?;
    let body = match text.get_u8() {
        1 => Some(opened.slice_ref(text)),
        _ => None,
    };
    Some(StoredResponse {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests;
