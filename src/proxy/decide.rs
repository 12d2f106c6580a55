//! SPEC §1's two decisions as pure functions, the flow doing only the I/O around them:
//! - [`decide`]: a duplicate's — given the record already under the key, this request's
//!   intent and the route's policy, what the flow does next (replay, refuse, wait, take
//!   over for a new attempt). No I/O and no clock: the flow passes the wall-clock time
//!   and whether it may still wait.
//! - [`settle`]: the winner's — the outcome classes, what a finished exchange with the
//!   upstream does to the reservation (store, release, hold).
//! - [`lookup_status`] and [`lookup_read`] (`decide/lookup.rs`): what a reconciliation
//!   lookup's answer says about an unknown outcome (found, absent, or neither).
//!
//! An attempt outlives its lease (SPEC §1 "Unknown outcomes"): a record in progress
//! whose lease has ended is an **unknown outcome**, and what a repeat gets is the
//! route's `on_unknown` — forward again under a new lease (`retry`, within
//! `upstream_key_window`), ask the upstream first (`reconcile`), or 409 `outcome_unknown`
//! (`hold`). Taking it over is a fenced store write ([`crate::store::Store::take_over`]).
//! A waiting duplicate naps until the lease's end at the latest, then looks again.

mod lookup;

pub use lookup::{lookup_read, lookup_status, Lookup};

use std::time::Duration;

use bytes::Bytes;

use super::intent::Intent;
use super::problem::UnknownBecause;
use super::refusal::Refusal;
use crate::policy::{OnAmbiguous, OnFailure, OnUnknown, RoutePolicy};
use crate::store::{Phase, Record, StoredResponse, Token};

/// The longest a waiting duplicate sleeps between looks at the record: a safety net
/// against a lost wake-up notification.
pub const MAX_NAP: Duration = Duration::from_secs(1);

/// What to do about the record found under the key.
#[derive(Debug)]
pub enum Decision<'r> {
    /// The record is this request's own reservation (the client layer retried a
    /// reservation whose reply was lost): it won.
    Won,
    /// Completed, same request, same credentials: answer with the stored response
    /// (`body` is its body: a record kept without one is refused instead).
    Replay {
        stored: &'r StoredResponse,
        body: &'r Bytes,
    },
    /// A stored 4xx under `on_failure: retry`: take the record over for the next
    /// attempt (a compare-and-swap on its token; of several duplicates one wins).
    NewAttempt,
    /// Still in progress and the route waits: wait for a change, at most `nap`.
    Wait { nap: Duration },
    /// An unknown outcome (`on_unknown: retry` within the key window, or settled as not
    /// executed): take the attempt over and forward it again, same upstream key.
    Retry,
    /// An unknown outcome under `on_unknown: reconcile`: ask the upstream first.
    Reconcile,
    /// Refuse, for this reason (the flow builds the answer from it).
    Refuse(Refusal),
}

/// Decide about `existing`, found under this intent's key while reserving with `own`.
/// `may_wait`: the route has `on_concurrent: wait` and its `wait_timeout` has not passed.
pub fn decide<'r>(
    existing: &'r Record,
    intent: &Intent,
    own: &Token,
    policy: &RoutePolicy,
    may_wait: bool,
    now_ms: u64,
) -> Decision<'r> {
    if existing.token == *own {
        return Decision::Won;
    }
    // Credentials first: a stranger learns nothing about the request.
    if !intent.same_caller(&existing.credentials) {
        return Decision::Refuse(Refusal::CredentialMismatch);
    }
    if existing.fingerprint != intent.fingerprint {
        return Decision::Refuse(Refusal::KeyReused);
    }
    // The record's one classification (SPEC §1), shared with the admin's views.
    match existing.phase(now_ms) {
        Phase::Completed => match &existing.response {
            Some(stored) if policy.on_failure == OnFailure::Retry && failed(stored) => {
                Decision::NewAttempt
            }
            Some(stored) => answer(stored),
            // A completed record always carries its response; were one to come without,
            // it is treated as in progress, never executed a second time.
            None => in_flight(existing, may_wait, now_ms),
        },
        // Settled as not executed (its lease ended with the settlement): forward again.
        Phase::NotExecuted => Decision::Retry,
        // In progress, its lease ended: the outcome is unknown.
        Phase::Unknown => unknown(existing, policy, now_ms),
        Phase::InFlight => in_flight(existing, may_wait, now_ms),
    }
}

