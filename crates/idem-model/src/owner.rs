//! The owner's side (`src/proxy/lease.rs`, `execute.rs` and the send guard
//! `src/upstream/gate.rs` in idem): send the call only while the send guard allows it,
//! renew the lease while it connects and while the call runs, then store the outcome,
//! release the reservation (nothing was sent) or hold it (the outcome is unknown). Each
//! function is one atomic step of one proxy.

use crate::config::{Backend, Config, Mutant};
use crate::duplicate::judge_time;
use crate::record::{Outcome, Record, Tick, Token};
use crate::state::{Phase, Stage, State, Wire};

/// The owner's fields, for the steps below.
#[derive(Clone, Copy)]
struct Own {
    token: Token,
    attempt: u8,
    lease_until: Tick,
    lost: bool,
    retried: bool,
    stage: Stage,
}

fn parts(s: &State, p: usize) -> Own {
    match s.proxies[p] {
        Phase::Owner {
            token,
            attempt,
            lease_until,
            lost,
            retried,
            stage,
        } => Own {
            token,
            attempt,
            lease_until,
            lost,
            retried,
            stage,
        },
        _ => unreachable!("an owner step of a proxy that owns nothing"),
    }
}

fn set_stage(s: &mut State, p: usize, next: Stage) {
    if let Phase::Owner { stage, .. } = &mut s.proxies[p] {
        *stage = next;
    }
}

/// The send guard (`SendGate::check`), right before the request's first byte is
/// written: no renewal found the lease lost, and the deadline less the margin is still
/// ahead. The deadline is never later than the store's lease end, and a request takes
/// at most `delivery_delay` to arrive: with `delivery_delay <= margin` it executes while
/// the store still holds the lease, so no one else can have taken the attempt over.
/// [`Mutant::NoSendGuard`] sends whenever the owner gets here.
pub(crate) fn may_send(config: &Config, s: &State, p: usize) -> bool {
    let o = parts(s, p);
    o.stage == Stage::Ready && (config.has(Mutant::NoSendGuard) || gate_open(config, s, o))
}

fn gate_open(config: &Config, s: &State, o: Own) -> bool {
    !o.lost && s.now() + config.margin < o.lease_until
}

/// The request is written: it executes at the upstream now, or (with a delivery delay)
/// is on the wire until a [`deliver`] step, at the latest `delivery_delay` from now.
/// `ok` says whether an execution succeeds.
pub(crate) fn send(config: &Config, s: &mut State, p: usize, ok: bool) {
    let o = parts(s, p);
    if config.delivery_delay == 0 {
        let outcome = s.upstream.call(config.upstream, o.attempt, s.now(), ok);
        set_stage(s, p, Stage::Awaiting(outcome));
        return;
    }
    let wire = Wire {
        by: s.now() + config.delivery_delay,
        token: o.token,
        attempt: o.attempt,
        ok,
    };
    s.wire.push(wire);
    s.wire.sort_unstable();
    set_stage(s, p, Stage::Sent);
}

/// The request on the wire at `i` reaches the upstream, which executes it (or,
/// deduplicating, answers the first answer); the answer goes to the owner still waiting
/// for it, if any (it may have crashed or timed out meanwhile).
pub(crate) fn deliver(config: &Config, s: &mut State, i: usize) {
    let w = s.wire.remove(i);
    let outcome = s.upstream.call(config.upstream, w.attempt, s.now(), w.ok);
    for phase in &mut s.proxies {
        if let Phase::Owner {
            token,
            stage: stage @ Stage::Sent,
            ..
        } = phase
        {
            if *token == w.token {
                *stage = Stage::Awaiting(outcome);
            }
        }
    }
}

/// Nothing was sent: the connection was refused, or the send guard withheld the call
/// (`Exchanged::Withheld`, 503 `lease_lost`). The reservation is released with the
/// owner-checked write. An attempt that took over a record with history (an unknown
/// outcome whose key was sent before, or a stored failure) must not delete it: its
/// lease ends now instead, unless the model reproduces idem's release
/// (`Config::release_forgets_sent`).
pub(crate) fn not_sent(config: &Config, s: &mut State, p: usize) {
    let o = parts(s, p);
    if !may_send(config, s, p) {
        s.ghost.withheld = true;
    }
    s.proxies[p] = Phase::Idle;
    let landed = if o.retried && !config.release_forgets_sent {
        s.store.end_lease(o.token)
    } else {
        s.store.release(o.token)
    };
    if landed {
        s.notify();
    }
}

/// Whether a renewal (every `lease/3` from the reservation until the answer is read)
/// is worth exploring now: one that moves the lease's end, or one the store refuses
/// while a request not yet written could still pass the guard (the refusal closes it).
/// Other renewals change nothing.
pub(crate) fn may_renew(config: &Config, s: &State, p: usize) -> bool {
    let o = parts(s, p);
    let running = matches!(o.stage, Stage::Ready | Stage::Sent | Stage::Awaiting(_));
    if !running || o.lost {
        return false;
    }
    let at = judge_time(config, s, p);
    match s.store.record() {
        Some(Record::InProgress {
            token, lease_end, ..
        }) if token == o.token => lease_end != at + config.lease,
        _ => o.stage == Stage::Ready && gate_open(config, s, o),
    }
}

