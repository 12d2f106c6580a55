//! Waiting for a condition instead of sleeping a fixed time: a fixed sleep is either too
//! short on a loaded machine (flaky) or too long everywhere (slow). `eventually` re-runs
//! a probe until it holds, and fails naming what never happened.

use std::time::{Duration, Instant};

/// How often a probe is re-run.
const INTERVAL: Duration = Duration::from_millis(20);

/// What a probe answers: `true`, or `Some(value)`, once the condition holds.
pub trait Settled {
    type Value;
    fn settled(self) -> Option<Self::Value>;
}

impl Settled for bool {
    type Value = ();
    fn settled(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Settled for Option<T> {
    type Value = T;
    fn settled(self) -> Option<T> {
        self
    }
}

/// Runs `probe` until it holds and returns what it settled on; panics with `what` if it
/// does not hold within `within`. The probe may itself assert on what it sees meanwhile.
#[track_caller]
pub fn eventually<P: Settled>(
    within: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> P,
) -> impl std::future::Future<Output = P::Value> {
    let caller = std::panic::Location::caller();
    let what = what.to_owned();
    async move {
        let started = Instant::now();
        loop {
            if let Some(value) = probe().await.settled() {
                return value;
            }
            assert!(
                started.elapsed() < within,
                "{what}: not within {within:?} ({caller})"
            );
            tokio::time::sleep(INTERVAL).await;
        }
    }
}

/// `eventually` for plain threads (no runtime), e.g. waiting on a child process.
#[track_caller]
pub fn eventually_blocking<P: Settled>(
    within: Duration,
    what: &str,
    mut probe: impl FnMut() -> P,
) -> P::Value {
    let started = Instant::now();
    loop {
        if let Some(value) = probe().settled() {
            return value;
        }
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(INTERVAL);
    }
}
