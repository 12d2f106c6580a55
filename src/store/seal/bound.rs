//! What a sealed record's associated data covers (issue 32 §2, "Sealed records bind what
//! idem decides from").
//!
//! The decision about a repeat ([`crate::proxy::decide`]) reads the record's credential
//! hash and fingerprint, which stay readable outside the ciphertext. Were they not bound
//! to it, whoever can write to the store could put an attacker's credential hash on a
//! victim's record and have the victim's response replayed to the attacker. So the
//! associated data of format 2 covers, besides the store key, every readable field that
//! chooses between replay and refusal or shapes the replay: route, credential hash,
//! fingerprint, attempt and how an unknown outcome was settled. Changing any of them
//! makes the record not open: 409 `record_unreadable`, never replayed, never executed
//! again. The raw key and scope are not readable at all in format 2: they are sealed
//! ([`identity_into`]), with the response once there is one, and left empty in the
//! metadata, in every phase of the record (in flight, unknown, completed, settled); the
//! store key, a hash of route, scope and key, is in the associated data, so they are
//! bound as well. An in-progress record's sealed bytes hold the key and scope only.
//!
//! Format 1 (releases before this one) bound the store key only. Such records still open,
//! with their metadata trusted as before, until they expire (`retention`); a record says
//! its format in the metadata (`seal_format`), and the tag binds the associated data it
//! was sealed with, so a format 2 record relabelled as format 1 does not open either.

use crate::store::Record;
use crate::store_key::StoreKey;

/// The format this release seals in.
pub const FORMAT: u8 = 2;

/// Format 1: the store key only.
pub const UNBOUND: u8 = 1;

/// The associated data of `record` under `store_key` in `format` (1 or [`FORMAT`]):
/// a domain tag, then each field length-prefixed, so no two records' fields run together
/// into the same bytes.
pub fn associated_data(format: u8, record: &Record, store_key: &StoreKey) -> Vec<u8> {
    if format == UNBOUND {
        return store_key.0.to_vec();
    }
    let mut out = Vec::with_capacity(12 + 32 + 4 + record.route.len() + 64 + 5);
    out.extend_from_slice(b"idem-seal-v2");
    out.extend_from_slice(&store_key.0);
    out.extend_from_slice(&(record.route.len() as u32).to_be_bytes());
    out.extend_from_slice(record.route.as_bytes());
    out.extend_from_slice(&record.credentials);
    out.extend_from_slice(&record.fingerprint);
    out.extend_from_slice(&record.attempt.to_be_bytes());
    out.push(match record.settled {
        None => 0,
        Some(crate::store::Settled::Reconciled) => 1,
        Some(crate::store::Settled::Resolved) => 2,
        Some(crate::store::Settled::NotExecuted) => 3,
    });
    out
}

/// The length of [`identity_into`]'s bytes for `record`.
pub fn identity_len(record: &Record) -> usize {
    record.key.len() + record.scope.len() + 8
}

/// The raw key and scope, sealed in format 2 (ahead of the response, if any): `key len
/// u32 | key | scope len u32 | scope`, appended to `out`.
pub fn identity_into(out: &mut Vec<u8>, record: &Record) {
    for field in [&record.key, &record.scope] {
        out.extend_from_slice(&(field.len() as u32).to_be_bytes());
        out.extend_from_slice(field.as_bytes());
    }
}

/// The key and scope [`identity_into`] wrote, and where what follows them begins.
pub fn parse_identity(text: &[u8]) -> Option<(String, String, usize)> {
    let mut at = 0;
    let mut field = || {
        let len = u32::from_be_bytes(text.get(at..at + 4)?.try_into().ok()?) as usize;
        let value = std::str::from_utf8(text.get(at + 4..(at + 4).checked_add(len)?)?).ok()?;
        at += 4 + len;
        Some(value.to_owned())
    };
    let key = field()?;
    let scope = field()?;
    Some((key, scope, at))
}

#[cfg(test)]
mod tests;
