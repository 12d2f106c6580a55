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
//! with the response ([`identity`]) and left empty in the metadata; the store key, a
//! hash of route, scope and key, is in the associated data, so they are bound as well.
//!
//! Format 1 (releases before this one) bound the store key only. Such records still open,
//! with their metadata trusted as before, until they expire (`retention`); a record says
//! its format in the metadata (`seal_format`), and the tag binds the associated data it
//! was sealed with, so a format 2 record relabelled as format 1 does not open either.

use crate::key::StoreKey;
use crate::store::Record;

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

/// The raw key and scope, sealed ahead of the response in format 2: `key len u32 | key |
/// scope len u32 | scope`, in a buffer with room for `more` bytes after them (the
/// response and the tag).
pub fn identity(record: &Record, more: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(record.key.len() + record.scope.len() + 8 + more);
    for field in [&record.key, &record.scope] {
        out.extend_from_slice(&(field.len() as u32).to_be_bytes());
        out.extend_from_slice(field.as_bytes());
    }
    out
}

/// The key and scope [`identity`] wrote, and what follows them.
pub fn parse_identity(text: &[u8]) -> Option<(String, String, &[u8])> {
    let mut rest = text;
    let mut field = || {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let value = std::str::from_utf8(rest.get(4..4 + len)?).ok()?.to_owned();
        rest = &rest[4 + len..];
        Some(value)
    };
    let key = field()?;
    let scope = field()?;
    Some((key, scope, rest))
}

#[cfg(test)]
mod tests;
