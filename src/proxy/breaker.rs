//! A route's circuit breaker (SPEC §1 "Upstream outages"), shared by the workers of one
//! replica. Every call sent into an upstream that stopped answering becomes an unknown
//! outcome someone must settle, so after `after` consecutive unanswered calls the route
//! stops sending new intents for `cool_down`; then one intent goes through as a probe.
//!
//! ```text
//! Closed{n} --unanswered, n+1 = after--> Open{until} --cool_down over, admit--> Probing
//!    ^                                      ^                                   |
//!    +------------- probe answered ---------|------------ probe unanswered -----+
//! ```
//!
//! Calls admitted while closed report their result; any answer resets the count. Once
//! open, only the probe's report moves the breaker: a late answer from a call sent
//! before it opened says little about the upstream now. A probe that never reaches the
//! upstream (the intent was a replay, or the store failed) gives its turn to the next.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::metrics::RouteBreakerMetrics;
use crate::policy::BreakerPolicy;

/// One route's breaker; its settings follow reloads, its state survives them.
pub struct Breaker {
    state: Mutex<State>,
    metrics: RouteBreakerMetrics,
}

struct State {
    policy: BreakerPolicy,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed {
        unanswered: u32,
    },
    Open {
        until: Instant,
    },
    /// Cooled down; the one probe is in flight.
    Probing,
}

/// While the probe is in flight, others are asked to come back this much later.
const PROBE_PENDING_RETRY: Duration = Duration::from_secs(1);

/// Leave to send one new intent; report what the upstream did with it.
pub struct Ticket {
    breaker: Arc<Breaker>,
    probe: bool,
    reported: bool,
}

impl Breaker {
    pub fn new(policy: BreakerPolicy, metrics: RouteBreakerMetrics) -> Breaker {
        metrics.open.set(0);
        Breaker {
            state: Mutex::new(State {
                policy,
                phase: Phase::Closed { unanswered: 0 },
            }),
            metrics,
        }
    }

    /// A reload's settings (the count and an open period keep running).
    pub fn configure(&self, policy: BreakerPolicy) {
        self.lock().policy = policy;
    }

    /// Taken out of the configuration: its gauge no longer says open.
    pub fn retire(&self) {
        self.metrics.open.set(0);
    }

    /// May a new intent be sent now? `Err` carries how long until it may.
    pub fn admit(self: &Arc<Self>) -> Result<Ticket, Duration> {
        self.admit_at(Instant::now())
    }

    fn admit_at(self: &Arc<Self>, now: Instant) -> Result<Ticket, Duration> {
        let mut state = self.lock();
        let probe = match state.phase {
            Phase::Closed { .. } => false,
            Phase::Open { until } if now < until => return Err(until - now),
            Phase::Open { .. } => {
                state.phase = Phase::Probing;
                true
            }
            Phase::Probing => return Err(PROBE_PENDING_RETRY),
        };
        Ok(Ticket {
            breaker: self.clone(),
            probe,
            reported: false,
        })
    }

    fn record(&self, probe: bool, answered: bool, now: Instant) {
        let mut state = self.lock();
        let cool_down = state.policy.cool_down;
        let after = state.policy.after;
        let next = match (state.phase, probe, answered) {
            (Phase::Probing, true, true) => Phase::Closed { unanswered: 0 },
            (Phase::Probing, true, false) => self.trip(now + cool_down),
            (Phase::Closed { .. }, false, true) => Phase::Closed { unanswered: 0 },
            (Phase::Closed { unanswered }, false, false) if unanswered + 1 >= after => {
                self.trip(now + cool_down)
            }
            (Phase::Closed { unanswered }, false, false) => Phase::Closed {
                unanswered: unanswered + 1,
            },
            // Sent before the breaker opened: the probe alone decides now.
            (phase, _, _) => phase,
        };
        if matches!(next, Phase::Closed { .. }) {
            self.metrics.open.set(0);
        }
        state.phase = next;
    }

    fn trip(&self, until: Instant) -> Phase {
        self.metrics.open.set(1);
        self.metrics.trips.inc();
        Phase::Open { until }
    }

    /// A probe that never reached the upstream: the next intent probes instead.
    fn probe_unused(&self, now: Instant) {
        let mut state = self.lock();
        if state.phase == Phase::Probing {
            state.phase = Phase::Open { until: now };
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Ticket {
    /// The upstream answered (any status): the count starts over, a probe closes it.
    pub fn answered(mut self) {
        self.reported = true;
        self.breaker.record(self.probe, true, Instant::now());
    }

    /// Not sent, or timed out or reset after sending.
    pub fn unanswered(mut self) {
        self.reported = true;
        self.breaker.record(self.probe, false, Instant::now());
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.probe && !self.reported {
            self.breaker.probe_unused(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests;
