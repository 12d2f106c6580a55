//! The properties the checker proves (`always`, over every reachable state) and the
//! milestones it must reach (`sometimes`, so that a proof is not vacuous).

use stateright::Property;

use crate::model::IdemModel;
use crate::state::{State, Waiter};

/// At most one side effect per intent: the upstream executed successfully at most
/// once. A deduplicated repeat (a `retry` within the key window at an upstream that
/// deduplicates) is no execution.
pub const AT_MOST_ONE_EFFECT: &str = "at most one effect per intent";
/// Every replay answers an outcome the upstream actually gave for that attempt.
pub const REPLAY_IS_RECORDED_OUTCOME: &str = "a replay is the recorded outcome";
/// Once a caller got an outcome, no caller gets a different one later, and the store
/// keeps it (or an attempt that will be settled from the upstream's records).
pub const ACKED_NEVER_LOST: &str = "an acknowledged outcome is never lost";
/// An owner holding an outcome stops storing it only when the store says the record
/// is no longer its own.
pub const HELD_OUTCOME_NOT_DROPPED: &str = "a held outcome is never dropped while owned";
/// No takeover replaces an attempt whose lease is live on the store's clock (SPEC:
/// a replica whose clock is ahead "never takes over a live lease").
pub const LIVE_LEASE_NEVER_TAKEN: &str = "a live lease is never taken over";
/// A waiter that sleeps on an attempt is woken by any change to it.
pub const WAITER_NOT_STRANDED: &str = "a waiter is woken by the change it waits for";

pub const COMPLETED: &str = "sometimes: an owner stores an outcome";
pub const REPLAYED: &str = "sometimes: a duplicate gets a replay";
pub const TAKEN_OVER: &str = "sometimes: an unknown outcome is taken over";
pub const RECONCILED: &str = "sometimes: an unknown outcome is reconciled";
pub const RESOLVED: &str = "sometimes: an operator resolves an unknown outcome";
pub const CRASH_IN_FLIGHT: &str = "sometimes: an owner crashes after sending";
pub const WAITER_WOKEN: &str = "sometimes: a waiter is woken";
pub const FAILED_OVER: &str = "sometimes: the store fails over";
pub const WITHHELD: &str = "sometimes: the send guard withholds a call";
pub const VANISHED: &str = "sometimes: a record vanishes under its owner";

/// Every property, the safety ones first.
pub fn all() -> Vec<Property<IdemModel>> {
    vec![
        Property::always(AT_MOST_ONE_EFFECT, |_, s: &State| s.upstream.effects <= 1),
        Property::always(REPLAY_IS_RECORDED_OUTCOME, |_, s: &State| {
            !s.ghost.bad_replay
        }),
        Property::always(ACKED_NEVER_LOST, |m: &IdemModel, s: &State| {
            !s.ghost.contradicted && s.acked_kept(&m.config)
        }),
        Property::always(HELD_OUTCOME_NOT_DROPPED, |_, s: &State| !s.ghost.dropped),
        Property::always(LIVE_LEASE_NEVER_TAKEN, |_, s: &State| {
            !s.ghost.took_live_lease
        }),
        Property::always(WAITER_NOT_STRANDED, |_, s: &State| waiter_not_stranded(s)),
        Property::sometimes(COMPLETED, |_, s: &State| s.ghost.completed),
        Property::sometimes(REPLAYED, |_, s: &State| s.ghost.replayed),
        Property::sometimes(TAKEN_OVER, |_, s: &State| s.ghost.taken_over),
        Property::sometimes(RECONCILED, |_, s: &State| s.ghost.reconciled),
        Property::sometimes(RESOLVED, |_, s: &State| s.ghost.resolved),
        Property::sometimes(CRASH_IN_FLIGHT, |_, s: &State| s.ghost.crashed_in_flight),
        Property::sometimes(WAITER_WOKEN, |_, s: &State| {
            matches!(s.waiter, Waiter::Waiting { woken: true, .. })
        }),
        Property::sometimes(FAILED_OVER, |_, s: &State| s.ghost.failed_over),
        Property::sometimes(WITHHELD, |_, s: &State| s.ghost.withheld),
        Property::sometimes(VANISHED, |_, s: &State| s.ghost.vanished),
    ]
}

/// The safety properties' names.
pub const SAFETY: [&str; 6] = [
    AT_MOST_ONE_EFFECT,
    REPLAY_IS_RECORDED_OUTCOME,
    ACKED_NEVER_LOST,
    HELD_OUTCOME_NOT_DROPPED,
    LIVE_LEASE_NEVER_TAKEN,
    WAITER_NOT_STRANDED,
];

/// A sleeping, unwoken waiter still sees the attempt it read: every write that
/// changes the record's owner or state notifies (only a renewal is silent, and it
/// keeps the token).
fn waiter_not_stranded(s: &State) -> bool {
    match s.waiter {
        Waiter::Waiting { seen, woken: false } => s.store.record().is_some_and(|r| {
            r.token() == seen && matches!(r, crate::record::Record::InProgress { .. })
        }),
        _ => true,
    }
}
