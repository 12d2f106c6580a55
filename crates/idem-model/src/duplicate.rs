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

/// Proxy state right after the store granted `token` a lease. The proxy's timer (a
/// monotonic duration, whatever its wall clock says) knows the lease ends `lease`
/// ticks from now.
fn owner(config: &Config, s: &State, token: Token, attempt: u8, retried: bool) -> Phase {
    Phase::Owner {
        token,
        attempt,
        lease_until: s.now() + config.lease,
        retried,
        stage: Stage::Ready,
    }
}
