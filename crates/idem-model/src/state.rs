//! The whole system's state: the store (and its replica), each proxy's request, the
//! upstream, the operator, the waiter, the fault budgets left, and the ghost variables
//! the properties read (what callers received, which milestones were reached).

use crate::record::{Outcome, Record, Tick, Token};
use crate::store::ModelStore;
use crate::upstream::Upstream;

/// What one proxy is doing for its current request (its in-memory state: a crash
/// resets it to `Idle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Read an unknown outcome carrying `seen`: take it over to forward it again.
    TakingOver {
        seen: Token,
    },
    /// Read an unknown outcome under `on_unknown: reconcile`: ask the upstream first.
    Reconciling {
        seen: Token,
        attempt: u8,
    },
    /// The upstream's records had this outcome: settle the record with it.
    Settling {
        seen: Token,
        outcome: Outcome,
    },
    /// Read a stored failure under `on_failure: retry`: take it for a new attempt.
    NewAttempt {
        seen: Token,
    },
    /// The store granted `token` a lease at `granted` (a reservation, takeover or new
    /// attempt), and its answer has not reached the proxy yet (`Config::answer_delay`).
    Asked {
        token: Token,
        attempt: u8,
        granted: Tick,
        retried: bool,
    },
    /// Owns the record under `token`; `lease_until` is its send deadline: the end of
    /// the last lease the store granted it, counted on its own monotonic timer from
    /// before it asked (true time, never later than the store's end).
    Owner {
        token: Token,
        attempt: u8,
        lease_until: Tick,
        /// A renewal found the lease ended, taken over or gone (`SendGate::lose`): no
        /// send and no renewal from now on.
        lost: bool,
        /// Took over a record with history (an unknown outcome, whose key was sent
        /// before, or a stored failure): a failed send must not delete it, and
        /// renewals before the send do not move its deadline.
        retried: bool,
        stage: Stage,
    },
}

/// An owner's progress through its call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Reserved, not sent yet (connecting; renewals run).
    Ready,
    /// Written; the request is on its way to the upstream (`State::wire`).
    Sent,
    /// Sent; the upstream has answered `outcome` (the proxy has not read it yet).
    Awaiting(Outcome),
    /// The caller got `outcome` but storing it failed: retried in the background.
    RetryingCompletion(Outcome),
}

/// The operator at the admin API (at most `Config::resolutions` resolutions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Idle,
    /// Listed an unknown outcome (`seen`) and checked the upstream's records.
    Looked {
        seen: Token,
        found: Option<Outcome>,
    },
}

/// A duplicate under `on_concurrent: wait`, reduced to its wake-up protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiter {
    Idle,
    /// Subscribed to the key's changes, not read yet (`woken`: a change came).
    Subscribed {
        woken: bool,
    },
    /// The buggy order: read an attempt in progress (carrying `seen`), not subscribed.
    ReadFirst {
        seen: Token,
    },
    /// Read an attempt in progress carrying `seen` and sleeps until woken.
    Waiting {
        seen: Token,
        woken: bool,
    },
    /// Found it settled (completed or gone) on reading: nothing to wait for.
    Done,
}

/// Ghost variables: what the properties need to know about the past.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// The last outcome a caller received (first hand or as a replay).
    pub acked: Option<Outcome>,
    /// A caller received an outcome that contradicts one acknowledged before.
    pub contradicted: bool,
    /// A replay answered something the upstream never answered for that attempt.
    pub bad_replay: bool,
    /// An owner stopped storing an outcome it held while the record still carried
    /// its token (the outcome is lost to every later repeat).
    pub dropped: bool,
    /// A takeover or settle replaced an attempt whose lease was live on the store's
    /// clock.
    pub took_live_lease: bool,
    pub completed: bool,
    pub replayed: bool,
    pub taken_over: bool,
    pub reconciled: bool,
    pub resolved: bool,
    pub crashed_in_flight: bool,
    pub failed_over: bool,
    /// An owner's fenced write found no record at all: it vanished (idem counts it as
    /// `idem_records_vanished_total`, never as a takeover).
    pub vanished: bool,
    /// A renewal's or a send guard's refusal kept an owner from sending.
    pub withheld: bool,
}

/// Fault and request budgets left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    pub requests: u8,
    pub crashes: u8,
    pub failed_writes: u8,
    pub resolutions: u8,
    pub failovers: u8,
    pub evictions: u8,
}

/// A request written to the upstream and not yet there: it executes at the latest at
/// `by` (`Config::delivery_delay` after the guard passed), whatever its proxy does
/// meanwhile (a crash does not call it back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Wire {
    pub by: Tick,
    /// The owner's token: its answer goes to the proxy still waiting under it.
    pub token: Token,
    pub attempt: u8,
    pub ok: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The store; its clock is the true time.
    pub store: ModelStore,
    /// The replica's copy of the record (the Redis backends only).
    pub replica: Option<Record>,
    pub proxies: Vec<Phase>,
    /// Requests on their way to the upstream, sorted.
    pub wire: Vec<Wire>,
    pub upstream: Upstream,
    pub operator: Operator,
    pub waiter: Waiter,
    pub budget: Budget,
    pub next_token: Token,
    pub ghost: Ghost,
}

impl State {
    /// The true time (the store's clock).
    pub fn now(&self) -> Tick {
        self.store.clock()
    }

    /// A fresh fencing token.
    pub fn fresh_token(&mut self) -> Token {
        self.next_token += 1;
        self.next_token
    }

    /// A write that wakes watchers landed (completion, release, takeover, settle).
    pub fn notify(&mut self) {
        self.waiter = match self.waiter {
            Waiter::Subscribed { .. } => Waiter::Subscribed { woken: true },
            Waiter::Waiting { seen, .. } => Waiter::Waiting { seen, woken: true },
            other => other,
        };
    }
}
