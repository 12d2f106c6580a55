//! The memory store's clock: unix milliseconds read off a monotonic clock.
//!
//! Anchored once to the wall clock when the store is created, then advanced only by
//! `Instant` (tokio's, so tests with a paused runtime move it): a step of the wall
//! clock (NTP, a VM resumed from suspend, an operator's `date -s`) neither ends a lease
//! nor shortens a record's life. The values stay close to unix time, so the admin shows
//! plausible dates; they drift from the wall clock only by the steps it took.

use tokio::time::Instant;

/// Unix-like milliseconds that never jump.
#[derive(Debug, Clone, Copy)]
pub(super) struct MonotonicClock {
    anchor_ms: u64,
    start: Instant,
}

impl MonotonicClock {
    pub(super) fn start() -> MonotonicClock {
        MonotonicClock {
            anchor_ms: crate::store::record::now_ms(),
            start: Instant::now(),
        }
    }

    /// The clock's reading at `at`.
    pub(super) fn at(&self, at: Instant) -> u64 {
        let elapsed = at.saturating_duration_since(self.start).as_millis();
        self.anchor_ms
            .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn advances_with_the_monotonic_clock_only() {
        let clock = MonotonicClock::start();
        let t0 = clock.at(Instant::now());
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.at(Instant::now()) - t0, 90_000);
    }
}
