//! Each deliberate bug ([`Mutant`]) makes the checker fail: it finds a counterexample,
//! printed as the shortest trace it found. Run with `--nocapture` to read them.

use idem_model::action::Action;
use idem_model::properties::*;
use idem_model::{find, Backend, Config, Mutant, OnUnknown, Trace};

/// Search `config` for a counterexample to `property`; assert one exists, print it,
/// and return it.
fn caught(name: &str, config: Config, property: &'static str) -> Trace {
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
    trace
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

/// An owner paused between reserving and writing its request sends after its lease
/// ended, when the attempt may already have been taken over and sent again.
#[test]
fn m8_no_send_guard() {
    let config = Config::route(None).with(Mutant::NoSendGuard);
    caught("no send guard", config, AT_MOST_ONE_EFFECT);
}

/// A request that takes longer to reach the upstream than the guard's margin executes
/// after the store's lease ended (the guard passed in time).
#[test]
fn m9_a_delivery_delay_past_the_margin() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.delivery_delay = config.margin + 1;
    caught("delay past the margin", config, AT_MOST_ONE_EFFECT);
    // No margin at all: a delay of one tick is enough.
    let mut config = Config::small(OnUnknown::Reconcile);
    config.margin = 0;
    caught("no margin", config, AT_MOST_ONE_EFFECT);
}

/// Redis with `wait_replicas` whose renewals are not `WAIT`ed: a failover rolls back a
/// renewal after the owner moved its send deadline on it.
#[test]
fn m10_renewals_not_waited() {
    // `correct::durable_renewals_survive_a_failover` without the mutant.
    let mut config = Config::small(OnUnknown::Reconcile);
    config.backend = Backend::RedisWait;
    config.failovers = 1;
    config.resolutions = 0;
    config.failed_writes = 0;
    let trace = caught(
        "renewals not WAITed",
        config.with(Mutant::RenewalsNotWaited),
        AT_MOST_ONE_EFFECT,
    );
    let steps = &trace.actions;
    let renewed = steps
        .iter()
        .position(|a| matches!(a, Action::Renew { acked: true, .. }));
    let failover = steps.iter().position(|a| *a == Action::FailOver);
    assert!(
        matches!((renewed, failover), (Some(r), Some(f)) if r < f),
        "the counterexample rolls back an acknowledged renewal: {trace}"
    );
}

/// A record that vanishes under its owner (Redis evicting it): the next request
/// reserves afresh and runs the call again.
#[test]
fn m11_eviction() {
    let mut config = Config::route(None);
    config.eviction = true;
    caught("eviction", config.clone(), AT_MOST_ONE_EFFECT);
    // The owner's refused write then finds no record: counted as vanished (the
    // correct configurations never reach this, `tests/correct.rs`).
    let (vanished, _) = find(config, VANISHED);
    println!(
        "eviction: {}",
        vanished.expect("an owner finds its record gone")
    );
}

/// The send deadline counted from when the store's answer arrived, not from before
/// the owner asked: a slow answer puts it past the store's lease end.
#[test]
fn m12_deadline_counted_from_the_answer() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.answer_delay = true;
    let config = config.with(Mutant::DeadlineFromAnswer);
    caught("deadline from the answer", config, AT_MOST_ONE_EFFECT);
}
