//! The larger configuration, explored completely only with `IDEM_MODEL_LARGE=1`
//! (minutes, in release): more requests, more time, more faults. Its figures are
//! recorded in docs/reliability.md.
//!
//! `IDEM_MODEL_LARGE=1 cargo test -p idem-model --release --test large -- --nocapture`

use idem_model::properties::SAFETY;
use idem_model::{explore, Config, OnUnknown};

fn large(on_unknown: OnUnknown) -> Config {
    let mut config = Config::small(on_unknown);
    config.requests = 4;
    config.max_time = 6;
    config.crashes = 2;
    config.waiter = true;
    config
}

#[test]
fn large_configuration() {
    if std::env::var_os("IDEM_MODEL_LARGE").is_none() {
        println!("skipped: set IDEM_MODEL_LARGE=1 to explore the large configuration");
        return;
    }
    // New attempts double the upstream's and the record's states: with two crashes and
    // the waiter this one exceeds 24 GB, so it keeps one crash and no waiter.
    let mut failure_retry = large(OnUnknown::Retry { window: 3 });
    failure_retry.on_failure_retry = true;
    failure_retry.crashes = 1;
    failure_retry.waiter = false;
    failure_retry.resolutions = 0;
    let configs = [
        ("hold", large(OnUnknown::Hold)),
        ("reconcile", large(OnUnknown::Reconcile)),
        ("retry", large(OnUnknown::Retry { window: 3 })),
        ("retry + on_failure: retry", failure_retry),
    ];
    for (name, config) in configs {
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
}
