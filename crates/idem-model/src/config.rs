//! What one model check explores: the route's policy, the upstream, the store backend,
//! the fault budgets and bounds, and at most one deliberate bug ([`Mutant`]).
//!
//! Budgets (requests, crashes, failed writes, resolutions, failovers) and the tick
//! bound keep the state space finite; within them every interleaving is explored.

use crate::record::Tick;

/// How the upstream treats the idempotency key idem forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpstreamKind {
    /// Every forwarded call is an execution (a tool API without idempotency keys).
    IgnoresKey,
    /// A second call with the same key within `window` ticks of the first has no
    /// effect and answers the first answer (Stripe keeps a key 24 h).
    Dedup { window: Tick },
}

/// The route's `on_unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnUnknown {
    /// Forward again with the same upstream key while `store clock - sent_at < window`
    /// (`upstream_key_window`); past it, as `Hold`.
    Retry { window: Tick },
    /// Ask the upstream's records first (found → stored, absent → forward again).
    Reconcile,
    /// 409 until an operator resolves it.
    Hold,
}

impl OnUnknown {
    /// A route's default, as idem's `OnUnknown::default_for`: `hold` unless the route
    /// declares how long the provider keeps its key (`upstream_key_window`), then
    /// `retry` within that window less a lease (`RoutePolicy::retry_window`). `retry`
    /// without a window is refused by `idem check`.
    pub fn default_for(upstream_key_window: Option<Tick>, lease: Tick) -> OnUnknown {
        match upstream_key_window {
            Some(window) => OnUnknown::Retry {
                window: window.saturating_sub(lease),
            },
            None => OnUnknown::Hold,
        }
    }
}

/// The store backend, as far as durability is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Memory, PostgreSQL, or Redis with `wait_replicas`: an acknowledged write
    /// survives a failover (a write lost in a failover was never acknowledged, which
    /// the model covers as a failed write).
    Durable,
    /// Redis without `wait_replicas`: a write is acknowledged before it reaches the
    /// replica, and a failover reverts to the replica's last state.
    RedisAsync,
    /// Redis with `wait_replicas`, its failovers modelled: every fenced write,
    /// renewals included, is acknowledged only once the replica has it, so a failover
    /// loses only writes whose `WAIT` failed (a renewal whose owner therefore did not
    /// move its send deadline). [`Mutant::RenewalsNotWaited`] acknowledges renewals
    /// before the replica has them, as idem did before issue 45.
    RedisWait,
}

/// A deliberate bug: the checker must find a counterexample for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// 1. Leases written and judged on each proxy's own (skewed) clock.
    OwnClock,
    /// 2. A takeover that does not check that the lease has ended.
    TakeoverIgnoresLease,
    /// 3. A completion that does not check the token.
    CompleteIgnoresToken,
    /// 4. A resolve that does not check the token the operator read.
    ResolveIgnoresToken,
    /// 5. `on_unknown: retry` past `upstream_key_window`.
    RetryPastWindow,
    /// 6. A failed completion whose background retry gives up at the lease's end.
    CompletionRetryStopsAtLeaseEnd,
    /// 7. A waiter that reads the record before subscribing to its changes.
    ReadThenSubscribe,
    /// Mutant 8, no send guard: an owner sends whenever it gets there, also after its
    /// lease ended (a pause between reserving and writing the request), as idem did
    /// before issue 45. (Mutant 9 is a delivery delay past the margin, a configuration.)
    NoSendGuard,
    /// Mutant 10, renewals not `WAIT`ed under [`Backend::RedisWait`]: a failover rolls
    /// back a renewal the owner's send deadline counted on. (Mutant 11 is an eviction,
    /// `Config::eviction`.)
    RenewalsNotWaited,
    /// Mutant 12, the send deadline counted from the store's answer instead of from
    /// before the owner asked (with `Config::answer_delay`): it ends after the store's
    /// lease.
    DeadlineFromAnswer,
}

