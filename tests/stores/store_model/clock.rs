//! Ticks of the model on a real store's clock.
//!
//! Real time passes for the real stores: the model's tick `k` is the span
//! `[t0 + k·T, t0 + (k+1)·T)` of the store's clock, `t0` read from the store when the
//! case starts, and every operation of tick `k` runs in its second half, from
//! `t0 + k·T + T/2` (plus a small margin for the clocks' rounding). A time the store
//! stamps then (a first send, the store's `now`) lies in tick `k`. Leases and key
//! windows are written half a tick short (`n·T − T/2`), so a lease granted at tick `k`
//! ends in the first half of tick `k + n`, between the operations of tick `k + n − 1`
//! and those of tick `k + n`: no operation lands on a boundary, whatever the jitter of
//! a round trip within its half tick. The price: `<` and `<=` on a boundary cannot be
//! told apart (docs/reliability.md, "The model and the code").
//!
//! A case whose operations overran their half tick (a loaded machine) cannot be judged:
//! [`Schedule::late`] says so and the case runs again on fresh keys.

use std::time::Duration;

use idem::store::{Store, StoreError};
use tokio::time::Instant;

/// Past the half tick, for the store's clock rounding to ms and the offset between
/// the store's clock and this process's monotonic clock (one round trip at most).
const MARGIN: Duration = Duration::from_millis(5);
/// Before the tick's end: an operation still running then may be judged in the next.
const GUARD: Duration = Duration::from_millis(3);

/// The model's ticks laid on one store's clock for one case.
pub struct Schedule {
    tick: Duration,
    /// The store's clock (unix ms) at the start of tick 0.
    t0: u64,
    /// This process's instant when `t0` was read, at the latest (so elapsed time from
    /// it never overstates the store's) and at the earliest (never understates it).
    after: Instant,
    before: Instant,
    /// The model's clock.
    k: u64,
}

impl Schedule {
    /// Tick 0 starts now, by `store`'s clock.
    pub async fn start(store: &Store, tick: Duration) -> Result<Schedule, StoreError> {
        let before = Instant::now();
        let t0 = store.clock_ms().await?;
        let after = Instant::now();
        let schedule = Schedule {
            tick,
            t0,
            after,
            before,
            k: 0,
        };
        schedule.wait().await;
        Ok(schedule)
    }

    /// The model's clock: the current tick.
    pub fn now(&self) -> u64 {
        self.k
    }

    /// Moves to tick `k + n` and waits for its operations' half.
    pub async fn advance(&mut self, n: u64) {
        self.k += n;
        self.wait().await;
    }

    async fn wait(&self) {
        let at = self.after + self.tick * self.k as u32 + self.tick / 2 + MARGIN;
        tokio::time::sleep_until(at).await;
    }

    /// Whether an operation of this tick may have run past it, by the store's clock.
    pub fn late(&self) -> bool {
        self.before.elapsed() + GUARD >= self.tick * (self.k as u32 + 1)
    }

    /// `ticks` of the model as a lease or key window to give the store: half a tick short.
    pub fn span(&self, ticks: u64) -> Duration {
        (self.tick * ticks as u32).saturating_sub(self.tick / 2)
    }

    /// The tick a time of the store's clock (unix ms) lies in: a first send stamped
    /// at tick `k` is in `k`, and so is the end of a lease granted `n` ticks before.
    pub fn tick_of(&self, ms: u64) -> i64 {
        (ms as i64 - self.t0 as i64).div_euclid(self.tick_ms())
    }

    /// Whole ticks from `from` to `to` (store ms), for two times stamped at ticks:
    /// their half-tick jitter rounds away.
    pub fn ticks_between(&self, from: u64, to: u64) -> i64 {
        let t = self.tick_ms();
        (to as i64 - from as i64 + t / 2).div_euclid(t)
    }

    /// Ticks left until `end` (store ms) from `now`, rounded up: `n` for a lease that
    /// ends in the first half of tick `now + n`.
    pub fn ticks_left(&self, now: u64, end: u64) -> i64 {
        let t = self.tick_ms();
        (end as i64 - now as i64 + t - 1).div_euclid(t)
    }

    fn tick_ms(&self) -> i64 {
        self.tick.as_millis() as i64
    }
}
