//! What the model found about idem as built today, and the known limits of its
//! assumptions: each is a configuration flag that restores today's behaviour (or drops
//! an assumption), and the checker finds a counterexample. The correct configurations
//! (`tests/correct.rs`) have each fix in place.

use idem_model::properties::*;
use idem_model::{find, Backend, Config, OnUnknown, UpstreamKind};

fn counterexample(name: &str, config: Config, property: &'static str) {
    let (trace, report) = find(config, property);
    let trace = trace.unwrap_or_else(|| panic!("{name}: no counterexample to \"{property}\""));
    println!(
        "{name}: counterexample to \"{property}\" after {} states, {trace}\n",
        report.unique_states
    );
}

/// An owner that took over an unknown outcome and then could not send deletes the
/// record (`Settle::Release`): the record forgets that the key was sent at `sent_at`,
/// and a later request reserves afresh and forwards the same key past the provider's
/// window.
#[test]
fn releasing_a_retried_attempt_forgets_the_first_send() {
    let mut config = Config::small(OnUnknown::Retry { window: 3 });
    config.release_forgets_sent = true;
    counterexample("release forgets the send", config, AT_MOST_ONE_EFFECT);
}

/// The key window checked only by the duplicate's decision: a duplicate paused between
/// its read and its takeover forwards past the window. The store's takeover must check
/// it on its clock.
#[test]
fn the_key_window_must_be_checked_by_the_takeover() {
    let mut config = Config::small(OnUnknown::Retry { window: 3 });
    config.takeover_checks_window = false;
    counterexample(
        "window checked at the read only",
        config,
        AT_MOST_ONE_EFFECT,
    );
}

/// A duplicate that decides on its own clock (ahead) under `reconcile` asks the
/// upstream before the lease ended; the owner sends after the lookup, and the store's
/// takeover (judged correctly, later) lets the duplicate forward again. The decision
/// must use the time the store answered with.
#[test]
fn reconcile_needs_the_decision_on_the_stores_clock() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.skew = vec![0, 2, 0];
    config.decide_with_own_clock = true;
    counterexample("skewed decision, reconcile", config, AT_MOST_ONE_EFFECT);
}

/// Renewals go on while the owner connects, and each acknowledged one moves the send
/// deadline (idem's `SendGate::renewed`). For an attempt taken over under `retry`, the
/// store checked the key window only at the takeover: renewed past it, the retried call
/// leaves any time later and reaches the provider after it forgot the key. The correct
/// configurations send such an attempt within the lease its takeover granted.
#[test]
fn renewals_must_not_move_a_retried_attempts_deadline() {
    let mut config = Config::route(Some(5));
    config.renewals_move_retried_deadline = true;
    counterexample(
        "renewed deadline of a retried attempt",
        config,
        AT_MOST_ONE_EFFECT,
    );
}

/// The old default: `on_unknown: retry` on a route that declares no
/// `upstream_key_window` (nothing says the provider deduplicates the key). An owner that
/// dies after sending has its call sent again after the lease. `hold` is the default now
/// (`correct::the_default_route_holds`), and `idem check` refuses `retry` without a
/// window.
#[test]
fn retry_without_a_key_window_runs_the_call_again() {
    // A window past the time bound: no limit.
    let mut config = Config::small(OnUnknown::Retry { window: 100 });
    config.upstream = UpstreamKind::IgnoresKey;
    counterexample("retry without a window", config, AT_MOST_ONE_EFFECT);
}

/// Redis without `wait_replicas`: a failover loses an acknowledged write, and a
/// renewal the owner's send deadline counted on (as mutant 10 does with `wait_replicas`
/// for renewals only).
#[test]
fn a_failover_without_wait_replicas_loses_an_acknowledged_outcome() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.backend = Backend::RedisAsync;
    config.failovers = 1;
    counterexample(
        "failover without wait_replicas",
        config.clone(),
        ACKED_NEVER_LOST,
    );
    counterexample("failover without wait_replicas", config, AT_MOST_ONE_EFFECT);
}
