//! The send guard (SPEC §1 "What the code enforces"): an owner sends its call only while
//! its lease holds. The proven protocol (`crates/idem-model`, `owner.rs`) lets an owner
//! send only inside its lease; the code must too, or an owner paused between reserving
//! and writing (a stall, SIGSTOP, a slow connect) whose intent was meanwhile taken over
//! or settled would send a second time when it resumes.
//!
//! The gate holds the lease's end on this process's **monotonic** clock, counted from
//! before the owner asked the store (so never later than the store's own end), and
//! whether a renewal found the lease lost. The client checks it right before the
//! request's first byte is written ([`SendGate::check`]); a connect in progress is
//! abandoned as soon as the lease is lost ([`SendGate::lost`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The part of a lease kept back for the request to reach the upstream once written:
/// a tenth of the lease, between 10 ms and 1 s (a 30 s lease keeps 1 s, a 1 s lease
/// 100 ms). A loopback sidecar delivers in well under a millisecond; the rest is slack
/// for a store clock that runs a little fast.
pub fn margin(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Shared by the lease's holder (which moves it on each acknowledged renewal) and the
/// exchange (which asks it before sending). Clones share one state.
#[derive(Clone)]
pub struct SendGate(Arc<State>);

struct State {
    /// The instant that deadlines are counted from.
    base: Instant,
    /// When the lease ends, in µs after `base`.
    until_us: AtomicU64,
    margin: Duration,
    /// Whether acknowledged renewals move the end (see [`SendGate::fixed`]).
    renewable: bool,
    lost: AtomicBool,
    lost_wake: Notify,
}

/// Why the gate refused: nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The lease's end (less the margin) passed before the request could be written.
    Expired,
    /// A renewal found the lease ended or taken over.
    Lost,
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Closed::Expired => {
                "the lease ended before the request could be written; nothing was sent"
            }
            Closed::Lost => {
                "a renewal found the lease lost before the request was written; nothing was sent"
            }
        })
    }
}

impl SendGate {
    /// A lease of `lease` granted by a store write that was asked for at `asked`.
    pub fn new(asked: Instant, lease: Duration) -> SendGate {
        SendGate::with(asked, lease, true)
    }

    /// As [`SendGate::new`], for an attempt that took over a record with history (an
    /// unknown outcome retried under `upstream_key_window`, a stored failure retried):
    /// renewals before the write keep the record but never move the right to send past
    /// the lease the takeover granted. The store checked the key window at the takeover,
    /// one lease before it closes; a deadline renewals kept moving would let the call
    /// reach the provider after it forgot the key (the model's finding 6).
    pub fn fixed(asked: Instant, lease: Duration) -> SendGate {
        SendGate::with(asked, lease, false)
    }

    fn with(asked: Instant, lease: Duration, renewable: bool) -> SendGate {
        let state = State {
            base: asked,
            until_us: AtomicU64::new(micros(lease)),
            margin: margin(lease),
            renewable,
            lost: AtomicBool::new(false),
            lost_wake: Notify::new(),
        };
        SendGate(Arc::new(state))
    }

    /// An acknowledged renewal asked for at `asked` holds the lease until `asked +
    /// lease`; the end only moves forward, and not at all for a [`SendGate::fixed`].
    pub fn renewed(&self, asked: Instant, lease: Duration) {
        if !self.0.renewable {
            return;
        }
        let until = micros(asked.saturating_duration_since(self.0.base) + lease);
        self.0.until_us.fetch_max(until, Ordering::AcqRel);
    }

    /// A renewal found the lease ended or taken over: no send from now on, and a
    /// connect in progress is abandoned.
    pub fn lose(&self) {
        self.0.lost.store(true, Ordering::Release);
        self.0.lost_wake.notify_waiters();
    }

    /// Whether a renewal found the lease lost (renewals stop then).
    pub fn is_lost(&self) -> bool {
        self.0.lost.load(Ordering::Acquire)
    }

    /// Whether the request may be written now: the lease is not lost and its end, less
    /// the margin, is still ahead.
    pub fn check(&self) -> Result<(), Closed> {
        if self.is_lost() {
            return Err(Closed::Lost);
        }
        let now = micros(self.0.base.elapsed()) + micros(self.0.margin);
        match now < self.0.until_us.load(Ordering::Acquire) {
            true => Ok(()),
            false => Err(Closed::Expired),
        }
    }

    /// When the lease is at the latest still held, on this process's clock: for
    /// `Retry-After` hints.
    pub fn until(&self) -> Instant {
        self.0.base + Duration::from_micros(self.0.until_us.load(Ordering::Acquire))
    }

    /// Resolves once [`SendGate::lose`] is called.
    pub async fn lost(&self) {
        loop {
            let woken = self.0.lost_wake.notified();
            if self.0.lost.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_inside_the_lease_less_its_margin_and_closed_after() {
        let lease = Duration::from_secs(1);
        let now = Instant::now();
        assert_eq!(SendGate::new(now, lease).check(), Ok(()));
        // Asked 950 ms ago: 50 ms left, under the 100 ms margin.
        let late = SendGate::new(now - Duration::from_millis(950), lease);
        assert_eq!(late.check(), Err(Closed::Expired));
        // A renewal asked now moves the end; an older one never moves it back.
        late.renewed(now, lease);
        assert_eq!(late.check(), Ok(()));
        late.renewed(now - Duration::from_secs(5), lease);
        assert_eq!(late.check(), Ok(()));
        late.lose();
        assert_eq!(late.check(), Err(Closed::Lost));
    }

    #[test]
    fn a_fixed_gate_keeps_the_takeovers_lease() {
        let lease = Duration::from_secs(1);
        let now = Instant::now();
        let fixed = SendGate::fixed(now - Duration::from_millis(950), lease);
        fixed.renewed(now, lease);
        assert_eq!(fixed.check(), Err(Closed::Expired));
    }

    #[test]
    fn the_margin_is_a_small_part_of_the_lease() {
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_secs(1));
        assert_eq!(margin(Duration::from_secs(1)), Duration::from_millis(100));
        assert_eq!(margin(Duration::from_millis(50)), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn lost_wakes_a_waiter() {
        let gate = SendGate::new(Instant::now(), Duration::from_secs(10));
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.lost().await }
        });
        tokio::task::yield_now().await;
        gate.lose();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
    }
}
