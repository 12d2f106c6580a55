//! Model-based tests of the stores (issue 31, "the model and the code must agree"):
//! random sequences of store operations and clock moves, applied to the model's store
//! (`idem_model::ModelStore`, the reference the model checker explores) and to each
//! real store — memory, Redis standalone, PostgreSQL — through idem's `Store` API, with
//! every answer and every touched record compared (`store_model/view.rs`).
//!
//! A change to a Lua script or an SQL statement that the model does not share fails
//! here; so does a proxy-side shortcut that answers differently (Redis's map of the
//! keys a process owns). docs/reliability.md, "The model and the code", says what is
//! compared, which mutations are caught, and what cannot be by design.
//!
//! - `PROPTEST_CASES` (default 32 per store), `PROPTEST_RNG_SEED` (a failing run prints
//!   the seed that reproduces it), `PROPTEST_MAX_SHRINK_ITERS` (default 200).
//! - `IDEM_MODEL_TICK_MS` (default 100): the length of a model tick in real time. A
//!   loaded machine whose operations overrun their half tick gets cases rejected and
//!   retried, never a false failure; a longer tick makes that rarer.

use crate::support;

mod clock;
mod model_side;
mod ops;
mod real_side;
mod run;
mod view;
mod world;

use std::time::Duration;

use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};
use support::store::Backend;
use world::Stores;

/// Keys per case: two, so that operations on one key are seen not to touch the other.
const KEYS: usize = 2;
/// Operations per case, at most.
const MAX_OPS: usize = 24;
const DEFAULT_CASES: u32 = 32;
const DEFAULT_SHRINK_ITERS: u32 = 200;

#[test]
fn memory_agrees_with_the_model() {
    let _panics = crate::support::panics::watched();
    agrees_with_the_model("memory", Backend::memory);
}

#[test]
fn redis_agrees_with_the_model() {
    let _panics = crate::support::panics::watched();
    agrees_with_the_model("redis", Backend::redis);
}

#[test]
fn postgres_agrees_with_the_model() {
    let _panics = crate::support::panics::watched();
    agrees_with_the_model("postgres", Backend::postgres);
}

fn agrees_with_the_model(name: &str, backend: fn() -> Backend) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _inside = rt.enter();
    let backend = backend();
    let stores = rt.block_on(async {
        Stores {
            proxies: [
                backend.instance().await,
                backend.instance().await,
                backend.instance().await,
            ],
            operator: backend.instance().await,
        }
    });
    let tick = tick();
    let (config, seed) = config();
    let mut runner = TestRunner::new(config);
    let strategy = ops::sequences(KEYS, MAX_OPS);
    let result = runner.run(&strategy, |ops| {
        rt.block_on(run::case(&stores, &ops, KEYS, tick))
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, ops)) => {
            let steps: Vec<String> = ops.iter().map(ToString::to_string).collect();
            panic!(
                "{name}: the store and the model disagree.\n{why}\nminimal sequence: [{}]\n\
                 reproduce: PROPTEST_RNG_SEED={seed} IDEM_MODEL_TICK_MS={} cargo test --test stores store_model::{name}",
                steps.join(", "),
                tick.as_millis()
            )
        }
        Err(TestError::Abort(why)) => panic!("{name}: no verdict: {why} (seed {seed})"),
    }
}

/// proptest's configuration from its environment variables, with this target's
/// defaults where they are unset, and a seed fixed here when none is given so that a
/// failure can say which one reproduces it.
fn config() -> (Config, u64) {
    let set = |var: &str| std::env::var_os(var).is_some();
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if !set("PROPTEST_CASES") {
        config.cases = DEFAULT_CASES;
    }
    if !set("PROPTEST_MAX_SHRINK_ITERS") {
        config.max_shrink_iters = DEFAULT_SHRINK_ITERS;
    }
    let seed = match config.rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => rand::random(),
    };
    config.rng_seed = RngSeed::Fixed(seed);
    (config, seed)
}

fn tick() -> Duration {
    let ms = std::env::var("IDEM_MODEL_TICK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    Duration::from_millis(ms)
}
