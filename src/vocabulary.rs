//! The request's vocabulary, below everything that uses it: what happened to one
//! request and to each store round trip, why an upstream call got no answer, what woke
//! a waiting duplicate, what a reconciliation found and what an operator recorded.
//!
//! The pipeline (`proxy`) produces these, the metrics count them and the traces write
//! them; metrics and traces import this leaf module and never the pipeline (as
//! tower-http's classifiers feed its `TraceLayer`). The Prometheus label encodings live
//! beside the metrics.

use strum::{EnumIter, IntoStaticStr};

/// What happened to one protected (or matched) request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// This request executed the intent upstream.
    Forwarded,
    /// Answered from the stored outcome.
    Replayed,
    /// Refused because of the record under its key (in progress, not stored, unknown).
    Conflict,
    /// The same key with another request (422).
    Mismatch,
    /// Refused for its own content (missing or invalid key, credentials, body).
    Rejected,
    /// Forwarded without idempotency (no key and `require_key: false`, or not protected).
    Passthrough,
    /// The store could not answer.
    StoreError,
    /// Refused unsent because the route's breaker is open (its upstream stopped answering).
    CircuitOpen,
}

impl Outcome {
    /// Every outcome, in label order (metrics keep one counter slot per outcome).
    pub const ALL: [Outcome; 8] = [
        Outcome::Forwarded,
        Outcome::Replayed,
        Outcome::Conflict,
        Outcome::Mismatch,
        Outcome::Rejected,
        Outcome::Passthrough,
        Outcome::StoreError,
        Outcome::CircuitOpen,
    ];

    /// The label value, as the metrics, spans and logs write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Replayed => "replayed",
            Outcome::Conflict => "conflict",
            Outcome::Mismatch => "mismatch",
            Outcome::Rejected => "rejected",
            Outcome::Passthrough => "passthrough",
            Outcome::StoreError => "store_error",
            Outcome::CircuitOpen => "circuit_open",
        }
    }

    /// Index into [`Outcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A store round trip on the request path, timed per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// The atomic reservation (and the loser's read of the record).
    Reserve,
    /// A lease renewal while the upstream call runs.
    Renew,
    /// The owner's fenced completion.
    Complete,
    /// The owner's fenced release (not stored, nothing sent).
    Release,
    /// A fenced takeover: a new attempt, or an unknown outcome taken over.
    Takeover,
}

impl StoreOp {
    pub const ALL: [StoreOp; 5] = [
        StoreOp::Reserve,
        StoreOp::Renew,
        StoreOp::Complete,
        StoreOp::Release,
        StoreOp::Takeover,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Reserve => "reserve",
            StoreOp::Renew => "renew",
            StoreOp::Complete => "complete",
            StoreOp::Release => "release",
            StoreOp::Takeover => "takeover",
        }
    }

    /// Index into [`StoreOp::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why a protected upstream call got no final answer (`idem_upstream_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamFailure {
    /// Never sent (connect refused, DNS): 502, safe to retry.
    NotSent,
    /// Timeout or reset after sending: 504, outcome unknown.
    Ambiguous,
}

impl UpstreamFailure {
    pub const ALL: [UpstreamFailure; 2] = [UpstreamFailure::NotSent, UpstreamFailure::Ambiguous];

    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFailure::NotSent => "not_sent",
            UpstreamFailure::Ambiguous => "ambiguous",
        }
    }
}

/// What woke a waiting duplicate (`idem_duplicate_wakeups_total`): the store's change
/// notification, or the safety re-check at the end of its nap. Timer wake-ups that
/// outnumber notifications mean the store's notifications do not arrive (a Redis ACL
/// without `+subscribe`, a proxy that drops pub/sub, PostgreSQL `LISTEN` refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WokenBy {
    Notification,
    Timer,
}

/// What an operator recorded for an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, IntoStaticStr, EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Resolution {
    Completed,
    NotExecuted,
}

/// What a reconciliation lookup said: the call happened, it did not, or no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, IntoStaticStr, EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Reconciliation {
    Found,
    Absent,
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_match_the_tables() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(o.index(), i, "{o:?}");
        }
        for (i, op) in StoreOp::ALL.iter().enumerate() {
            assert_eq!(op.index(), i, "{op:?}");
        }
    }
}
