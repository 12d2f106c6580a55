//! The owner's side (`src/proxy/lease.rs` and `execute.rs` in idem): send the call,
//! renew the lease while it runs, then store the outcome, release the reservation
//! (nothing was sent) or hold it (the outcome is unknown). Each function is one atomic
//! step of one proxy.

use crate::config::{Config, Mutant};
use crate::duplicate::judge_time;
use crate::record::{Outcome, Record};
use crate::state::{Phase, Stage, State};

/// The owner's fields, for the steps below.
fn parts(s: &State, p: usize) -> (u32, u8, u64, bool, Stage) {
    match s.proxies[p] {
        Phase::Owner {
            token,
            attempt,
            lease_until,
            retried,
            stage,
        } => (token, attempt, lease_until, retried, stage),
        _ => unreachable!("an owner step of a proxy that owns nothing"),
    }
}

fn set_stage(s: &mut State, p: usize, next: Stage) {
    if let Phase::Owner { stage, .. } = &mut s.proxies[p] {
        *stage = next;
    }
}

/// Whether the owner may send now: within the lease the store last granted it (the
/// model's assumption that a call leaves the proxy within its lease; see
/// `Config::late_send`).
pub(crate) fn may_send(config: &Config, s: &State, p: usize) -> bool {
    let (_, _, lease_until, _, stage) = parts(s, p);
    stage == Stage::Ready && (config.late_send || s.now() < lease_until)
}

/// The call reaches the upstream, which executes it (or, deduplicating, answers the
/// first answer); `ok` says whether an execution succeeds.
pub(crate) fn send(config: &Config, s: &mut State, p: usize, ok: bool) {
    let (_, attempt, ..) = parts(s, p);
    let now = s.now();
    let outcome = s.upstream.call(config.upstream, attempt, now, ok);
    set_stage(s, p, Stage::Awaiting(outcome));
}

/// The call could not be sent (connection refused): nothing happened upstream, so
/// the reservation is released. An attempt that took over a record with history (an
/// unknown outcome whose key was sent before, or a stored failure) must not delete it:
/// its lease ends now instead, unless the model reproduces idem's release
/// (`Config::release_forgets_sent`).
pub(crate) fn not_sent(config: &Config, s: &mut State, p: usize) {
    let (token, _, _, retried, _) = parts(s, p);
    s.proxies[p] = Phase::Idle;
    let landed = if retried && !config.release_forgets_sent {
        s.store.end_lease(token)
    } else {
        s.store.release(token)
    };
    if landed {
        s.notify();
    }
}

/// Renew the lease (every `lease/3` while the call runs).
pub(crate) fn renew(config: &Config, s: &mut State, p: usize) {
    let (token, ..) = parts(s, p);
    let at = judge_time(config, s, p);
    if s.store.renew_at(at, token) {
        let until = s.now() + config.lease;
        if let Phase::Owner { lease_until, .. } = &mut s.proxies[p] {
            *lease_until = until;
        }
    }
}

/// Read the answer and store it; the caller gets the answer whether or not the store
/// still let this owner write (it was streamed to the caller as it came).
pub(crate) fn complete(config: &Config, s: &mut State, p: usize) {
    let (token, _, _, _, stage) = parts(s, p);
    let Stage::Awaiting(outcome) = stage else {
        unreachable!("complete is enabled only while awaiting");
    };
    s.proxies[p] = Phase::Idle;
    if s.store.complete(token, outcome) {
        s.notify();
        s.ghost.completed = true;
    }
    s.deliver(config, outcome, false);
}

/// Read the answer; storing it fails (the store did not answer in time), whether or
/// not the write `applied`. The caller gets the answer; the write is retried.
pub(crate) fn complete_fails(config: &Config, s: &mut State, p: usize, applied: bool) {
    let (token, _, _, _, stage) = parts(s, p);
    let Stage::Awaiting(outcome) = stage else {
        unreachable!("complete is enabled only while awaiting");
    };
    s.budget.failed_writes -= 1;
    if applied && s.store.complete(token, outcome) {
        s.notify();
    }
    set_stage(s, p, Stage::RetryingCompletion(outcome));
    s.deliver(config, outcome, false);
}

/// The call timed out after it was sent: the outcome is unknown, the reservation is
/// held unrenewed (the caller gets 504), and the proxy is done with it.
pub(crate) fn time_out(s: &mut State, p: usize) {
    s.proxies[p] = Phase::Idle;
}

/// The background retry of a failed completion: it stops only when the store answers,
/// `true` (stored) or `false` (the record no longer carries this owner's token).
pub(crate) fn retry_completion(s: &mut State, p: usize) {
    let (token, _, _, _, stage) = parts(s, p);
    let Stage::RetryingCompletion(outcome) = stage else {
        unreachable!("retry is enabled only while retrying");
    };
    s.proxies[p] = Phase::Idle;
    if s.store.complete(token, outcome) {
        s.notify();
        s.ghost.completed = true;
    }
}

/// [`Mutant::CompletionRetryStopsAtLeaseEnd`]: the retry gives up once the lease ended.
pub(crate) fn may_give_up(config: &Config, s: &State, p: usize) -> bool {
    let (_, _, lease_until, _, stage) = parts(s, p);
    config.has(Mutant::CompletionRetryStopsAtLeaseEnd)
        && matches!(stage, Stage::RetryingCompletion(_))
        && s.now() >= lease_until
}

pub(crate) fn give_up(s: &mut State, p: usize) {
    let (token, _, _, _, stage) = parts(s, p);
    let still_ours =
        matches!(s.store.record(), Some(r @ Record::InProgress { .. }) if r.token() == token);
    if let (true, Stage::RetryingCompletion(Outcome { .. })) = (still_ours, stage) {
        s.ghost.dropped = true;
    }
    s.proxies[p] = Phase::Idle;
}
