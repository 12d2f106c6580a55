//! Each deliberate bug ([`Mutant`]) makes the checker fail: it finds a counterexample,
//! printed as the shortest trace it found. Run with `--nocapture` to read them.

use idem_model::properties::*;
use idem_model::{find, Config, Mutant, OnUnknown};

/// Search `config` for a counterexample to `property`; assert one exists, print it,
/// and return its length.
fn caught(name: &str, config: Config, property: &'static str) -> usize {
    let (trace, report) = find(config, property);
    let trace = trace.unwrap_or_else(|| {
        panic!(
            "{name}: no counterexample to \"{property}\" in {} states",
            report.unique_states
        )
    });
    println!(
        "{name}: counterexample to \"{property}\" after {} states ({:.2?}), {trace}\n",
        report.unique_states, report.elapsed
    );
    trace.actions.len()
}

/// Reconcile at an upstream that ignores the key, proxy 1's wall clock a lease ahead.
fn skewed() -> Config {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.skew = vec![0, 2, 0];
    config
}

#[test]
fn m1_lease_judged_on_each_proxys_own_clock() {
    let config = skewed().with(Mutant::OwnClock);
    caught("own clock", config, AT_MOST_ONE_EFFECT);
}

/// Duplicates that decide with a skewed clock (a `retry` route at an upstream that
/// deduplicates): harmless while the store judges the takeover on its own clock...
fn skewed_decisions() -> Config {
    let mut config = Config::small(OnUnknown::Retry { window: 3 });
    config.skew = vec![0, 2, 0];
    config.decide_with_own_clock = true;
    config
}

#[test]
fn m2_control_a_skewed_decision_is_harmless_behind_the_stores_check() {
    let report = idem_model::explore(skewed_decisions());
    for property in SAFETY {
        assert!(!report.discoveries.contains_key(property), "{property}");
    }
    println!(
        "skewed decisions, store-judged takeover: {} states, no counterexample",
        report.unique_states
    );
}

/// ...but take over live leases without that check.
#[test]
fn m2_takeover_that_does_not_check_the_lease() {
    let config = skewed_decisions().with(Mutant::TakeoverIgnoresLease);
    caught("takeover ignores the lease", config, LIVE_LEASE_NEVER_TAKEN);
}

#[test]
fn m3_completion_that_does_not_check_the_token() {
    let mut config = Config::small(OnUnknown::Retry { window: 3 });
    config.on_failure_retry = true;
    config.resolutions = 0;
    let config = config.with(Mutant::CompleteIgnoresToken);
    caught("completion ignores the token", config, ACKED_NEVER_LOST);
}

#[test]
fn m4_resolve_that_does_not_check_the_token() {
    let config = Config::small(OnUnknown::Hold).with(Mutant::ResolveIgnoresToken);
    caught("resolve ignores the token", config, AT_MOST_ONE_EFFECT);
}

#[test]
fn m5_retry_past_the_key_window() {
    let config = Config::small(OnUnknown::Retry { window: 3 }).with(Mutant::RetryPastWindow);
    caught("retry past the window", config, AT_MOST_ONE_EFFECT);
}

#[test]
fn m6_completion_retry_that_gives_up_at_the_lease_end() {
    let config = Config::small(OnUnknown::Hold).with(Mutant::CompletionRetryStopsAtLeaseEnd);
    caught(
        "completion retry stops at the lease end",
        config,
        HELD_OUTCOME_NOT_DROPPED,
    );
}

#[test]
fn m7_waiter_that_reads_before_subscribing() {
    let mut config = Config::small(OnUnknown::Hold);
    config.waiter = true;
    let config = config.with(Mutant::ReadThenSubscribe);
    caught("read, then subscribe", config, WAITER_NOT_STRANDED);
}
