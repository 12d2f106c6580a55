//! What the three subscribers share — the process's subscription (`subscriber.rs`), the
//! cluster's sharded one (`sharded.rs`) and the sentinels' announcements (`switch.rs`):
//! their reconnect pacing, the event's format, and how a lost subscription is logged.
//! A leaf, so that none of them imports another for these.

use std::time::Duration;

use super::local::Local;
use crate::store::Watchers;
use crate::store_key::StoreKey;

pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(1);
pub(super) const PING_INTERVAL: Duration = Duration::from_secs(5);

/// The suffix of an admin delete's event: replicas forget what they remember of the key.
pub(super) const DELETED: &[u8] = b":deleted";

/// Wakes the watchers of the key named by an event's payload (the key in hex, and
/// [`DELETED`] after an admin delete).
pub(super) fn dispatch(watchers: &Watchers, local: &Local, payload: &[u8]) {
    let (hex, deleted) = match payload.strip_suffix(DELETED) {
        Some(hex) => (hex, true),
        None => (payload, false),
    };
    match crate::fast_hex::decode(hex) {
        Some(key) => {
            let key = StoreKey(key);
            if deleted {
                local.forget(&key);
            }
            // Before the wake-up: a waiter woken now must not join a stale read.
            local.changed(&key);
            watchers.notify(&key);
        }
        None => tracing::debug!("ignoring malformed redis event"),
    }
}

/// Once per outage at warn level; the health loop reports the outage too.
pub(super) fn log_failure(failures: &mut u32, error: &str) {
    *failures += 1;
    if *failures == 1 {
        tracing::warn!(%error, "cannot subscribe to redis events; retrying");
    } else {
        tracing::debug!(%error, failures = *failures, "redis subscribe failed");
    }
}
