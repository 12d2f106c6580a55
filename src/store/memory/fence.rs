//! How the memory store checks the fence conditions (`idem_fence::FENCES`, the one
//! statement of them): one arm per condition, on the store's monotonic clock in ms.

use std::time::Duration;

use idem_fence::{Condition, Write};

use super::shard::Entry;
use crate::store::Token;

/// What a fenced write brings to its guards: the token it holds (or read), and a
/// takeover's key window.
pub(super) struct Claim<'a> {
    pub owner: &'a Token,
    pub window: Option<Duration>,
}

impl<'a> Claim<'a> {
    /// The claim of a write that carries no key window.
    pub(super) fn of(owner: &'a Token) -> Claim<'a> {
        Claim {
            owner,
            window: None,
        }
    }
}

/// Whether the live `entry` passes every condition of `write`'s row at `now_ms`.
pub(super) fn admits(write: Write, entry: &Entry, claim: &Claim<'_>, now_ms: u64) -> bool {
    write
        .requires()
        .iter()
        .all(|c| holds(*c, entry, claim, now_ms))
}

/// One condition on a live entry (one past its retention is never passed here: a
/// record that is gone carries no token).
fn holds(condition: Condition, entry: &Entry, claim: &Claim<'_>, now_ms: u64) -> bool {
    let record = &entry.record;
    match condition {
        Condition::Owner => record.token == *claim.owner,
        Condition::InProgress => !record.is_completed(),
        Condition::LeaseEnded => record.lease_ended(now_ms),
        Condition::LeaseLive => !record.lease_ended(now_ms),
        Condition::WithinKeyWindow => claim.window.is_none_or(|w| {
            now_ms.saturating_sub(record.sent_at_ms)
                < u64::try_from(w.as_millis()).unwrap_or(u64::MAX)
        }),
    }
}
