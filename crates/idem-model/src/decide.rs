//! The duplicate's decision (`src/proxy/decide.rs` in idem), reduced to what the
//! protocol needs: given the record `reserve` answered and the time to judge it by,
//! what the duplicate does next. Pure, like idem's.

use crate::config::{Config, Mutant, OnUnknown, MAX_ATTEMPTS};
use crate::record::{Outcome, Record, Settled, Tick};

/// What a duplicate does about the record it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Completed: answer the stored outcome.
    Replay(Outcome),
    /// A stored failure under `on_failure: retry`: take it for a new attempt.
    NewAttempt,
    /// An unknown outcome to forward again (same upstream key).
    TakeOver,
    /// An unknown outcome to check with the upstream's records first.
    Reconcile,
    /// 409 (in progress, or an unknown outcome held): nothing changes.
    Refuse,
}

/// Decide about `record`, read at `now` (the store's clock in the correct protocol).
pub fn decide(config: &Config, record: &Record, now: Tick) -> Decision {
    match *record {
        Record::Completed { outcome, .. } => {
            let retry = config.on_failure_retry && !outcome.ok && outcome.attempt < MAX_ATTEMPTS;
            if retry {
                Decision::NewAttempt
            } else {
                Decision::Replay(outcome)
            }
        }
        Record::InProgress { lease_end, .. } if lease_end > now => Decision::Refuse,
        Record::InProgress {
            settled: Some(Settled::NotExecuted),
            ..
        } => Decision::TakeOver,
        Record::InProgress { sent_at, .. } => match config.on_unknown {
            OnUnknown::Retry { window } => {
                let within = now.saturating_sub(sent_at) < window;
                if within || config.has(Mutant::RetryPastWindow) {
                    Decision::TakeOver
                } else {
                    Decision::Refuse
                }
            }
            OnUnknown::Reconcile => Decision::Reconcile,
            OnUnknown::Hold => Decision::Refuse,
        },
    }
}
