//! The idempotency record and its constructors; its bytes in the store are written by
//! `encode.rs`, read by `decode.rs` (which documents the layout), and `meta_line.rs`
//! reads the JSON metadata line fast.
//!
//! The wire encoding: state byte, token hex, `\n`, JSON metadata, `\n`, raw body — laid
//! out so a Lua script can check ownership with one `string.sub(value, 2, 33)`.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

pub use crate::traces::TraceLink;

mod decode;
mod encode;
mod meta_line;
mod phase;

pub use decode::{decode, decode_owned};
pub use encode::{encode, encode_into, encoded_size_hint};
pub use phase::Phase;

/// A 128-bit random fencing token, unique per reservation (and per attempt).
///
/// Every write after the reservation compares it, so a stale owner whose lease was
/// taken over can never overwrite or delete its successor's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    InProgress,
    Completed,
}

/// One idempotency record: who owns the key, what the request looked like, and —
/// once completed — the stored response.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub state: RecordState,
    pub token: Token,
    /// Raw values live only here (store keys are hashes).
    pub route: String,
    pub scope: String,
    pub key: String,
    pub fingerprint: [u8; 32],
    pub credentials: [u8; 32],
    /// 1 for the first attempt; `on_failure: retry` increments it.
    pub attempt: u32,
    /// Unix milliseconds.
    pub created_at_ms: u64,
    /// In progress: when the current lease ends. Completed: when the record expires.
    pub expires_at_ms: u64,
    /// Set when state is `Completed`.
    pub response: Option<StoredResponse>,
    /// The trace and span of the request that reserved it (traces on and sampled), so a
    /// replay's span links to the execution that produced the answer. Boxed: records
    /// are moved by value on the request path, and without traces this stays a pointer.
    pub trace: Option<Box<TraceLink>>,
    /// Unix milliseconds when this attempt was first sent (reserved): the upstream
    /// key's age, for `upstream_key_window`. A retry of an unknown outcome keeps it.
    pub sent_at_ms: u64,
    /// How an unknown outcome was settled, if it was.
    pub settled: Option<Settled>,
    /// The response sealed at rest (`store.encryption`), in place of `response` until
    /// opened. Boxed: without encryption it stays a pointer.
    pub sealed: Option<Box<super::seal::Sealed>>,
    /// What the store writes from its own clock when it stores this record (SPEC §1
    /// "One clock for every lease"); not part of the stored bytes, so a record read
    /// back has none.
    pub stamp: Option<Stamp>,
}

/// The times a store stamps on an in-progress record it writes, from **its own clock**
/// (Redis `TIME` inside the script, PostgreSQL `now()`, the memory store's monotonic
/// clock), so that no proxy's wall clock ever decides when a lease ends. The
/// `expires_at_ms` and `sent_at_ms` a proxy puts in a record are only its estimate,
/// replaced by the store's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamp {
    /// The lease's end becomes the store's now + `lease`.
    pub lease: Duration,
    /// The first send (`sent_at_ms`, the upstream key's age) becomes the store's now; a
    /// retry of the same attempt keeps it.
    pub sent: bool,
}

/// How an attempt whose outcome was unknown got settled (SPEC §1 "Unknown outcomes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The upstream's records said it happened: the lookup's answer is the outcome.
    Reconciled,
    /// An operator recorded the outcome.
    Resolved,
    /// An operator said it never ran: the next repeat is forwarded (same upstream key).
    NotExecuted,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Reconciled => "reconciled",
            Settled::Resolved => "resolved",
            Settled::NotExecuted => "not_executed",
        }
    }

    pub fn from_name(name: &str) -> Option<Settled> {
        [Settled::Reconciled, Settled::Resolved, Settled::NotExecuted]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// A stored upstream response.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    pub status: u16,
    /// End-to-end headers only.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `None` when the body exceeded `max_response_bytes` and was not kept.
    pub body: Option<Bytes>,
}

