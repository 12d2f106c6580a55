//! What the model found about idem as built today, and the known limits of its
//! assumptions: each is a configuration flag that restores today's behaviour (or drops
//! an assumption), and the checker finds a counterexample. The correct configurations
//! (`tests/correct.rs`) have each fix in place.

use idem_model::properties::*;
use idem_model::{find, Backend, Config, OnUnknown};

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

/// The model's send assumption: a call leaves the proxy within the lease it was
/// granted. Without it (a pause between reserving and sending longer than a lease),
/// nothing in the store can stop a second execution at an upstream that ignores keys.
#[test]
fn a_send_after_the_lease_ended_is_unfenced() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.late_send = true;
    counterexample("late send", config, AT_MOST_ONE_EFFECT);
}

/// Redis without `wait_replicas`: a failover loses an acknowledged write.
#[test]
fn a_failover_without_wait_replicas_loses_an_acknowledged_outcome() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.backend = Backend::RedisAsync;
    config.failovers = 1;
    counterexample("failover without wait_replicas", config, ACKED_NEVER_LOST);
}
