//! [`ModelStore`]: one intent's record under idem's store operations, each atomic and
//! judged on the store's own clock (Redis scripts read `TIME`, PostgreSQL `now()`, the
//! memory store a monotonic clock). It is the reference the model checker explores, and
//! public so that a model-based test of the real stores can apply the same operation
//! sequences to both and compare the answers.
//!
//! The `*_at` variants take the time a write is judged and stamped with from the caller:
//! only the model's "own clock" mutant passes a proxy's clock there (the bug the store
//! clock fixes); every public operation uses [`ModelStore::clock`].

use idem_fence::{refusal, Condition, Found, Write};

use crate::record::{Outcome, Record, Reserved, Resolution, Settled, Tick, Token};

/// Deliberate bugs in the store's guards, for the mutants that show the checker can
/// fail. All off in the correct protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StoreBugs {
    /// `take_over` (and the reconcile settle) replaces a record whose lease is live.
    pub takeover_ignores_lease: bool,
    /// `complete` overwrites whatever record is there, whoever owns it.
    pub complete_ignores_token: bool,
    /// `resolve` settles any unknown outcome, not only the attempt the operator read.
    pub resolve_ignores_token: bool,
}

/// One record and the store's clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelStore {
    clock: Tick,
    lease: Tick,
    record: Option<Record>,
    bugs: StoreBugs,
}

impl ModelStore {
    /// An empty store whose clock reads 0, granting leases of `lease` ticks.
    pub fn new(lease: Tick) -> Self {
        Self::with_bugs(lease, StoreBugs::default())
    }

