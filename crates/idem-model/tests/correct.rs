//! The correct protocol, explored completely in the default configurations: no safety
//! property has a counterexample, and every milestone that the configuration can reach
//! is reached (so the proof is not vacuous). Each configuration has the send guard
//! with a margin of one tick and requests that take up to that tick to arrive.

use idem_model::properties::*;
use idem_model::{explore, Backend, Config, OnUnknown};

/// Explore `config` completely; assert no safety counterexample and that each of
/// `milestones` was reached.
fn proven(name: &str, config: Config, milestones: &[&str]) {
    let report = explore(config);
    println!(
        "{name}: {} unique states ({} generated), depth {}, {:.2?}",
        report.unique_states, report.states, report.max_depth, report.elapsed
    );
    for property in SAFETY {
        if let Some(trace) = report.discoveries.get(property) {
            panic!("{name}: counterexample to \"{property}\": {trace}");
        }
    }
    assert!(report.complete, "{name}: the exploration stopped early");
    for milestone in milestones {
        assert!(
            report.discoveries.contains_key(milestone),
            "{name}: \"{milestone}\" never reached"
        );
    }
    // Nothing evicts, and a failover loses only renewals whose `WAIT` failed: an owner
    // never finds its record gone.
    if let Some(trace) = report.discoveries.get(VANISHED) {
        panic!("{name}: a record vanished: {trace}");
    }
}

/// A route that declares nothing (no `on_unknown`, no `upstream_key_window`) holds an
/// unknown outcome: its upstream ignores the key.
#[test]
fn the_default_route_holds() {
    let mut config = Config::route(None);
    assert_eq!(config.on_unknown, OnUnknown::Hold);
    config.waiter = true;
    let reached = [
        COMPLETED,
        REPLAYED,
        TAKEN_OVER,
        RESOLVED,
        CRASH_IN_FLIGHT,
        WAITER_WOKEN,
        WITHHELD,
    ];
    proven(
        "hold (the default), upstream ignores the key",
        config,
        &reached,
    );
}

#[test]
fn reconcile_at_an_upstream_that_ignores_the_key() {
    let config = Config::small(OnUnknown::Reconcile);
    let reached = [
        COMPLETED,
        REPLAYED,
        TAKEN_OVER,
        RECONCILED,
        RESOLVED,
        CRASH_IN_FLIGHT,
        WITHHELD,
    ];
    proven("reconcile, upstream ignores the key", config, &reached);
}

/// A route that declares `upstream_key_window` (5 ticks, the provider's) retries by
/// default, within the window less a lease.
#[test]
fn retry_within_the_key_window_at_a_deduplicating_upstream() {
    let config = Config::route(Some(5));
    assert_eq!(config.on_unknown, OnUnknown::Retry { window: 3 });
    let reached = [COMPLETED, REPLAYED, TAKEN_OVER, RESOLVED, CRASH_IN_FLIGHT];
    proven("retry, upstream deduplicates", config, &reached);
}

#[test]
fn retry_with_new_attempts_after_stored_failures() {
    let mut config = Config::route(Some(5));
    config.on_failure_retry = true;
    config.resolutions = 0;
    let reached = [COMPLETED, REPLAYED, TAKEN_OVER, CRASH_IN_FLIGHT];
    proven("retry + on_failure: retry", config, &reached);
}

/// Redis with `wait_replicas`, renewals `WAIT`ed too: a failover loses only a renewal
/// whose `WAIT` failed, on which the owner did not move its send deadline. (No operator
/// and no failed completion, to keep it to a few seconds; `tests/large.rs` has them.)
#[test]
fn durable_renewals_survive_a_failover() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.backend = Backend::RedisWait;
    config.failovers = 1;
    config.resolutions = 0;
    config.failed_writes = 0;
    let reached = [COMPLETED, TAKEN_OVER, RECONCILED, FAILED_OVER, WITHHELD];
    proven("reconcile, wait_replicas, a failover", config, &reached);
}

/// The store's answer reaches the owner after its write applied: the deadline counted
/// from before the ask still ends no later than the store's lease.
#[test]
fn a_slow_answer_with_the_deadline_from_the_ask() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.answer_delay = true;
    let reached = [COMPLETED, TAKEN_OVER, RECONCILED, WITHHELD];
    proven("reconcile, answers after the write", config, &reached);
}
