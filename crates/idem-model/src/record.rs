//! The values a store holds and answers with: one intent's record, the outcome of an
//! execution, and what a reservation answers. Kept apart from the operations
//! ([`crate::store`]) so that the model's state and a later comparison with the real
//! stores share one vocabulary.

/// A time on a clock, in ticks. The model's time is discrete and bounded so that its
/// state space is finite; a tick stands for "some time", not a fixed number of ms.
pub type Tick = u64;

/// A fencing token: unique per reservation and per takeover, never reused.
pub type Token = u32;

/// What one execution at the upstream answered: which answer it was (`id`, unique per
/// answer the upstream gave), for which attempt (the upstream key is the intent's key
/// for attempt 1, `<key>:attempt-<n>` after), and whether it succeeded (a side effect)
/// or was a definitive failure without one (a 4xx such as "card declined").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outcome {
    pub id: u8,
    pub attempt: u8,
    pub ok: bool,
}

/// How a record was settled by someone other than its owner (SPEC §1 "Unknown outcomes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Settled {
    /// An operator said the attempt never ran: the next repeat takes it over and
    /// forwards it again (same upstream key).
    NotExecuted,
    /// An operator recorded the outcome (`resolve` with `completed`).
    Resolved,
    /// The upstream's records said what happened (`on_unknown: reconcile`, found).
    Reconciled,
}

/// The record under the intent's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Record {
    /// An attempt whose outcome the store does not know yet. Once `lease_end` has
    /// passed on the store's clock it is an *unknown outcome*.
    InProgress {
        token: Token,
        lease_end: Tick,
        /// When the attempt was first reserved (the start of `upstream_key_window`).
        sent_at: Tick,
        attempt: u8,
        /// `Some(NotExecuted)` after an operator said it never ran.
        settled: Option<Settled>,
    },
    /// The stored outcome, replayed to every repeat.
    Completed {
        token: Token,
        outcome: Outcome,
        settled: Option<Settled>,
    },
}

impl Record {
    /// The record's fencing token.
    pub fn token(&self) -> Token {
        match *self {
            Record::InProgress { token, .. } | Record::Completed { token, .. } => token,
        }
    }

    /// The stored outcome, if completed.
    pub fn outcome(&self) -> Option<Outcome> {
        match *self {
            Record::Completed { outcome, .. } => Some(outcome),
            Record::InProgress { .. } => None,
        }
    }

    /// Whether this is an attempt whose lease has ended by `at`: an unknown outcome
    /// (or one an operator settled as not executed).
    pub fn lease_ended(&self, at: Tick) -> bool {
        matches!(*self, Record::InProgress { lease_end, .. } if lease_end <= at)
    }

    /// The attempt number (of the stored outcome, for a completed record).
    pub fn attempt(&self) -> u8 {
        match *self {
            Record::InProgress { attempt, .. } => attempt,
            Record::Completed { outcome, .. } => outcome.attempt,
        }
    }
}

/// What `reserve` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reserved {
    /// The key was absent: the caller's record is stored and the caller owns it.
    Won,
    /// Someone else's record, and the store's clock when it was read (the duplicate
    /// judges the lease with that time, never its own clock).
    Exists { record: Record, now: Tick },
}

/// What an operator records for an unknown outcome (`POST .../resolve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resolution {
    /// It happened, with this outcome: replayed from then on.
    Completed(Outcome),
    /// It never happened: the next repeat forwards it again.
    NotExecuted,
}
