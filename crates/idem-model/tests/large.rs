//! The larger configurations, explored completely: more requests, more time, more
//! faults. Minutes in release and several GB of memory, so ignored by default; their
//! figures are recorded in docs/reliability.md. Run them with
//!
//! `cargo test -p idem-model --release -- --ignored --nocapture`

use idem_model::properties::SAFETY;
use idem_model::{explore, Backend, Config, OnUnknown};

fn large(on_unknown: OnUnknown) -> Config {
    let mut config = Config::small(on_unknown);
    config.requests = 4;
    config.max_time = 6;
    config.crashes = 2;
    config.waiter = true;
    config
}

fn proven(name: &str, config: Config) {
    let report = explore(config);
    println!(
        "MEASURED large {name}: {} unique states ({} generated), depth {}, {:.1?}",
        report.unique_states, report.states, report.max_depth, report.elapsed
    );
    for property in SAFETY {
        if let Some(trace) = report.discoveries.get(property) {
            panic!("{name}: counterexample to \"{property}\": {trace}");
        }
    }
    assert!(report.complete, "{name}: stopped early");
}

/// The default route (`hold`), `reconcile` and `retry` with two crashes and the waiter.
#[test]
#[ignore = "minutes in release: cargo test -p idem-model --release -- --ignored"]
fn large_routes() {
    proven("hold", large(OnUnknown::Hold));
    proven("reconcile", large(OnUnknown::Reconcile));
    proven("retry", large(OnUnknown::Retry { window: 3 }));
}

/// New attempts double the upstream's and the record's states: with two crashes and the
/// waiter this one exceeds 24 GB, so it keeps one crash and no waiter.
#[test]
#[ignore = "minutes in release: cargo test -p idem-model --release -- --ignored"]
fn large_retry_with_new_attempts() {
    let mut config = large(OnUnknown::Retry { window: 3 });
    config.on_failure_retry = true;
    config.crashes = 1;
    config.waiter = false;
    config.resolutions = 0;
    proven("retry + on_failure: retry", config);
}

/// Redis with `wait_replicas` (renewals `WAIT`ed) and a failover, with the operator and
/// a failed completion, and the store's answers reaching the owner late.
#[test]
#[ignore = "minutes in release: cargo test -p idem-model --release -- --ignored"]
fn large_failover_with_durable_renewals() {
    let mut config = Config::small(OnUnknown::Reconcile);
    config.backend = Backend::RedisWait;
    config.failovers = 1;
    proven("reconcile, wait_replicas, a failover", config.clone());
    config.backend = Backend::Durable;
    config.failovers = 0;
    config.answer_delay = true;
    config.max_time = 6;
    proven("reconcile, answers after the write, time 6", config);
}
