//! In-process store: the embedded default for a single replica.
//!
//! Built like mini-redis's `db.rs`: records live in `std::sync::Mutex`-guarded maps
//! (16 shards chosen by the key's first byte, so unrelated keys rarely contend), no
//! lock is ever held across an `.await` — every operation is a short critical section
//! — and a background task purges expired records until the last handle drops.
//!
//! Atomicity per key comes from doing check and write under one shard lock. The store
//! is bounded: a new key beyond `max_records` first evicts the completed records that
//! expire soonest (a small batch at a time, see [`EVICT_BATCH_DIVISOR`]); in-progress records are never evicted (that would let a duplicate
//! execute while the first call runs), so with only those left `reserve` fails `Full`.

mod clock;
mod fence;
mod shard;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use tokio::time::Instant;

use idem_fence::Write;

use self::clock::MonotonicClock;
use self::fence::Claim;
use self::shard::{Entry, Shard};
use super::listing::Soonest;
use super::task::AbortOnDrop;
use super::{Record, Reserve, StoreError, Token, Watch, Watchers};
use crate::store_key::StoreKey;

const SHARDS: usize = 16;
/// Expired records are already invisible; purging only returns their memory.
const PURGE_INTERVAL: Duration = Duration::from_secs(1);
/// Rounds of "make room, retry" before `reserve` reports `Full` under contention.
const ROOM_ATTEMPTS: usize = 8;
/// A full store evicts `max_records / EVICT_BATCH_DIVISOR` completed records at a time
/// (390 of the default 100 000): the scan over every shard is paid once per batch.
const EVICT_BATCH_DIVISOR: usize = 256;

/// Handle to the in-process store; clones share the same records.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    /// Stops the purge task when the last clone drops.
    _purge: Arc<AbortOnDrop>,
}

struct Shared {
    shards: Vec<Mutex<Shard>>,
    /// Records held across all shards (expired ones count until removed). Slots are
    /// claimed with a compare-and-swap *before* inserting, so it never exceeds `max`.
    len: AtomicUsize,
    max: usize,
    /// What the records hold together ([`shard::footprint`]), kept by the shards, and
    /// its bound: a reservation makes room before it is stored, a completion right
    /// after. A completion is never refused (its call ran), so the sum can pass
    /// `max_bytes` by the responses being stored at that moment, which
    /// `server.max_buffered_bytes` bounds.
    bytes: Arc<AtomicUsize>,
    max_bytes: usize,
    watchers: Watchers,
    /// Leases are stamped and judged on this clock, never on the wall clock.
    clock: MonotonicClock,
}

// === impl MemoryStore ===

