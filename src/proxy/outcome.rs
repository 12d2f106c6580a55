//! What happened to one request and to each store round trip: the pipeline's own
//! vocabulary, used by the pure decision ([`super::decide`]), counted by the metrics
//! (`idem_requests_total{outcome}`, `idem_store_duration_seconds{op}`) and written on
//! the request's span and log line.

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
