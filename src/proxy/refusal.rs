//! Why a protected request is refused because of the record under its key, as a value.
//!
//! The duplicate's decision ([`super::decide`]) and the reservation's own steps name the
//! reason; the flow turns it into the answer in one place ([`Refusal::problem`], counted
//! as [`Refusal::outcome`]), so a refusal's wording and status live in `problem.rs` and
//! are chosen here, never at the branch that found the reason.

use super::problem::{self, Problem, UnknownBecause};
use crate::vocabulary::Outcome;

/// A refusal of a repeat, by the record already under the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The record was made with other credentials: nothing about it is shown.
    CredentialMismatch,
    /// The same key with another payload.
    KeyReused,
    /// Completed with `status`, its response too large to keep: never executed again.
    ResponseNotStored { status: u16 },
    /// In progress under a live lease: retry the same request in `retry_after` seconds.
    InProgress { retry_after: u64 },
    /// An attempt was sent at `sent_at_ms` and its result is unknown; `retry_after`
    /// when a repeat may settle it (a failed lookup), `None` when only a person can.
    OutcomeUnknown {
        sent_at_ms: u64,
        because: UnknownBecause,
        retry_after: Option<u64>,
    },
    /// Sealed, and no listed key opens it: never executed again.
    Unreadable,
}

impl Refusal {
    /// The answer (problem+json, or a tool error on an MCP route) for route `route`.
    pub fn problem(self, route: &str) -> Problem {
        match self {
            Refusal::CredentialMismatch => problem::credential_mismatch(),
            Refusal::KeyReused => problem::key_reused(),
            Refusal::ResponseNotStored { status } => problem::response_not_stored(status),
            Refusal::InProgress { retry_after } => problem::in_progress(route, retry_after),
            Refusal::OutcomeUnknown {
                sent_at_ms,
                because,
                retry_after,
            } => problem::outcome_unknown(route, sent_at_ms, because, retry_after),
            Refusal::Unreadable => problem::record_unreadable(route),
        }
    }

    /// How the request is counted (`idem_requests_total{outcome}`).
    pub fn outcome(self) -> Outcome {
        match self {
            Refusal::CredentialMismatch => Outcome::Rejected,
            Refusal::KeyReused => Outcome::Mismatch,
            Refusal::ResponseNotStored { .. }
            | Refusal::InProgress { .. }
            | Refusal::OutcomeUnknown { .. }
            | Refusal::Unreadable => Outcome::Conflict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_code_status_and_count() {
        let cases = [
            (
                Refusal::CredentialMismatch,
                403,
                "credential_mismatch",
                Outcome::Rejected,
            ),
            (
                Refusal::KeyReused,
                422,
                "idempotency_key_reused",
                Outcome::Mismatch,
            ),
            (
                Refusal::ResponseNotStored { status: 201 },
                409,
                "response_not_stored",
                Outcome::Conflict,
            ),
            (
                Refusal::InProgress { retry_after: 3 },
                409,
                "request_in_progress",
                Outcome::Conflict,
            ),
            (
                Refusal::OutcomeUnknown {
                    sent_at_ms: 0,
                    because: UnknownBecause::Held,
                    retry_after: None,
                },
                409,
                "outcome_unknown",
                Outcome::Conflict,
            ),
            (
                Refusal::Unreadable,
                409,
                "record_unreadable",
                Outcome::Conflict,
            ),
        ];
        for (refusal, status, code, outcome) in cases {
            let p = refusal.problem("charge");
            assert_eq!((p.status.as_u16(), p.code), (status, code), "{refusal:?}");
            assert_eq!(refusal.outcome(), outcome, "{refusal:?}");
        }
    }
}
