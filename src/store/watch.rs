//! Wake-ups for duplicates waiting on a key (`on_concurrent: wait`).
//!
//! One [`Watchers`] registry per store maps a key to a `tokio::sync::watch` channel
//! carrying a version counter. A [`Watch`] is a receiver created under the registry
//! lock, so it has already "seen" the current version: any [`Watchers::notify`] after
//! [`Watchers::watch`] returns is observed by [`Watch::changed`], even one that happens
//! between the caller reading the record and awaiting. That is why callers register
//! *before* they read.
//!
//! The registry is shared by every worker thread of the process, so it is split into
//! [`SHARDS`] maps by key: registering and dropping a watch (twice per protected request)
//! rarely contends across cores.
//!
//! Waiters hold nothing but a channel receiver — never a store connection — so a burst
//! of duplicates cannot starve the winner of the connection it needs to complete.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::store_key::{KeyMap, StoreKey};

/// Independent maps in the registry; keys are SHA-256 digests, so their first byte
/// spreads them evenly.
const SHARDS: usize = 16;

type Shards = Arc<[Shard; SHARDS]>;

/// One map on cache lines of its own, so locking it does not invalidate its neighbours
/// on another core (128: adjacent-line prefetch pairs 64-byte lines on x86).
#[derive(Default)]
#[repr(align(128))]
struct Shard(Mutex<KeyMap<Slot>>);

/// Registry of keys with at least one live [`Watch`]. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Watchers {
    shards: Shards,
}

struct Slot {
    version: watch::Sender<u64>,
    /// Live `Watch`es for this key; the slot is removed when it reaches zero, so the
    /// map never outgrows the set of keys currently waited on.
    watchers: usize,
}

/// A registration for changes of one key; dropping it unregisters.
pub struct Watch {
    key: StoreKey,
    version: watch::Receiver<u64>,
    shards: Shards,
}

// === impl Watchers ===

impl Watchers {
    pub fn new() -> Watchers {
        Watchers::default()
    }

    /// Registers interest in `key`. Every later `notify(key)` wakes the returned watch.
    pub fn watch(&self, key: &StoreKey) -> Watch {
        let mut slots = shard(&self.shards, key);
        let slot = slots.entry(*key).or_insert_with(|| Slot {
            version: watch::Sender::new(0),
            watchers: 0,
        });
        slot.watchers += 1;
        Watch {
            key: *key,
            version: slot.version.subscribe(),
            shards: self.shards.clone(),
        }
    }

    /// Wakes every watch of `key` (a no-op when nobody waits).
    pub fn notify(&self, key: &StoreKey) {
        if let Some(slot) = shard(&self.shards, key).get(key) {
            slot.version.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// Wakes every watch of every key: used when notifications may have been missed
    /// (e.g. the Redis subscription was re-established), so waiters re-read.
    pub fn notify_all(&self) {
        for slots in self.shards.iter() {
            for slot in lock(&slots.0).values() {
                slot.version.send_modify(|v| *v = v.wrapping_add(1));
            }
        }
    }

    /// How many keys are currently watched.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|slots| lock(&slots.0).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The map that holds `key`.
fn shard<'a>(shards: &'a Shards, key: &StoreKey) -> MutexGuard<'a, KeyMap<Slot>> {
    lock(&shards[usize::from(key.0[0]) % SHARDS].0)
}

/// The map is only mutated by short, panic-free sections, so a poisoned lock still
/// holds consistent data: recover it rather than propagate a panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// === impl Watch ===

impl Watch {
    /// Resolves when the watched key was completed, released or deleted (possibly
    /// spuriously: callers re-read the record). Lease expiry is *not* signalled, so
    /// callers also bound the wait by the record's `expires_at_ms`.
    pub async fn changed(&mut self) {
        // The sender lives in the registry while this watch exists, so `changed` can
        // only fail if that invariant breaks; then never wake rather than spin.
        if self.version.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    pub fn key(&self) -> &StoreKey {
        &self.key
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut slots = shard(&self.shards, &self.key);
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.watchers -= 1;
            if slot.watchers == 0 {
                slots.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;

    const A: StoreKey = StoreKey([1; 32]);
    const B: StoreKey = StoreKey([2; 32]);

    async fn woken(w: &mut Watch) -> bool {
        timeout(Duration::from_millis(50), w.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn notify_between_watch_and_await_is_not_lost() {
        let reg = Watchers::new();
        let mut w = reg.watch(&A);
        reg.notify(&A); // "the record changed while the caller was reading it"
        assert!(woken(&mut w).await);
        assert!(!woken(&mut w).await, "one notify, one wake-up");
    }

    #[tokio::test]
    async fn notify_wakes_all_watchers_of_that_key_only() {
        let reg = Watchers::new();
        let (mut a1, mut a2, mut b) = (reg.watch(&A), reg.watch(&A), reg.watch(&B));
        let waiter = tokio::spawn(async move { woken(&mut a1).await });
        tokio::task::yield_now().await;
        reg.notify(&A);
        assert!(waiter.await.unwrap());
        assert!(woken(&mut a2).await);
        assert!(!woken(&mut b).await);
        reg.notify_all();
        assert!(woken(&mut b).await);
    }

    #[tokio::test]
    async fn dropping_watches_unregisters_keys() {
        let reg = Watchers::new();
        let watches: Vec<Watch> = (0..100u8)
            .map(|i| reg.watch(&StoreKey([i % 10; 32])))
            .collect();
        assert_eq!(reg.len(), 10);
        drop(watches);
        assert!(reg.is_empty());
        reg.notify(&A); // nobody waits: no entry is created
        assert!(reg.is_empty());
    }
}
