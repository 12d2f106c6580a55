//! In-process coalescing: concurrent duplicates of one key at one replica share one
//! store round trip and one wait, so a duplicate storm does not multiply Redis traffic.
//!
//! One map per process (shared by every worker through [`super::RedisEvents`]) holds, per key:
//! - `Reserving`: a reservation is on its way to Redis. Later arrivals follow it and
//!   take its outcome (the winner's record, or the record Redis returned) instead of
//!   sending their own `SET NX`. Once an event about the key arrives (a completion
//!   published by another replica), that read may predate the change, and a waiter
//!   that registers its watch only now would never hear of it: later arrivals then go
//!   to Redis on their own instead (a lost wake-up, found by the three-replica soak:
//!   about 1 wait in 55 was woken only by the 1 s fallback timer).
//! - `Owned`: this process reserved the key and is running it. A duplicate arriving here
//!   learns "in progress" from that record without asking Redis: the owner is the one
//!   process that knows for sure. Renewals keep the record current; an entry whose
//!   lease ran out is ignored (the owner may have stalled and been taken over). How
//!   long the lease has left is measured on the monotonic clock from the write that
//!   set it, never on the wall clock: Redis's clock judges the lease, and this estimate
//!   errs early (it starts after the write's reply). An attempt this process took
//!   over is not held: its record's first send is on the store's clock and its lease
//!   on this proxy's, so no one time judges both (found by `tests/stores/store_model.rs`).
//! - `Completed`: the owner's completion, kept for [`KEEP_COMPLETED`] when duplicates
//!   were seen, so the waiters it wakes (and the stragglers of the storm) replay it
//!   without a round trip. A completed record is immutable but for an admin delete,
//!   whose event (published with a `:deleted` suffix) drops the entry on every replica.
//!
//! Only reservations are coalesced; completions, renewals and releases always go to
//! Redis and keep the map in step. A key without duplicates costs two map operations.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::store::{Record, StoreError, Token};
use crate::store_key::{KeyMap, StoreKey};

/// How long a completed record stays here after duplicates were seen.
pub(super) const KEEP_COMPLETED: Duration = Duration::from_secs(2);
const SHARDS: usize = 16;

/// The outcome a leading reservation hands its followers: the record to treat as the
/// existing one, and the store's time when it was read.
type Shared = Option<Result<(Record, u64), StoreError>>;

enum Entry {
    /// `outcome` is created by the first follower, so a key without duplicates never
    /// allocates a channel.
    Reserving {
        id: u64,
        outcome: Option<watch::Sender<Shared>>,
        /// An event about the key arrived since the leader sent its read.
        changed: bool,
    },
    // Records are boxed: an entry is moved into and out of the map's table, and a
    // pointer is cheaper to move than a record (about 300 bytes).
    Owned {
        record: Box<Record>,
        /// When its lease ends, by this process's monotonic clock (`None`: unknown,
        /// ask Redis).
        lease_until: Option<Instant>,
        duplicates: bool,
    },
    Completed {
        record: Box<Record>,
        until: Instant,
    },
}

/// The process's map. Cheap to clone (shared).
#[derive(Clone, Default)]
pub(crate) struct Local {
    shards: Arc<[Shard; SHARDS]>,
}

#[derive(Default)]
#[repr(align(128))]
struct Shard {
    map: Mutex<KeyMap<Entry>>,
    next_id: std::sync::atomic::AtomicU64,
    last_sweep: Mutex<Option<Instant>>,
}

/// What a reservation should do.
// Not boxed, like `store::Reserve`: a `Coalesce` lives for one `match` on the request path.
#[allow(clippy::large_enum_variant)]
pub(super) enum Coalesce {
    /// Use this record as the existing one (no round trip), judged at this time of the
    /// store's clock (extrapolated on the monotonic clock from the last reading).
    Known((Record, u64)),
    /// Another reservation of this key is under way: wait for its outcome.
    Follow(watch::Receiver<Shared>),
    /// Another reservation is under way, but the key changed since it read: go to
    /// Redis without leading.
    Alone,
    /// Go to Redis, then report through the guard.
    Lead(Leader),
}

/// The leading reservation's duty to report its outcome; dropping it unreported (the
/// request was cancelled, or Redis failed) lets followers go to Redis themselves.
pub(super) struct Leader {
    local: Local,
    key: StoreKey,
    id: u64,
}

impl Local {
    pub(super) fn lookup(&self, key: &StoreKey) -> Coalesce {
        let shard = self.shard(key);
        let mut map = lock(&shard.map);
        match map.get_mut(key) {
            Some(Entry::Reserving { changed: true, .. }) => return Coalesce::Alone,
            Some(Entry::Reserving { outcome, .. }) => {
                let tx = outcome.get_or_insert_with(|| watch::channel(None).0);
                return Coalesce::Follow(tx.subscribe());
            }
            Some(Entry::Owned {
                record,
                lease_until: Some(lease_until),
                duplicates,
            }) if *lease_until > Instant::now() => {
                *duplicates = true;
                // The record's own (estimated) lease end, less what is left of it: a
                // store time at which the decision finds the lease live.
                let left = lease_until.saturating_duration_since(Instant::now());
                let now = record.expires_at_ms.saturating_sub(left.as_millis() as u64);
                return Coalesce::Known((Record::clone(record), now));
            }
            Some(Entry::Completed { record, until }) if *until > Instant::now() => {
                // A completed record is decided without the clock (replayed, or taken
                // over by a new attempt whose lease the store stamps).
                return Coalesce::Known((Record::clone(record), 0));
            }
            _ => {}
        }
        let id = shard
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let reserving = Entry::Reserving {
            id,
            outcome: None,
            changed: false,
        };
        map.insert(*key, reserving);
        drop(map);
        self.sweep(shard);
        Coalesce::Lead(Leader {
            local: self.clone(),
            key: *key,
            id,
        })
    }