impl MemoryStore {
    /// A store holding at most `max_records` records and about `max_bytes`. Must be
    /// called inside a tokio runtime: it spawns the purge task.
    pub fn new(max_records: usize, max_bytes: usize) -> MemoryStore {
        let bytes = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(bytes.clone())))
                .collect(),
            len: AtomicUsize::new(0),
            max: max_records,
            bytes,
            max_bytes,
            watchers: Watchers::new(),
            clock: MonotonicClock::start(),
        });
        let task = tokio::spawn(purge(shared.clone()));
        MemoryStore {
            shared,
            _purge: Arc::new(AbortOnDrop(task)),
        }
    }

    /// Records currently held, including expired ones not yet purged.
    /// The most records it holds (`store.memory.max_records`).
    pub fn max_records(&self) -> usize {
        self.shared.max
    }

    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Acquire)
    }

    /// What the records hold together, by [`shard::footprint`]'s estimate.
    pub fn bytes(&self) -> usize {
        self.shared.bytes.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub async fn reserve(
        &self,
        key: &StoreKey,
        record: &Record,
        lease: Duration,
    ) -> Result<Reserve, StoreError> {
        for _ in 0..ROOM_ATTEMPTS {
            {
                let mut shard = self.shared.shard(key);
                let now = Instant::now();
                if let Some(e) = shard.get_live(key, now) {
                    return Ok(Reserve::Exists(e.record.clone(), self.shared.clock.at(now)));
                }
                self.shared.remove(&mut shard, key);
                let entry = self.shared.entry(record, now, lease);
                if self.shared.fits(entry.size) && self.shared.claim_slot() {
                    shard.insert(*key, entry);
                    return Ok(Reserve::Won);
                }
            }
            // Full: make room without holding the key's shard (eviction locks others).
            if !self.shared.make_room(shard::footprint(record)) {
                break;
            }
        }
        Err(StoreError::Full(self.shared.max))
    }

    pub async fn replace_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
    ) -> Result<bool, StoreError> {
        let claim = Claim::of(owner);
        let replaced = self.fenced(key, Write::ReplaceIfOwner, &claim, record, ttl);
        // A completion is stored whether its response fits or not (its call ran); past
        // `max_bytes`, room is made now, without the key's shard held (eviction locks
        // the others), from the completed records that expire before this one.
        for _ in 0..ROOM_ATTEMPTS {
            if self.shared.fits(0) || !self.shared.make_room(0) {
                break;
            }
        }
        if replaced && notify {
            self.shared.watchers.notify(key);
        }
        Ok(replaced)
    }

    /// As `replace_if_owner`, only while the record is an attempt whose lease ended by
    /// the store's clock (and, with `window`, whose first send is younger than it);
    /// watchers are woken.
    pub async fn take_over(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        window: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let claim = Claim { owner, window };
        let taken = self.fenced(key, Write::TakeOver, &claim, record, ttl);
        if taken {
            self.shared.watchers.notify(key);
        }
        Ok(taken)
    }

    /// As `replace_if_owner` (silent), only while the owner's lease has not ended.
    pub async fn renew(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let claim = Claim::of(owner);
        Ok(self.fenced(key, Write::Renew, &claim, record, ttl))
    }

    /// Replace the live record when it passes `write`'s fence conditions (`fence.rs`)
    /// on the store's clock. The stored first send is kept unless this write is a first
    /// send (SPEC §1 "One clock for every lease": `sent_at` is the store's, and a
    /// renewal or an ended lease carries the writer's estimate, off by its clock's skew).
    fn fenced(
        &self,
        key: &StoreKey,
        write: Write,
        claim: &Claim<'_>,
        record: &Record,
        ttl: Duration,
    ) -> bool {
        let mut shard = self.shared.shard(key);
        let now = Instant::now();
        let now_ms = self.shared.clock.at(now);
        let admitted = |e: &&Entry| fence::admits(write, e, claim, now_ms);
        let Some(stored) = shard.get_live(key, now).filter(admitted) else {
            return false;
        };
        let mut entry = self.shared.entry(record, now, ttl);
        if !record.stamp.is_some_and(|s| s.sent) {
            // Not a first send: the attempt's first send is the one stored, on this
            // store's clock; the writer's copy holds its own clock's estimate.
            entry.record.sent_at_ms = stored.record.sent_at_ms;
        }
        shard.insert(*key, entry);
        true
    }

    pub async fn release_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
    ) -> Result<bool, StoreError> {
        {
            let mut shard = self.shared.shard(key);
            let now = Instant::now();
            let claim = Claim::of(owner);
            let admitted = |e: &Entry| {
                fence::admits(Write::ReleaseIfOwner, e, &claim, self.shared.clock.at(now))
            };
            if !shard.get_live(key, now).is_some_and(admitted) {
                return Ok(false);
            }
            self.shared.remove(&mut shard, key);
        }
        self.shared.watchers.notify(key);
        Ok(true)
    }

    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let shard = self.shared.shard(key);
        Ok(shard
            .get_live(key, Instant::now())
            .map(|e| e.record.clone()))
    }

    pub async fn get_with_life(
        &self,
        key: &StoreKey,
    ) -> Result<Option<(Record, Duration)>, StoreError> {
        let now = Instant::now();
        let shard = self.shared.shard(key);
        Ok(shard
            .get_live(key, now)
            .map(|e| (e.record.clone(), e.deadline - now)))
    }

    pub async fn delete(&self, key: &StoreKey) -> Result<bool, StoreError> {
        let existed = {
            let mut shard = self.shared.shard(key);
            let live = shard.get_live(key, Instant::now()).is_some();
            self.shared.remove(&mut shard, key);
            live
        };
        if existed {
            self.shared.watchers.notify(key);
        }
        Ok(existed)
    }

    pub fn watch(&self, key: &StoreKey) -> Watch {
        self.shared.watchers.watch(key)
    }

    /// One shard locked at a time, each for one pass over its entries.
    pub async fn list_in_progress(
        &self,
        limit: usize,
    ) -> Result<Vec<(StoreKey, Record)>, StoreError> {
        let mut soonest = Soonest::new(limit);
        let now = Instant::now();
        for shard in &self.shared.shards {
            for (key, record) in lock(shard).live_in_progress(now) {
                soonest.push(*key, record.clone());
            }
        }
        Ok(soonest.finish())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The store's clock: monotonic, anchored to the wall clock at creation.
    pub async fn clock_ms(&self) -> Result<u64, StoreError> {
        Ok(self.shared.clock.at(Instant::now()))
    }
}

