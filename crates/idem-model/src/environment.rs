//! Everything that acts on idem from outside a request: time passing, proxy crashes,
//! Redis replication, failover and eviction, the operator resolving an unknown outcome,
//! and the waiting duplicate's wake-up protocol.

use crate::action::Action;
use crate::config::{Config, Mutant};
use crate::record::{Record, Resolution};
use crate::state::{Operator, Phase, Stage, State, Waiter};

/// One tick passes. Any proxy may take no step meanwhile: that is how a pause (GC,
/// SIGSTOP) longer than a lease appears in the model.
pub(crate) fn tick(s: &mut State) {
    s.store.advance_clock(1);
}

/// Proxy `p` crashes and restarts with nothing in memory. A call it had written has
/// reached the upstream or is on its way there (`Stage::Awaiting`, `Stage::Sent`); one
/// it had not, never will.
pub(crate) fn crash(s: &mut State, p: usize) {
    s.budget.crashes -= 1;
    if matches!(
        s.proxies[p],
        Phase::Owner {
            stage: Stage::Awaiting(_) | Stage::Sent,
            ..
        }
    ) {
        s.ghost.crashed_in_flight = true;
    }
    s.proxies[p] = Phase::Idle;
}

/// The replica catches up with the primary (Redis without `wait_replicas`).
pub(crate) fn replicate(s: &mut State) {
    s.replica = s.store.record();
}

/// The primary fails and the replica is promoted: writes it had not received are lost.
/// No one is notified (waiters wake later by their safety-net nap, not modelled).
pub(crate) fn fail_over(s: &mut State) {
    s.budget.failovers -= 1;
    s.store.restore(s.replica);
    s.ghost.failed_over = true;
}

/// A step whose store write was acknowledged only once the replica had it
/// (`owner::waited`) leaves the replica with the primary's record: replication is in
/// order, so it carries every earlier write too.
pub(crate) fn replicated_if_waited(
    config: &Config,
    s: &mut State,
    action: Action,
    before: Option<Record>,
) {
    if s.store.record() != before && crate::owner::waited(config, action) {
        s.replica = s.store.record();
    }
}

/// Redis evicts the record (a `maxmemory-policy` other than `noeviction`: every record
/// has a TTL, so `volatile-*` policies may pick it). idem refuses to be ready on such a
/// Redis; the eviction is replicated later, like any write.
pub(crate) fn evict(s: &mut State) {
    s.budget.evictions -= 1;
    s.store.restore(None);
}

/// The operator lists an unknown outcome (in progress, lease ended by the store's
/// clock, not already settled) and checks the upstream's records for its attempt.
pub(crate) fn may_look(s: &State) -> bool {
    let unknown = matches!(s.store.record(), Some(r @ Record::InProgress { settled: None, .. }) if r.lease_ended(s.now()));
    s.operator == Operator::Idle && s.budget.resolutions > 0 && unknown
}

pub(crate) fn look(s: &mut State) {
    let record = s.store.record().expect("may_look checked a record");
    s.operator = Operator::Looked {
        seen: record.token(),
        found: s.upstream.lookup(record.attempt()),
    };
}

/// The operator resolves what it looked at: completed with the outcome the upstream's
/// records showed, or not executed if they showed nothing.
pub(crate) fn resolve(s: &mut State) {
    let Operator::Looked { seen, found } = s.operator else {
        unreachable!("resolve is enabled only after a look");
    };
    s.operator = Operator::Idle;
    s.budget.resolutions -= 1;
    let resolution = found.map_or(Resolution::NotExecuted, Resolution::Completed);
    let token = s.fresh_token();
    if s.store.resolve(seen, token, resolution) {
        s.notify();
        s.ghost.resolved = true;
    }
}

/// The waiter subscribes to the key's changes (in the correct order, before reading).
pub(crate) fn subscribe(s: &mut State) {
    s.waiter = match s.waiter {
        Waiter::Idle => Waiter::Subscribed { woken: false },
        Waiter::ReadFirst { seen } => Waiter::Waiting { seen, woken: false },
        other => other,
    };
}

/// The waiter reads the record: an attempt in progress is waited for; anything else
/// (completed, gone) needs no wait.
pub(crate) fn read(config: &Config, s: &mut State) {
    let in_progress = match s.store.record() {
        Some(r @ Record::InProgress { .. }) => Some(r.token()),
        _ => None,
    };
    s.waiter = match (s.waiter, in_progress) {
        (_, None) => Waiter::Done,
        (Waiter::Subscribed { woken }, Some(seen)) => Waiter::Waiting { seen, woken },
        (Waiter::Idle, Some(seen)) if config.has(Mutant::ReadThenSubscribe) => {
            Waiter::ReadFirst { seen }
        }
        (other, Some(_)) => other,
    };
}
