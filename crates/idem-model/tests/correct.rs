//! The correct protocol, explored completely in the default configurations: no safety
//! property has a counterexample, and every milestone that the configuration can reach
//! is reached (so the proof is not vacuous).

use idem_model::properties::*;
use idem_model::{explore, Config, OnUnknown};

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
}

#[test]
fn hold_with_operator_and_waiter() {
    let mut config = Config::small(OnUnknown::Hold);
    config.waiter = true;
    let reached = [
        COMPLETED,
        REPLAYED,
        TAKEN_OVER,
        RESOLVED,
        CRASH_IN_FLIGHT,
        WAITER_WOKEN,
    ];
    proven("hold, upstream ignores the key", config, &reached);
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
    ];
    proven("reconcile, upstream ignores the key", config, &reached);
}

#[test]
fn retry_within_the_key_window_at_a_deduplicating_upstream() {
    let config = Config::small(OnUnknown::Retry { window: 3 });
    let reached = [COMPLETED, REPLAYED, TAKEN_OVER, RESOLVED, CRASH_IN_FLIGHT];
    proven("retry, upstream deduplicates", config, &reached);
}

#[test]
fn retry_with_new_attempts_after_stored_failures() {
    let mut config = Config::small(OnUnknown::Retry { window: 3 });
    config.on_failure_retry = true;
    config.resolutions = 0;
    let reached = [COMPLETED, REPLAYED, TAKEN_OVER, CRASH_IN_FLIGHT];
    proven("retry + on_failure: retry", config, &reached);
}
