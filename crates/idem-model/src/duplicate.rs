//! A request's way to ownership or an answer: reserve, then (for a duplicate) the
//! decision and the fenced takeover, reconciliation or new attempt it leads to. Each
//! function is one atomic step of one proxy.

use crate::config::{Config, Mutant, OnUnknown};
use crate::decide::{decide, Decision};
use crate::record::{Record, Reserved, Tick, Token};
use crate::state::{Phase, Stage, State};

/// The time proxy `p` stamps and judges leases with: the store's clock, or its own
/// skewed wall clock under [`Mutant::OwnClock`].
pub(crate) fn judge_time(config: &Config, state: &State, p: usize) -> Tick {
    if config.has(Mutant::OwnClock) {
        config.proxy_clock(p, state.now())
    } else {
        state.now()
    }
}

/// A caller's request reaches proxy `p`, which reserves the key.
pub(crate) fn request(config: &Config, s: &mut State, p: usize) {
    s.budget.requests -= 1;
    let token = s.fresh_token();
    let at = judge_time(config, s, p);
    match s.store.reserve_at(at, token) {
        Reserved::Won => s.proxies[p] = owner(config, s, token, 1, false),
        Reserved::Exists { record, now } => {
            let now = if config.decide_with_own_clock {
                config.proxy_clock(p, s.now())
            } else {
                now
            };
            s.proxies[p] = match decide(config, &record, now) {
                Decision::Replay(outcome) => {
                    s.deliver(config, outcome, true);
                    Phase::Idle
                }
                Decision::NewAttempt => Phase::NewAttempt {
                    seen: record.token(),
                },
                Decision::TakeOver => Phase::TakingOver {
                    seen: record.token(),
                },
                Decision::Reconcile => Phase::Reconciling {
                    seen: record.token(),
                    attempt: record.attempt(),
                },
                Decision::Refuse => Phase::Idle,
            }
        }
    }
}

/// Take over the unknown outcome `seen` to forward it again.
pub(crate) fn take_over(config: &Config, s: &mut State, p: usize, seen: Token) {
    let token = s.fresh_token();
    let at = judge_time(config, s, p);
    s.proxies[p] = Phase::Idle;
    let live = lease_live(s);
    if s.store
        .take_over_at(at, seen, token, takeover_window(config))
    {
        s.ghost.took_live_lease |= live;
        s.notify();
        s.ghost.taken_over = true;
        let attempt = s.store.record().map_or(1, |r| r.attempt());
        s.proxies[p] = owner(config, s, token, attempt, true);
    }
}

/// Whether the record is an attempt whose lease is live on the store's clock.
fn lease_live(s: &State) -> bool {
    s.store
        .record()
        .is_some_and(|r| matches!(r, Record::InProgress { .. }) && !r.lease_ended(s.now()))
}

/// The key window the store's takeover checks: `on_unknown: retry`'s, unless the model
/// reproduces a takeover that trusts the duplicate's earlier decision
/// (`Config::takeover_checks_window` off) or retries past the window (mutant 5).
fn takeover_window(config: &Config) -> Option<Tick> {
    match config.on_unknown {
        OnUnknown::Retry { window } if config.takeover_checks_window => {
            (!config.has(Mutant::RetryPastWindow)).then_some(window)
        }
        _ => None,
    }
}

/// Ask the upstream's records about `attempt` (`failed`: the lookup got no usable
/// answer, so the outcome stays unknown and the caller gets 409).
pub(crate) fn lookup(s: &mut State, p: usize, seen: Token, attempt: u8, failed: bool) {
    s.proxies[p] = match (failed, s.upstream.lookup(attempt)) {
        (true, _) => Phase::Idle,
        (false, Some(outcome)) => Phase::Settling { seen, outcome },
        (false, None) => Phase::TakingOver { seen },
    };
}

/// Settle the unknown outcome `seen` with what the lookup found, and replay it.
pub(crate) fn settle(config: &Config, s: &mut State, p: usize) {
    let Phase::Settling { seen, outcome } = s.proxies[p] else {
        unreachable!("settle is enabled only while settling");
    };
    let token = s.fresh_token();
    let at = judge_time(config, s, p);
    s.proxies[p] = Phase::Idle;
    let live = lease_live(s);
    if s.store.reconcile_at(at, seen, token, outcome) {
        s.ghost.took_live_lease |= live;
        s.notify();
        s.ghost.reconciled = true;
        s.deliver(config, outcome, true);
    }
}

/// Take a stored failure `seen` for a new attempt (`on_failure: retry`).
pub(crate) fn new_attempt(config: &Config, s: &mut State, p: usize, seen: Token) {
    let token = s.fresh_token();
    s.proxies[p] = Phase::Idle;
    if s.store.new_attempt(seen, token) {
        s.notify();
        let attempt = s.store.record().map_or(1, |r| r.attempt());
        // A new attempt has history too: the stored failure it replaced.
        s.proxies[p] = owner(config, s, token, attempt, true);
    }
}

/// Proxy state right after the store granted `token` a lease.
///
/// The send deadline is counted on the proxy's monotonic timer from *before* it asked
/// the store (`SendGate::new(asked, lease)`). The store's write is one step here, at
/// `now`: the ask came at `now` or earlier and the answer reaches the proxy at `now` or
/// later. Taking the ask at `now` gives the latest deadline the code can hold, equal to
/// the store's lease end, so every send the code allows the model allows too; and a
/// proxy that has not read the answer yet is one that takes no step for a while, which
/// the model already explores. With `Config::answer_delay` the answer is a step of its
/// own ([`answer`]), and [`Mutant::DeadlineFromAnswer`] shows why the deadline must not
/// be counted from it.
fn owner(config: &Config, s: &State, token: Token, attempt: u8, retried: bool) -> Phase {
    if config.answer_delay {
        return Phase::Asked {
            token,
            attempt,
            granted: s.now(),
            retried,
        };
    }
    Phase::Owner {
        token,
        attempt,
        lease_until: s.now() + config.lease,
        lost: false,
        retried,
        stage: Stage::Ready,
    }
}

/// The store's answer granting a lease reaches the proxy (`Config::answer_delay`). The
/// deadline is a lease from when it asked, at the latest when the write applied; under
/// [`Mutant::DeadlineFromAnswer`], from now.
pub(crate) fn answer(config: &Config, s: &mut State, p: usize) {
    let Phase::Asked {
        token,
        attempt,
        granted,
        retried,
    } = s.proxies[p]
    else {
        unreachable!("answer is enabled only after an ask");
    };
    let from = if config.has(Mutant::DeadlineFromAnswer) {
        s.now()
    } else {
        granted
    };
    s.proxies[p] = Phase::Owner {
        token,
        attempt,
        lease_until: from + config.lease,
        lost: false,
        retried,
        stage: Stage::Ready,
    };
}
