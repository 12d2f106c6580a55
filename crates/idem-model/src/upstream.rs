//! The upstream tool API: what it executed, what it answered, and what its records say
//! when asked (reconcile lookups, an operator checking before a resolution).
//!
//! An execution happens atomically when the call reaches it; the proxy reads the answer
//! later (or never: timeout, crash). A lookup reads the same records atomically: the
//! model assumes the upstream's search is consistent with its effects.

use crate::config::UpstreamKind;
use crate::record::{Outcome, Tick};

/// The upstream's records for the intent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Upstream {
    /// Per attempt (index `attempt - 1`): when its key was first executed, and the
    /// answer then (what a deduplicating upstream answers to the same key, and what
    /// its records say).
    first: Vec<Option<(Tick, Outcome)>>,
    /// Every answer given, per attempt, as a bit set of answer ids.
    given: Vec<u16>,
    /// Successful executions (side effects), all attempts together.
    pub effects: u8,
    answers: u8,
}

impl Upstream {
    pub fn new(attempts: u8) -> Self {
        Upstream {
            first: vec![None; attempts.into()],
            given: vec![0; attempts.into()],
            effects: 0,
            answers: 0,
        }
    }

    /// A call for `attempt` reaches the upstream at `now`; `ok` says whether it
    /// succeeds if it executes. Answers the outcome.
    pub fn call(&mut self, kind: UpstreamKind, attempt: u8, now: Tick, ok: bool) -> Outcome {
        let i = usize::from(attempt - 1);
        if let (UpstreamKind::Dedup { window }, Some((at, first))) = (kind, self.first[i]) {
            if now < at + window {
                return first;
            }
        }
        self.answers += 1;
        let outcome = Outcome {
            id: self.answers,
            attempt,
            ok,
        };
        self.effects += u8::from(ok);
        if self.first[i].is_none() {
            self.first[i] = Some((now, outcome));
        }
        self.given[i] |= 1 << outcome.id;
        outcome
    }

    /// What the upstream's records say about `attempt`: the first execution's answer,
    /// or nothing if its key was never executed.
    pub fn lookup(&self, attempt: u8) -> Option<Outcome> {
        self.first[usize::from(attempt - 1)].map(|(_, o)| o)
    }

    /// Whether the upstream ever answered `outcome`.
    pub fn gave(&self, outcome: Outcome) -> bool {
        let i = usize::from(outcome.attempt - 1);
        self.given
            .get(i)
            .is_some_and(|g| g & (1 << outcome.id) != 0)
    }
}