/// One model check's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Number of proxies (replicas sharing the store).
    pub proxies: usize,
    /// How many requests for the intent callers send in all (the first and its
    /// duplicates), through any proxy.
    pub requests: u8,
    /// The lease, in ticks (owners renew it while their call runs).
    pub lease: Tick,
    /// Time stops here: the bound on the state space.
    pub max_time: Tick,
    pub upstream: UpstreamKind,
    pub on_unknown: OnUnknown,
    /// `on_failure: retry`: a stored definitive failure starts a new attempt (with a
    /// new upstream key) when repeated; the upstream may then answer a failure.
    pub on_failure_retry: bool,
    pub backend: Backend,
    /// Proxy crashes (the process loses its memory; an in-flight call may or may not
    /// have reached the upstream).
    pub crashes: u8,
    /// Completion writes that fail (the store did not answer), applied or not.
    pub failed_writes: u8,
    /// Operator resolutions of unknown outcomes.
    pub resolutions: u8,
    /// Failovers (only with [`Backend::RedisAsync`]).
    pub failovers: u8,
    /// Each proxy's wall-clock offset from the true time, in ticks. The correct
    /// protocol never reads it; [`Mutant::OwnClock`] does.
    pub skew: Vec<i8>,
    /// Model a duplicate that waits for the completion (`on_concurrent: wait`).
    pub waiter: bool,
    /// The send guard's margin (`src/upstream/gate.rs`): an owner writes its request
    /// only while `now + margin` is before its deadline.
    pub margin: Tick,
    /// How long a written request may take to reach (and execute at) the upstream.
    /// Safe while it is at most `margin`; more is a relaxed assumption (a mutant).
    pub delivery_delay: Tick,
    /// Whether a store's answer may reach the proxy later than the write applied (the
    /// ask and the answer of a reservation as two steps); off, they are one step, which
    /// the correct send guard makes equivalent (`duplicate::owner`).
    pub answer_delay: bool,
    /// Whether an acknowledged renewal before the send also moves the send deadline of
    /// an attempt with history (taken over, its key sent before), as idem's gate does
    /// today. Renewals go on while the owner connects, so the retried call may then
    /// leave any time after its takeover, past the provider's key window, which the
    /// store checked only at the takeover (`tests/findings.rs`). Off: such an attempt is
    /// sent within the lease its takeover granted, or not at all.
    pub renewals_move_retried_deadline: bool,
    /// Whether the store may evict a record (Redis under a `maxmemory-policy` other than
    /// `noeviction`): once. idem refuses to be ready on such a Redis, so the correct
    /// configurations keep it off.
    pub eviction: bool,
    /// Whether an owner that took over an unknown outcome and could not send deletes
    /// the record (idem's `Settle::Release` before the model found it), forgetting that
    /// the key was sent before. Off: it ends its lease instead, as idem now does (see
    /// `tests/findings.rs`).
    pub release_forgets_sent: bool,
    /// Whether duplicates decide with their own (skewed) wall clock while the store
    /// still judges every write on its own: shows that the store's lease check alone
    /// keeps a skewed decision harmless (mutant 2 removes it).
    pub decide_with_own_clock: bool,
    /// Whether the store's takeover checks `upstream_key_window` itself (on its clock,
    /// when it takes over), as idem's `Store::take_over` now does. Off: only the
    /// duplicate's decision checks it, at its read (see `tests/findings.rs`).
    pub takeover_checks_window: bool,
    pub mutant: Option<Mutant>,
}

/// The lease of [`Config::small`].
const SMALL_LEASE: Tick = 2;

/// The highest attempt number explored under `on_failure: retry`.
pub const MAX_ATTEMPTS: u8 = 2;

impl Config {
    /// The default, completely explored configuration for a route with `on_unknown`:
    /// 3 proxies, 3 requests, lease 2, time up to 5, one crash, one failed completion
    /// write, one operator resolution, a send margin of one tick and requests that take
    /// up to that tick to reach the upstream. `Retry` routes get an upstream that
    /// deduplicates for the key window plus a lease; the others an upstream that
    /// ignores the key.
    pub fn small(on_unknown: OnUnknown) -> Config {
        let upstream = match on_unknown {
            OnUnknown::Retry { window } => UpstreamKind::Dedup { window: window + 2 },
            _ => UpstreamKind::IgnoresKey,
        };
        Config {
            proxies: 3,
            requests: 3,
            lease: SMALL_LEASE,
            max_time: 5,
            upstream,
            on_unknown,
            on_failure_retry: false,
            backend: Backend::Durable,
            crashes: 1,
            failed_writes: 1,
            resolutions: 1,
            failovers: 0,
            skew: vec![0; 3],
            waiter: false,
            margin: 1,
            delivery_delay: 1,
            answer_delay: false,
            renewals_move_retried_deadline: false,
            eviction: false,
            release_forgets_sent: false,
            decide_with_own_clock: false,
            takeover_checks_window: true,
            mutant: None,
        }
    }

    /// [`Config::small`] for a route as a user declares it: `upstream_key_window` or
    /// none, `on_unknown` left to its default ([`OnUnknown::default_for`]).
    pub fn route(upstream_key_window: Option<Tick>) -> Config {
        Config::small(OnUnknown::default_for(upstream_key_window, SMALL_LEASE))
    }

    /// A proxy's wall clock at true time `now`.
    pub fn proxy_clock(&self, proxy: usize, now: Tick) -> Tick {
        now.saturating_add_signed(i64::from(self.skew[proxy]))
    }

    /// Whether `mutant` is this configuration's bug.
    pub fn has(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// The same configuration with `mutant`.
    pub fn with(mut self, mutant: Mutant) -> Config {
        self.mutant = Some(mutant);
        self
    }
}