    /// As [`ModelStore::new`], with deliberate bugs (mutants).
    pub fn with_bugs(lease: Tick, bugs: StoreBugs) -> Self {
        ModelStore {
            clock: 0,
            lease,
            record: None,
            bugs,
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> Tick {
        self.clock
    }

    /// The lease a reservation or renewal grants.
    pub fn lease(&self) -> Tick {
        self.lease
    }

    /// The record, if any.
    pub fn record(&self) -> Option<Record> {
        self.record
    }

    /// Let `ticks` pass on the store's clock (it never goes back).
    pub fn advance_clock(&mut self, ticks: Tick) {
        self.clock += ticks;
    }

    /// Replace the whole record: a failover to a replica that had an older state.
    pub(crate) fn restore(&mut self, record: Option<Record>) {
        self.record = record;
    }

    /// Reserve the key for `token`: absent → a new attempt (lease `clock + lease`,
    /// `sent_at = clock`, attempt 1) and `Won`; else the record and the store's clock.
    pub fn reserve(&mut self, token: Token) -> Reserved {
        self.reserve_at(self.clock, token)
    }

    pub(crate) fn reserve_at(&mut self, at: Tick, token: Token) -> Reserved {
        match self.record {
            Some(record) => Reserved::Exists { record, now: at },
            None => {
                self.record = Some(self.attempt(at, token, at, 1));
                Reserved::Won
            }
        }
    }

    /// Extend `token`'s lease to `clock + lease` (`Write::Renew`): only while the record
    /// is `token`'s attempt and its lease has not ended. An owner back from a pause
    /// longer than its lease does not revive an attempt others may have read as an
    /// unknown outcome (idem's `Store::renew`).
    pub fn renew(&mut self, token: Token) -> bool {
        self.renew_at(self.clock, token)
    }

    pub(crate) fn renew_at(&mut self, at: Tick, token: Token) -> bool {
        let found = self.found(at, Some(token), None);
        self.admits(Write::Renew, found) && self.set_lease_end(token, at + self.lease)
    }

    /// Moves the lease's end of `token`'s attempt to `end`, only while it is in progress.
    fn set_lease_end(&mut self, token: Token, end: Tick) -> bool {
        match &mut self.record {
            Some(Record::InProgress {
                token: t,
                lease_end,
                ..
            }) if *t == token => {
                *lease_end = end;
                true
            }
            _ => false,
        }
    }

    /// Store `outcome` as the record's completion (`Write::ReplaceIfOwner`): only while
    /// it carries `token`.
    pub fn complete(&mut self, token: Token, outcome: Outcome) -> bool {
        let mut found = self.found(self.clock, Some(token), None);
        found.owner |= self.bugs.complete_ignores_token;
        if !self.admits(Write::ReplaceIfOwner, found) {
            return false;
        }
        self.record = Some(Record::Completed {
            token,
            outcome,
            settled: None,
        });
        true
    }

    /// Delete the record (`Write::ReleaseIfOwner`): only while it carries `token`
    /// (nothing was sent).
    pub fn release(&mut self, token: Token) -> bool {
        let found = self.found(self.clock, Some(token), None);
        if self.admits(Write::ReleaseIfOwner, found) {
            self.record = None;
            return true;
        }
        false
    }

    /// End `token`'s lease now, keeping the attempt as an unknown outcome
    /// (`Write::ReplaceIfOwner`): what an owner that took over an unknown outcome does
    /// when its own send failed before reaching the upstream (the key was sent before,
    /// so the record must remember `sent_at`). The owner only ever ends the lease of an
    /// attempt in progress.
    pub fn end_lease(&mut self, token: Token) -> bool {
        let found = self.found(self.clock, Some(token), None);
        self.admits(Write::ReplaceIfOwner, found) && self.set_lease_end(token, self.clock)
    }

    /// Take over the unknown outcome whose token the caller read (`seen`), to forward
    /// it again: same attempt (same upstream key) and `sent_at`, a new lease from now.
    /// Only if the record is still that attempt, its lease has ended by the clock, and
    /// (for `on_unknown: retry`, `window` set) the key window has not passed since
    /// `sent_at` — judged here, not when the duplicate decided: a duplicate paused
    /// between its read and this write must not forward past the window. An attempt an
    /// operator settled as not executed is taken over whatever the window.
    pub fn take_over(&mut self, seen: Token, token: Token, window: Option<Tick>) -> bool {
        self.take_over_at(self.clock, seen, token, window)
    }

    pub(crate) fn take_over_at(
        &mut self,
        at: Tick,
        seen: Token,
        token: Token,
        window: Option<Tick>,
    ) -> bool {
        let Some(Record::InProgress {
            sent_at,
            attempt,
            settled,
            ..
        }) = self.record
        else {
            return false;
        };
        // An attempt an operator settled as not executed: its token fences that read,
        // whatever the window (the proxy passes none then).
        let window = window.filter(|_| settled != Some(Settled::NotExecuted));
        if !self.admits(Write::TakeOver, self.found_unknown(at, Some(seen), window)) {
            return false;
        }
        self.record = Some(self.attempt(at, token, sent_at, attempt));
        true
    }

    /// Settle the unknown outcome `seen` with what the upstream's records say
    /// (`on_unknown: reconcile`, found): the same guard as [`ModelStore::take_over`].
    pub fn reconcile(&mut self, seen: Token, token: Token, outcome: Outcome) -> bool {
        self.reconcile_at(self.clock, seen, token, outcome)
    }

    pub(crate) fn reconcile_at(&mut self, at: Tick, seen: Token, token: Token, o: Outcome) -> bool {
        if !self.admits(Write::TakeOver, self.found_unknown(at, Some(seen), None)) {
            return false;
        }
        self.record = Some(Record::Completed {
            token,
            outcome: o,
            settled: Some(Settled::Reconciled),
        });
        true
    }

    /// An operator's resolution of the unknown outcome `seen` (the admin API), with
    /// the takeover's guard. `NotExecuted` leaves an attempt whose lease ends now, so
    /// the next repeat takes it over and forwards it.
    pub fn resolve(&mut self, seen: Token, token: Token, resolution: Resolution) -> bool {
        let seen = (!self.bugs.resolve_ignores_token).then_some(seen);
        if !self.admits(Write::TakeOver, self.found(self.clock, seen, None)) {
            return false;
        }
        self.record = Some(match (resolution, self.record) {
            (Resolution::Completed(outcome), _) => Record::Completed {
                token,
                outcome,
                settled: Some(Settled::Resolved),
            },
            (
                Resolution::NotExecuted,
                Some(Record::InProgress {
                    sent_at, attempt, ..
                }),
            ) => Record::InProgress {
                token,
                lease_end: self.clock,
                sent_at,
                attempt,
                settled: Some(Settled::NotExecuted),
            },
            (Resolution::NotExecuted, _) => unreachable!("the fence checked InProgress"),
        });
        true
    }

    /// A new attempt after a stored failure (`on_failure: retry`): a compare-and-swap
    /// on the stored record's token (`Write::ReplaceIfOwner`), which the proxy sends only
    /// for a stored failure; attempt + 1 (a new upstream key), `sent_at` now.
    pub fn new_attempt(&mut self, seen: Token, token: Token) -> bool {
        let found = self.found(self.clock, Some(seen), None);
        match self.record {
            Some(Record::Completed { outcome, .. })
                if !outcome.ok && self.admits(Write::ReplaceIfOwner, found) =>
            {
                self.record =
                    Some(self.attempt(self.clock, token, self.clock, outcome.attempt + 1));
                true
            }
            _ => false,
        }
    }

    /// The condition of `write`'s row in the fence table (`idem_fence::FENCES`) that
    /// refuses it now for a writer holding `token` (`None`: whatever token), with a
    /// takeover's `window`: the model-based test names it when a store disagrees.
    pub fn refusal(
        &self,
        write: Write,
        token: Option<Token>,
        window: Option<Tick>,
    ) -> Option<Condition> {
        refusal(write, &self.found(self.clock, token, window))
    }

    fn admits(&self, write: Write, found: Found) -> bool {
        refusal(write, &found).is_none()
    }

    /// What the store finds at `at` for a writer holding `token` (`None`: any), with a
    /// takeover's key `window`.
    fn found(&self, at: Tick, token: Option<Token>, window: Option<Tick>) -> Found {
        let record = self.record;
        let sent_at = match record {
            Some(Record::InProgress { sent_at, .. }) => Some(sent_at),
            _ => None,
        };
        Found {
            owner: record.is_some_and(|r| token.is_none_or(|t| r.token() == t)),
            in_progress: sent_at.is_some(),
            lease_ended: record.is_some_and(|r| r.lease_ended(at)),
            within_key_window: window
                .is_none_or(|w| sent_at.is_some_and(|s| at.saturating_sub(s) < w)),
        }
    }

    /// As [`ModelStore::found`] for a takeover or a reconcile, with the mutant that
    /// ignores the lease.
    fn found_unknown(&self, at: Tick, seen: Option<Token>, window: Option<Tick>) -> Found {
        let mut found = self.found(at, seen, window);
        found.lease_ended |= self.bugs.takeover_ignores_lease;
        found
    }

    fn attempt(&self, at: Tick, token: Token, sent_at: Tick, attempt: u8) -> Record {
        Record::InProgress {
            token,
            lease_end: at + self.lease,
            sent_at,
            attempt,
            settled: None,
        }
    }
}