/// This proxy's wall-clock unix milliseconds: the informational timestamps of a record
/// (`created_at_ms`, a completed record's `expires_at_ms`) and the estimates a store
/// replaces with its own clock ([`Stamp`]). Never compared with a stored lease: leases
/// are judged by the store, against its own clock ([`super::Reserve::Exists`] carries
/// the store's time of the read).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn after_ms(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}

// === impl Token ===

impl Token {
    /// A fresh token from the thread-local CSPRNG: unguessable, so no other proxy can
    /// forge ownership of a reservation.
    pub fn random() -> Token {
        Token(rand::random())
    }

    /// Parses the 32 lowercase hex characters written by `Display`.
    pub fn from_hex(hex: &[u8]) -> Option<Token> {
        if hex.len() != 32 || hex.iter().any(u8::is_ascii_uppercase) {
            return None;
        }
        crate::fast_hex::decode(hex).map(Token)
    }
}

impl Token {
    /// The 32 lowercase hex characters of `Display`, without allocating.
    pub fn hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        crate::fast_hex::encode_into(&self.0, &mut out);
        out
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.hex()).map_err(|_| fmt::Error)?)
    }
}

// === impl Record ===

impl Record {
    /// A fresh in-progress reservation (attempt 1, new random token) whose lease ends
    /// after `lease`.
    pub fn in_progress(
        route: &str,
        scope: &str,
        key: &str,
        fingerprint: [u8; 32],
        credentials: [u8; 32],
        lease: Duration,
    ) -> Record {
        let now = now_ms();
        Record {
            state: RecordState::InProgress,
            token: Token::random(),
            route: route.to_owned(),
            scope: scope.to_owned(),
            key: key.to_owned(),
            fingerprint,
            credentials,
            attempt: 1,
            created_at_ms: now,
            expires_at_ms: after_ms(now, lease),
            response: None,
            trace: None,
            sent_at_ms: now,
            settled: None,
            sealed: None,
            stamp: Some(Stamp { lease, sent: true }),
        }
    }

    /// The same reservation with its lease extended (same token: renewals are
    /// `replace_if_owner` with this record).
    pub fn renewed(&self, lease: Duration) -> Record {
        Record {
            expires_at_ms: after_ms(now_ms(), lease),
            stamp: Some(Stamp { lease, sent: false }),
            ..self.clone()
        }
    }

    /// The completed form of this in-progress record, kept for `retention`.
    pub fn completed(&self, response: StoredResponse, retention: Duration) -> Record {
        Record {
            state: RecordState::Completed,
            expires_at_ms: after_ms(now_ms(), retention),
            response: Some(response),
            sealed: None,
            stamp: None,
            ..self.clone()
        }
    }

    /// A new in-progress attempt taking over this record (`on_failure: retry`): new
    /// token, attempt + 1, same identity and creation time (the caller sets its trace).
    pub fn next_attempt(&self, lease: Duration) -> Record {
        let now = now_ms();
        Record {
            state: RecordState::InProgress,
            token: Token::random(),
            attempt: self.attempt.saturating_add(1),
            expires_at_ms: after_ms(now, lease),
            response: None,
            trace: None,
            sent_at_ms: now,
            settled: None,
            sealed: None,
            stamp: Some(Stamp { lease, sent: true }),
            ..self.clone()
        }
    }

    /// The same attempt sent again under a new lease (an unknown outcome retried, or
    /// resolved as not executed): new token, same attempt — so the same upstream key —
    /// and the same first-send time (the caller sets its trace).
    pub fn retried(&self, lease: Duration) -> Record {
        Record {
            state: RecordState::InProgress,
            token: Token::random(),
            expires_at_ms: after_ms(now_ms(), lease),
            response: None,
            trace: None,
            settled: None,
            sealed: None,
            stamp: Some(Stamp { lease, sent: false }),
            ..self.clone()
        }
    }

    /// This unknown attempt settled with `response` (found by reconciliation, or
    /// recorded by an operator), kept for `retention`. A new token: the attempt's owner,
    /// should it come back, can no longer write over it.
    pub fn settled_with(
        &self,
        how: Settled,
        response: StoredResponse,
        retention: Duration,
    ) -> Record {
        Record {
            state: RecordState::Completed,
            token: Token::random(),
            expires_at_ms: after_ms(now_ms(), retention),
            response: Some(response),
            settled: Some(how),
            sealed: None,
            stamp: None,
            ..self.clone()
        }
    }