/// A stored 4xx: under `on_failure: retry`, a repeat is a new attempt.
fn failed(stored: &StoredResponse) -> bool {
    (400..500).contains(&stored.status)
}

/// A completed record's answer: its stored response, or 409 when the response was too
/// large to keep (never a second execution). Also the answer of a record just settled
/// from the upstream's records (`reconcile:`), which SPEC §1 replays whatever its status.
pub fn answer(stored: &StoredResponse) -> Decision<'_> {
    match &stored.body {
        Some(body) => Decision::Replay { stored, body },
        None => Decision::Refuse(Refusal::ResponseNotStored {
            status: stored.status,
        }),
    }
}

/// A record in progress whose lease is live: wait for it, or 409 with `Retry-After`.
fn in_flight<'r>(existing: &Record, may_wait: bool, now_ms: u64) -> Decision<'r> {
    if may_wait {
        // Wake on completion, at the lease's end (its owner may have died), or after
        // `MAX_NAP` as a safety net.
        let nap = remaining(existing, now_ms) + Duration::from_millis(5);
        return Decision::Wait {
            nap: nap.min(MAX_NAP),
        };
    }
    Decision::Refuse(Refusal::InProgress {
        retry_after: retry_after_secs(existing, now_ms),
    })
}

/// A repeat of an attempt whose outcome is unknown (SPEC §1, the `on_unknown` table).
fn unknown<'r>(existing: &Record, policy: &RoutePolicy, now_ms: u64) -> Decision<'r> {
    let refuse = |because| {
        Decision::Refuse(Refusal::OutcomeUnknown {
            sent_at_ms: existing.sent_at_ms,
            because,
            retry_after: None,
        })
    };
    match policy.on_unknown {
        OnUnknown::Retry => {
            let age = Duration::from_millis(now_ms.saturating_sub(existing.sent_at_ms));
            match policy.retry_window() {
                Some(window) if age >= window => refuse(UnknownBecause::KeyWindowPassed),
                _ => Decision::Retry,
            }
        }
        OnUnknown::Reconcile => Decision::Reconcile,
        OnUnknown::Hold => refuse(UnknownBecause::Held),
    }
}

/// Time left on `record`'s lease (in progress) or retention (completed).
pub fn remaining(record: &Record, now_ms: u64) -> Duration {
    Duration::from_millis(record.expires_at_ms.saturating_sub(now_ms))
}

/// Whole seconds until `record`'s lease or retention ends, at least 1 (`Retry-After`).
pub fn retry_after_secs(record: &Record, now_ms: u64) -> u64 {
    (remaining(record, now_ms).as_millis() as u64)
        .div_ceil(1000)
        .max(1)
}

/// How the winner's exchange with the upstream ended (SPEC §1, outcome classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchanged {
    /// Connection refused, nothing sent: nothing happened upstream.
    NotSent,
    /// Sent, but no complete answer (timeout, reset, a stalled or broken body): the
    /// effect may or may not have happened.
    Ambiguous,
    /// A complete answer with this status.
    Answered(u16),
    /// Not sent: the owner's lease ended or was lost before the request was written
    /// (the send guard, `upstream/gate.rs`). Nothing happened upstream.
    Withheld,
    /// A complete answer that is not the call's outcome: on an MCP route an HTTP error
    /// (an unknown session, a malformed request), a non-final result such as
    /// `input_required`, or no response for the call's id.
    NotFinal,
}

/// What becomes of the winner's reservation once its exchange has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Store the outcome as the record's completion (replayed to every repeat).
    Store,
    /// Delete the reservation: a retry is forwarded again, with the same upstream key.
    Release,
    /// Keep the reservation, unrenewed: repeats get 409 until its lease ends, then it
    /// is an unknown outcome (`on_unknown`).
    Hold,
}

/// The outcome classes of SPEC §1: what a finished exchange does to the reservation.
pub fn settle(exchanged: Exchanged, policy: &RoutePolicy) -> Settle {
    match exchanged {
        Exchanged::NotSent | Exchanged::NotFinal | Exchanged::Withheld => Settle::Release,
        Exchanged::Ambiguous => match policy.on_ambiguous {
            OnAmbiguous::Hold => Settle::Hold,
            OnAmbiguous::Release => Settle::Release,
        },
        // 2xx and definitive 4xx by default; 401/403/407/408/409/425/429 never (`StatusSet`).
        Exchanged::Answered(status) if policy.store_statuses.contains(status) => Settle::Store,
        Exchanged::Answered(_) => Settle::Release,
    }
}

#[cfg(test)]
mod tests;