/// A copy of `record` whose header values own their bytes. Header values parsed by
/// hyper are slices of the connection's read buffer: a plain clone would keep that
/// whole buffer (8 KiB and more) alive for the record's retention — 100 000 records
/// then held ~700 MiB instead of a few dozen. (The body is the capture's own buffer.)
fn owned(record: &Record) -> Record {
    let mut copy = record.clone();
    if let Some(response) = copy.response.as_mut() {
        for (_, value) in response.headers.iter_mut() {
            let bytes = Bytes::copy_from_slice(value.as_bytes());
            if let Ok(fresh) = HeaderValue::from_maybe_shared(bytes) {
                *value = fresh;
            }
        }
    }
    copy
}

// === impl Shared ===

impl Shared {
    /// `record` as stored at `now`: stamped with this store's clock, living `ttl`.
    fn entry(&self, record: &Record, now: Instant, ttl: Duration) -> Entry {
        // A TTL too large for `Instant` means "effectively forever" (100 years).
        let deadline = now
            .checked_add(ttl)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let mut record = owned(record);
        record.apply_stamp(self.clock.at(now));
        Entry::new(record, deadline)
    }

    /// Whether `size` more bytes fit under `max_bytes`.
    fn fits(&self, size: usize) -> bool {
        self.bytes.load(Ordering::Acquire).saturating_add(size) <= self.max_bytes
    }

    fn shard(&self, key: &StoreKey) -> MutexGuard<'_, Shard> {
        lock(&self.shards[usize::from(key.0[0]) % SHARDS])
    }

    /// Removes `key`'s entry (live or expired) from a locked shard, keeping `len` exact.
    fn remove(&self, shard: &mut Shard, key: &StoreKey) {
        if shard.remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn claim_slot(&self) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    fn purge_expired(&self, now: Instant) {
        for shard in &self.shards {
            let purged = lock(shard).purge(now);
            self.len.fetch_sub(purged, Ordering::AcqRel);
        }
    }

    /// Frees a slot and `size` bytes: drop expired records, else evict the completed
    /// records expiring soonest — a batch of them (`max / EVICT_BATCH_DIVISOR`, at least
    /// one), so a full store under a stream of new keys pays the shard scan once per
    /// batch rather than once per reservation. Locks one shard at a time, so it cannot
    /// deadlock with key operations; the key's own shard must not be held.
    fn make_room(&self, size: usize) -> bool {
        self.purge_expired(Instant::now());
        if self.len.load(Ordering::Acquire) < self.max && self.fits(size) {
            return true;
        }
        let batch = (self.max / EVICT_BATCH_DIVISOR).max(1);
        for _ in 0..ROOM_ATTEMPTS {
            // The `batch` soonest-expiring completed records overall are among the
            // `batch` soonest of each shard.
            let mut candidates: Vec<((Instant, StoreKey), usize)> = Vec::new();
            for (i, shard) in self.shards.iter().enumerate() {
                let shard = lock(shard);
                candidates.extend(shard.soonest_completed(batch).map(|c| (c, i)));
            }
            if candidates.is_empty() {
                return false;
            }
            candidates.sort_unstable();
            candidates.truncate(batch);
            let mut evicted = 0;
            for ((deadline, key), i) in candidates {
                if lock(&self.shards[i]).evict(&key, deadline) {
                    evicted += 1;
                }
            }
            if evicted > 0 {
                self.len.fetch_sub(evicted, Ordering::AcqRel);
                return true;
            }
        }
        false
    }
}

/// Critical sections never panic halfway, so a poisoned lock holds consistent data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn purge(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(PURGE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        shared.purge_expired(Instant::now());
    }
}

#[cfg(test)]
mod tests;