    /// This unknown attempt declared not executed by an operator: still an attempt
    /// whose lease has ended, so the next repeat takes it over and forwards it.
    pub fn not_executed(&self) -> Record {
        Record {
            state: RecordState::InProgress,
            token: Token::random(),
            expires_at_ms: now_ms(),
            response: None,
            settled: Some(Settled::NotExecuted),
            sealed: None,
            stamp: Some(Stamp {
                lease: Duration::ZERO,
                sent: false,
            }),
            ..self.clone()
        }
    }

    /// This attempt with its lease ending now (same token and first send): what an owner
    /// whose call was never sent leaves when the record has history (see
    /// [`Record::has_history`]). Deleting it would forget that the key was sent before,
    /// and the next request would reserve afresh and send the key again, maybe past
    /// the upstream's key window (found by the model, `idem-model` tests/findings.rs).
    pub fn lease_ended_now(&self) -> Record {
        Record {
            expires_at_ms: now_ms(),
            stamp: Some(Stamp {
                lease: Duration::ZERO,
                sent: false,
            }),
            ..self.clone()
        }
    }

    /// Whether this new attempt replaced a record (an unknown outcome taken over, or a
    /// stored failure retried) rather than reserving an absent key: only a fresh
    /// reservation (attempt 1, first send stamped) has none. Read from the constructor's
    /// stamp, so only on the owner's own copy.
    pub fn has_history(&self) -> bool {
        self.attempt > 1 || self.stamp.is_some_and(|s| !s.sent)
    }

    /// An attempt whose lease has ended without an outcome: its result is unknown
    /// (SPEC §1 "Unknown outcomes").
    pub fn lease_ended(&self, now_ms: u64) -> bool {
        self.state == RecordState::InProgress && self.expires_at_ms <= now_ms
    }

    pub fn is_completed(&self) -> bool {
        self.state == RecordState::Completed
    }

    /// Applies the record's [`Stamp`] with the store's clock: `now_ms` is the store's
    /// time of the write. Used by the stores that stamp in Rust (memory, and PostgreSQL on read).
    pub fn apply_stamp(&mut self, now_ms: u64) {
        if let Some(stamp) = self.stamp.take() {
            self.expires_at_ms = after_ms(now_ms, stamp.lease);
            if stamp.sent {
                self.sent_at_ms = now_ms;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hex_round_trips() {
        let t = Token::random();
        let hex = t.to_string();
        assert_eq!(hex.len(), 32);
        assert_eq!(Token::from_hex(hex.as_bytes()), Some(t));
        assert_ne!(Token::random(), t);
        assert_eq!(Token::from_hex(hex.to_uppercase().as_bytes()), None);
        assert_eq!(Token::from_hex(b"zz"), None);
    }

    #[test]
    fn constructors_keep_identity_and_move_state() {
        let r = Record::in_progress("r", "s", "k", [1; 32], [2; 32], Duration::from_secs(30));
        assert_eq!(r.attempt, 1);
        assert!(!r.is_completed());
        let mut stamped = r.clone();
        stamped.apply_stamp(1_000);
        assert_eq!((stamped.expires_at_ms, stamped.sent_at_ms), (31_000, 1_000));
        assert!(stamped.stamp.is_none());
        let resp = StoredResponse {
            status: 201,
            headers: vec![],
            body: Some(Bytes::from_static(b"ok")),
        };
        let c = r.completed(resp.clone(), Duration::from_secs(3600));
        assert!(c.is_completed());
        assert_eq!((c.token, &c.response), (r.token, &Some(resp)));
        let n = c.next_attempt(Duration::from_secs(30));
        assert_eq!(
            (n.attempt, n.state, n.response),
            (2, RecordState::InProgress, None)
        );
        assert_ne!(n.token, r.token);
        assert_eq!(r.renewed(Duration::from_secs(60)).token, r.token);
    }
}
