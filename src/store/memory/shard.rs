//! One shard of the memory store: a map plus two deadline indexes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use crate::store::Record;
use crate::store_key::{KeyMap, StoreKey};

/// A stored record and the monotonic instant it stops being visible.
pub(super) struct Entry {
    pub(super) record: Record,
    pub(super) deadline: Instant,
    /// What it holds in memory, roughly ([`footprint`]), counted in the store's bytes.
    pub(super) size: usize,
}

impl Entry {
    pub(super) fn new(record: Record, deadline: Instant) -> Entry {
        let size = footprint(&record);
        Entry {
            record,
            deadline,
            size,
        }
    }
}

/// The entry, its map slot, its index nodes and the record's fixed fields.
const FIXED_BYTES: usize = 320;

/// What a record holds in memory: a fixed part, its strings, and its stored response
/// (body, headers) or sealed bytes. An estimate (allocators round up), used against
/// `store.memory.max_bytes`.
pub(super) fn footprint(record: &Record) -> usize {
    let strings = record.route.len() + record.scope.len() + record.key.len();
    let response = record.response.as_ref().map_or(0, |r| {
        let headers: usize = r
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 32)
            .sum();
        headers + r.body.as_ref().map_or(0, |b| b.len())
    });
    let sealed = record
        .sealed
        .as_ref()
        .map_or(0, |s| s.key_id.len() + s.bytes.len());
    FIXED_BYTES + strings + response + sealed
}

/// Records of the keys that hash to this shard.
///
/// The indexes are `BTreeSet<(deadline, key)>` like mini-redis's `expirations`, so both
/// "what has expired" and "which completed record expires soonest" are the first items.
pub(super) struct Shard {
    entries: KeyMap<Entry>,
    /// Every entry, for purging expired ones.
    by_deadline: BTreeSet<(Instant, StoreKey)>,
    /// Completed entries only: the eviction candidates. In-progress records are never
    /// evicted, since that would let a duplicate execute while the first call runs.
    completed: BTreeSet<(Instant, StoreKey)>,
    /// The other entries, in progress: what operators list and count, read without
    /// walking the completed ones (a listing costs what the unsettled intents cost).
    open: KeyMap<()>,
    /// The bytes every shard's entries hold ([`Entry::size`]), shared by the store's
    /// shards and kept here by every insert and removal.
    bytes: Arc<AtomicUsize>,
}

impl Shard {
    /// An empty shard whose entries count in `bytes`.
    pub(super) fn new(bytes: Arc<AtomicUsize>) -> Shard {
        Shard {
            entries: KeyMap::default(),
            by_deadline: BTreeSet::new(),
            completed: BTreeSet::new(),
            open: KeyMap::default(),
            bytes,
        }
    }

    /// The entry for `key` if it has not expired at `now`.
    pub(super) fn get_live(&self, key: &StoreKey, now: Instant) -> Option<&Entry> {
        self.entries.get(key).filter(|e| e.deadline > now)
    }

    /// Stores `entry`, replacing any previous one. Returns whether it replaced one
    /// (so the caller's record count only grows for new keys).
    pub(super) fn insert(&mut self, key: StoreKey, entry: Entry) -> bool {
        let replaced = self.remove(&key).is_some();
        self.by_deadline.insert((entry.deadline, key));
        if entry.record.is_completed() {
            self.completed.insert((entry.deadline, key));
        } else {
            self.open.insert(key, ());
        }
        self.bytes.fetch_add(entry.size, Ordering::AcqRel);
        self.entries.insert(key, entry);
        replaced
    }

    pub(super) fn remove(&mut self, key: &StoreKey) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        self.bytes.fetch_sub(entry.size, Ordering::AcqRel);
        self.by_deadline.remove(&(entry.deadline, *key));
        match entry.record.is_completed() {
            true => self.completed.remove(&(entry.deadline, *key)),
            false => self.open.remove(key).is_some(),
        };
        Some(entry)
    }

    /// The in-progress records not expired at `now`, from the `open` index.
    pub(super) fn live_in_progress(
        &self,
        now: Instant,
    ) -> impl Iterator<Item = (&StoreKey, &Record)> + '_ {
        self.open.keys().filter_map(move |key| {
            let entry = self.entries.get(key)?;
            (entry.deadline > now).then_some((key, &entry.record))
        })
    }

    /// Removes every entry whose deadline is at or before `now`; returns how many.
    pub(super) fn purge(&mut self, now: Instant) -> usize {
        let mut purged = 0;
        while let Some(&(deadline, key)) = self.by_deadline.first() {
            if deadline > now {
                break;
            }
            self.remove(&key);
            purged += 1;
        }
        purged
    }

    /// The `n` completed records that expire soonest, soonest first.
    pub(super) fn soonest_completed(
        &self,
        n: usize,
    ) -> impl Iterator<Item = (Instant, StoreKey)> + '_ {
        self.completed.iter().take(n).copied()
    }

    /// Evicts `key` if it is still the completed entry with `deadline` (it may have
    /// changed since [`Shard::soonest_completed`] looked, without the lock held).
    pub(super) fn evict(&mut self, key: &StoreKey, deadline: Instant) -> bool {
        self.completed.contains(&(deadline, *key)) && self.remove(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::StoredResponse;

    fn entry(completed: bool, deadline: Instant) -> Entry {
        let r = Record::in_progress("r", "", "k", [0; 32], [0; 32], Duration::ZERO);
        let record = if completed {
            let resp = StoredResponse {
                status: 200,
                headers: vec![],
                body: None,
            };
            r.completed(resp, Duration::ZERO)
        } else {
            r
        };
        Entry::new(record, deadline)
    }

    #[test]
    fn indexes_follow_inserts_replacements_and_purges() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        let (a, b, c) = (StoreKey([1; 32]), StoreKey([2; 32]), StoreKey([3; 32]));
        let bytes = Arc::new(AtomicUsize::new(0));
        let mut shard = Shard::new(bytes.clone());
        assert!(!shard.insert(a, entry(false, now + s)));
        assert!(!shard.insert(b, entry(true, now + 3 * s)));
        assert!(!shard.insert(c, entry(true, now + 2 * s)));
        assert_eq!(shard.soonest_completed(1).next(), Some((now + 2 * s, c)));
        let open: Vec<_> = shard.live_in_progress(now).map(|(k, _)| *k).collect();
        assert_eq!(open, vec![a], "only the record in progress is open");
        // Completing `a` makes it the soonest eviction candidate, and no longer open.
        assert!(shard.insert(a, entry(true, now + s)));
        assert_eq!(shard.live_in_progress(now).count(), 0);
        assert!(shard.open.is_empty());
        assert_eq!(
            shard.soonest_completed(2).collect::<Vec<_>>(),
            vec![(now + s, a), (now + 2 * s, c)]
        );
        assert!(!shard.evict(&a, now + 5 * s), "stale candidate");
        assert!(shard.evict(&a, now + s));
        assert!(
            shard.get_live(&c, now + 2 * s).is_none(),
            "expired at deadline"
        );
        assert_eq!(shard.purge(now + 2 * s), 1);
        assert_eq!(shard.entries.len(), 1);
        let left: usize = shard.entries.values().map(|e| e.size).sum();
        assert_eq!(
            bytes.load(Ordering::Acquire),
            left,
            "bytes follow every removal"
        );
        assert_eq!(shard.soonest_completed(1).next(), Some((now + 3 * s, b)));
    }
}
