//! The idempotency record and its wire encoding.
//!
//! Encoding (so a Lua script can check ownership with one `string.sub`):
//! `state byte ('P' in progress | 'C' completed)` + `32 hex chars of fencing token` +
//! `'\n'` + compact JSON metadata + `'\n'` + raw response body bytes.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

/// A 128-bit random fencing token, unique per reservation (and per attempt).
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
