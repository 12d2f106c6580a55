//! The comparison vocabulary: the model's record and a real store's, each mapped onto
//! the few facts both have, in ticks relative to the time they are judged at.
//!
//! Tokens are named by who issued them (`B2`: proxy B's second attempt, `op1`: the
//! operator's first resolution), a real token through the table of the tokens the case
//! issued. Times become "how many ticks ago was the first send" and "is the lease live,
//! and for how many more ticks": a wrong `sent_at` (a proxy's clock instead of the
//! store's) or a lease stamped on the wrong clock shows up as a different number.

use std::collections::HashMap;
use std::fmt;

use idem::store::{Record as RealRecord, Settled as RealSettled, Token as RealToken};
use idem_model::{Outcome, Record as ModelRecord, Settled as ModelSettled, Token};

use super::clock::Schedule;

/// What a stored record is, as both sides can say it.
#[derive(Clone, PartialEq, Eq)]
pub enum View {
    Absent,
    InProgress {
        token: String,
        attempt: u32,
        /// Ticks since the attempt's first send.
        sent_ago: i64,
        lease: Lease,
        settled: Option<&'static str>,
    },
    Completed {
        token: String,
        attempt: u32,
        /// The stored response's status: 200 + id for a success, 400 + id for a failure.
        status: u16,
        settled: Option<&'static str>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lease {
    /// Live for this many more ticks.
    Live(i64),
    Ended,
}

/// One operation's answer.
#[derive(Clone, PartialEq, Eq)]
pub enum Answer {
    Won,
    /// `reserve` found a record (judged at the store's time the answer carries).
    Exists(View),
    /// A fenced write: done or refused.
    Done(bool),
    Read(View),
    /// The operator's resolve refused before writing: the record is not an unknown
    /// outcome (`in_flight`, `not_executed`, `completed`, `absent`).
    NotUnknown(&'static str),
}

/// The names of the tokens a case issued, by model token and by real token.
#[derive(Default)]
pub struct Names {
    model: HashMap<Token, String>,
    real: HashMap<RealToken, String>,
}

impl Names {
    pub fn model_token(&mut self, name: &str, token: Token) {
        self.model.insert(token, name.to_owned());
    }

    pub fn real_token(&mut self, name: &str, token: RealToken) {
        self.real.insert(token, name.to_owned());
    }

    fn of_model(&self, token: Token) -> String {
        self.model
            .get(&token)
            .cloned()
            .unwrap_or(format!("?{token}"))
    }

    fn of_real(&self, token: &RealToken) -> String {
        let unknown = || format!("?{}", &token.to_string()[..8]);
        self.real.get(token).cloned().unwrap_or_else(unknown)
    }
}

/// The status a model outcome is stored as.
pub fn status(outcome: Outcome) -> u16 {
    u16::from(outcome.id) + if outcome.ok { 200 } else { 400 }
}

fn model_settled(s: Option<ModelSettled>) -> Option<&'static str> {
    s.map(|s| match s {
        ModelSettled::NotExecuted => "not_executed",
        ModelSettled::Resolved => "resolved",
        ModelSettled::Reconciled => "reconciled",
    })
}

fn real_settled(s: Option<RealSettled>) -> Option<&'static str> {
    s.map(RealSettled::as_str)
}

/// The model's record at its clock `now`.
pub fn of_model(record: Option<ModelRecord>, now: u64, names: &Names) -> View {
    match record {
        None => View::Absent,
        Some(ModelRecord::InProgress {
            token,
            lease_end,
            sent_at,
            attempt,
            settled,
        }) => View::InProgress {
            token: names.of_model(token),
            attempt: u32::from(attempt),
            sent_ago: now as i64 - sent_at as i64,
            lease: match lease_end <= now {
                true => Lease::Ended,
                false => Lease::Live(lease_end as i64 - now as i64),
            },
            settled: model_settled(settled),
        },
        Some(ModelRecord::Completed {
            token,
            outcome,
            settled,
        }) => View::Completed {
            token: names.of_model(token),
            attempt: u32::from(outcome.attempt),
            status: status(outcome),
            settled: model_settled(settled),
        },
    }
}

/// When a real record is judged: at the current tick (a `get`, which carries no time),
/// or at the store's time an answer carries (`reserve`), in unix ms.
#[derive(Clone, Copy)]
pub enum At {
    Tick,
    StoreMs(u64),
}

/// A real store's record, judged `at`.
pub fn of_real(record: Option<&RealRecord>, at: At, clock: &Schedule, names: &Names) -> View {
    let Some(r) = record else {
        return View::Absent;
    };
    let token = names.of_real(&r.token);
    let settled = real_settled(r.settled);
    if r.is_completed() {
        let status = r.response.as_ref().map_or(0, |resp| resp.status);
        let attempt = r.attempt;
        return View::Completed {
            token,
            attempt,
            status,
            settled,
        };
    }
    let (sent_ago, left) = match at {
        At::Tick => {
            let now = clock.now() as i64;
            let end = clock.tick_of(r.expires_at_ms);
            (now - clock.tick_of(r.sent_at_ms), end - now)
        }
        At::StoreMs(now) => (
            clock.ticks_between(r.sent_at_ms, now),
            match r.expires_at_ms <= now {
                true => 0,
                false => clock.ticks_left(now, r.expires_at_ms).max(1),
            },
        ),
    };
    View::InProgress {
        token,
        attempt: r.attempt,
        sent_ago,
        lease: if left <= 0 {
            Lease::Ended
        } else {
            Lease::Live(left)
        },
        settled,
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settled = |s: &Option<&str>| s.map(|s| format!(", {s}")).unwrap_or_default();
        match self {
            View::Absent => f.write_str("absent"),
            View::InProgress {
                token,
                attempt,
                sent_ago,
                lease,
                settled: s,
            } => {
                let lease = match lease {
                    Lease::Live(n) => format!("lease live {n} more"),
                    Lease::Ended => "lease ended".to_owned(),
                };
                write!(
                    f,
                    "in progress {token} (attempt {attempt}, sent {sent_ago} ago, {lease}{})",
                    settled(s)
                )
            }
            View::Completed {
                token,
                attempt,
                status,
                settled: s,
            } => write!(
                f,
                "completed {token} (attempt {attempt}, status {status}{})",
                settled(s)
            ),
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Won => f.write_str("won"),
            Answer::Exists(v) => write!(f, "exists: {v}"),
            Answer::Done(true) => f.write_str("done"),
            Answer::Done(false) => f.write_str("refused"),
            Answer::Read(v) => write!(f, "{v}"),
            Answer::NotUnknown(why) => write!(f, "not an unknown outcome ({why})"),
        }
    }
}