    /// A write of ours succeeded: keep the entry in step with what Redis now holds.
    pub(super) fn written(&self, key: &StoreKey, owner: &Token, record: &Record) {
        let mut map = lock(&self.shard(key).map);
        let duplicates = match map.get(key) {
            Some(Entry::Owned { duplicates, .. }) => *duplicates,
            Some(Entry::Reserving { outcome, .. }) => outcome.is_some(),
            _ => false,
        };
        let lease_until = lease_until(record);
        if record.is_completed() {
            if duplicates {
                let until = Instant::now() + KEEP_COMPLETED;
                let record = Box::new(record.clone());
                map.insert(*key, Entry::Completed { record, until });
            } else {
                map.remove(key);
            }
        } else if record.token == *owner {
            // A renewal: only refresh an entry we already hold.
            if let Some(Entry::Owned {
                record: held,
                lease_until: until,
                ..
            }) = map.get_mut(key)
            {
                if held.token == *owner {
                    (**held).clone_from(record);
                    *until = lease_until;
                }
            }
        } else {
            // A takeover: a new attempt of ours, but duplicates ask Redis. Its record
            // mixes clocks: the first send is the store's (read with the attempt taken
            // over), the lease's end this proxy's estimate, so a time derived from the
            // one (`Coalesce::Known`) would misjudge the other (the key window) by this
            // proxy's skew. Whatever this process held of the key is stale either way.
            map.remove(key);
        }
    }

    /// An event about the key arrived (completed, released or deleted somewhere): a
    /// reservation under way may have read it before the change, so nobody joins it
    /// any more.
    pub(super) fn changed(&self, key: &StoreKey) {
        if let Some(Entry::Reserving { changed, .. }) = lock(&self.shard(key).map).get_mut(key) {
            *changed = true;
        }
    }

    /// As [`Local::changed`] for every key: events may have been missed.
    pub(super) fn all_changed(&self) {
        for shard in self.shards.iter() {
            for entry in lock(&shard.map).values_mut() {
                if let Entry::Reserving { changed, .. } = entry {
                    *changed = true;
                }
            }
        }
    }

    /// The key was released, deleted, or changed elsewhere in a way that matters.
    pub(super) fn forget(&self, key: &StoreKey) {
        let mut map = lock(&self.shard(key).map);
        if !matches!(map.get(key), Some(Entry::Reserving { .. })) {
            map.remove(key);
        }
    }

    fn shard(&self, key: &StoreKey) -> &Shard {
        &self.shards[usize::from(key.0[1]) % SHARDS]
    }

    /// Drops completed entries past their time, at most once a second per shard.
    fn sweep(&self, shard: &Shard) {
        let now = Instant::now();
        {
            let mut last = lock(&shard.last_sweep);
            if last.is_some_and(|t| now < t + Duration::from_secs(1)) {
                return;
            }
            *last = Some(now);
        }
        lock(&shard.map)
            .retain(|_, e| !matches!(e, Entry::Completed { until, .. } if *until <= now));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.map).len()).sum()
    }
}

impl Leader {
    /// Redis granted the key to us: followers see our record as the existing one.
    pub(super) fn won(self, record: &Record) {
        let lease_until = lease_until(record);
        // Our own estimate of the lease's end, as `Coalesce::Known` answers it.
        let now = record
            .expires_at_ms
            .saturating_sub(record.stamp.map_or(0, |s| s.lease.as_millis() as u64));
        self.settle(
            |duplicates| {
                Some(Entry::Owned {
                    record: Box::new(record.clone()),
                    lease_until,
                    duplicates,
                })
            },
            record,
            now,
        );
    }

    /// Redis holds someone else's record (or ours, completed), read at the store's
    /// time `now`: followers take it too, and a completed one is kept when there were
    /// duplicates.
    pub(super) fn exists(self, record: &Record, now: u64) {
        self.settle(
            |duplicates| {
                (record.is_completed() && duplicates).then(|| Entry::Completed {
                    record: Box::new(record.clone()),
                    until: Instant::now() + KEEP_COMPLETED,
                })
            },
            record,
            now,
        );
    }

    /// Replaces our `Reserving` entry with what `next` makes of it (given whether
    /// duplicates arrived), then hands `record` to the followers. It is cloned only for
    /// them: a key without duplicates costs one clone, for the map.
    fn settle(&self, next: impl FnOnce(bool) -> Option<Entry>, record: &Record, now: u64) {
        let mut map = lock(&self.local.shard(&self.key).map);
        let outcome = match map.get_mut(&self.key) {
            Some(Entry::Reserving { id, outcome, .. }) if *id == self.id => outcome.take(),
            _ => return,
        };
        match next(outcome.is_some()) {
            Some(entry) => map.insert(self.key, entry),
            None => map.remove(&self.key),
        };
        drop(map);
        if let Some(tx) = outcome {
            tx.send_replace(Some(Ok((record.clone(), now))));
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Unless `won` or `exists` replaced it, our `Reserving` entry goes.
        let mut map = lock(&self.local.shard(&self.key).map);
        if matches!(map.get(&self.key), Some(Entry::Reserving { id, .. }) if *id == self.id) {
            map.remove(&self.key);
        }
    }
}

/// When the lease a write of ours just set ends, on the monotonic clock (`None` for a
/// record without one: completed, or read from the store).
fn lease_until(record: &Record) -> Option<Instant> {
    record.stamp.map(|s| Instant::now() + s.lease)
}

/// Short, panic-free critical sections: a poisoned lock still holds consistent data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