/// Renew the lease. Acknowledged, it moves the send deadline to a lease from when it
/// was asked (the same step here: asking earlier only ends it sooner), except for an
/// attempt with history not sent yet: the store checked the key window when it took it
/// over, and the retried call must reach the provider within a lease of that
/// (`Config::renewals_move_retried_deadline`). `acked` false:
/// under [`Backend::RedisWait`] the renewal applied but its `WAIT` failed, so the owner
/// keeps its deadline (and tries again). Refused, the lease is lost: a request not yet
/// written is never sent, and renewals stop.
pub(crate) fn renew(config: &Config, s: &mut State, p: usize, acked: bool) {
    let o = parts(s, p);
    let at = judge_time(config, s, p);
    let renewed = s.store.renew_at(at, o.token);
    if !renewed && s.store.record().is_none() {
        s.ghost.vanished = true;
    }
    let until = s.now() + config.lease;
    let keep = o.stage == Stage::Ready && o.retried && !config.renewals_move_retried_deadline;
    if let Phase::Owner {
        lease_until, lost, ..
    } = &mut s.proxies[p]
    {
        match renewed {
            true if acked && !keep => *lease_until = until,
            true => {}
            false => *lost = true,
        }
    }
}

/// Whether this step's store write, if it changed the record, was acknowledged only
/// once the replica had it ([`Backend::RedisWait`]): every fenced write except a
/// renewal whose `WAIT` failed, a completion write that failed, and, under
/// [`Mutant::RenewalsNotWaited`], every renewal.
pub(crate) fn waited(config: &Config, action: crate::action::Action) -> bool {
    use crate::action::Action;
    if config.backend != Backend::RedisWait {
        return false;
    }
    match action {
        Action::Renew { acked, .. } => acked && !config.has(Mutant::RenewalsNotWaited),
        Action::CompleteFails { .. } | Action::FailOver | Action::Evict => false,
        _ => true,
    }
}

/// Read the answer and store it; the caller gets the answer whether or not the store
/// still let this owner write (it was streamed to the caller as it came).
pub(crate) fn complete(config: &Config, s: &mut State, p: usize) {
    let Stage::Awaiting(outcome) = parts(s, p).stage else {
        unreachable!("complete is enabled only while awaiting");
    };
    let token = parts(s, p).token;
    s.proxies[p] = Phase::Idle;
    store_completion(s, token, outcome);
    s.deliver(config, outcome, false);
}

/// The owner's fenced completion write. Refused, it was taken over or settled, or the
/// record vanished (`LeaseHolder::stale`: counted as vanished, never as a takeover).
fn store_completion(s: &mut State, token: Token, outcome: Outcome) {
    if s.store.complete(token, outcome) {
        s.notify();
        s.ghost.completed = true;
    } else if s.store.record().is_none() {
        s.ghost.vanished = true;
    }
}

/// Read the answer; storing it fails (the store did not answer in time), whether or
/// not the write `applied`. The caller gets the answer; the write is retried.
pub(crate) fn complete_fails(config: &Config, s: &mut State, p: usize, applied: bool) {
    let o = parts(s, p);
    let Stage::Awaiting(outcome) = o.stage else {
        unreachable!("complete is enabled only while awaiting");
    };
    s.budget.failed_writes -= 1;
    if applied && s.store.complete(o.token, outcome) {
        s.notify();
    }
    set_stage(s, p, Stage::RetryingCompletion(outcome));
    s.deliver(config, outcome, false);
}

/// The call timed out after it was written: the outcome is unknown, the reservation
/// is held unrenewed (the caller gets 504), and the proxy is done with it.
pub(crate) fn time_out(s: &mut State, p: usize) {
    s.proxies[p] = Phase::Idle;
}

/// The background retry of a failed completion: it stops only when the store answers,
/// `true` (stored) or `false` (the record no longer carries this owner's token).
pub(crate) fn retry_completion(s: &mut State, p: usize) {
    let o = parts(s, p);
    let Stage::RetryingCompletion(outcome) = o.stage else {
        unreachable!("retry is enabled only while retrying");
    };
    s.proxies[p] = Phase::Idle;
    store_completion(s, o.token, outcome);
}

/// [`Mutant::CompletionRetryStopsAtLeaseEnd`]: the retry gives up once the lease ended.
pub(crate) fn may_give_up(config: &Config, s: &State, p: usize) -> bool {
    let o = parts(s, p);
    config.has(Mutant::CompletionRetryStopsAtLeaseEnd)
        && matches!(o.stage, Stage::RetryingCompletion(_))
        && s.now() >= o.lease_until
}

pub(crate) fn give_up(s: &mut State, p: usize) {
    let o = parts(s, p);
    let still_ours =
        matches!(s.store.record(), Some(r @ Record::InProgress { .. }) if r.token() == o.token);
    if let (true, Stage::RetryingCompletion(Outcome { .. })) = (still_ours, o.stage) {
        s.ghost.dropped = true;
    }
    s.proxies[p] = Phase::Idle;
}
