//! The idempotency store: one narrow interface, several backends.
//!
//! Every operation is one round trip and atomic on the backend:
//! - [`Store::reserve`]: create the in-progress record if the key is absent
//!   (`SET NX GET PX retention`; the lease is a deadline inside the record); a loser
//!   gets the existing record in the same trip.
//! - [`Store::replace_if_owner`]: overwrite the record only while it still carries the
//!   caller's fencing token (lease renewal, completion, takeover of a stored failure).
//! - [`Store::release_if_owner`]: delete only if the caller still owns the record.
//! - [`Store::take_over`]: replace an attempt whose lease has ended (its outcome is
//!   unknown) only if its token is still the one the caller read.
//!
//! One clock per record, the store's (SPEC §1 "One clock for every lease"): a lease's
//! end and an attempt's first send are written by the store from its own clock (the
//! record's [`Stamp`]; Redis scripts read `TIME`, PostgreSQL `now()`, memory a monotonic
//! clock) and judged against the same clock, so neither skew between replicas nor a
//! step of a proxy's wall clock can end a live lease.
//! - [`Store::list_in_progress`]: every in-progress record, for operators (`listing.rs`);
//!   it reads the whole keyspace or an index, never on the request path.
//!
//! A stale owner whose lease was taken over can therefore never overwrite or delete
//! its successor's record. `replace_if_owner` with the *stored* record's token is also
//! a compare-and-swap: of several callers taking over a stored failure
//! (`on_failure: retry`, [`Record::next_attempt`]) exactly one succeeds.
//!
//! Duplicates that wait ([`Store::watch`]) are woken by completion, release and delete
//! — across replicas for Redis (pub/sub) and PostgreSQL (`LISTEN/NOTIFY`) — and hold no
//! store connection meanwhile.
//!
//! The store never sees HTTP types: only [`StoreKey`]s and [`Record`]s.
//!
//! With `store.encryption`, the store seals every record it writes and opens every
//! record it reads ([`Sealing`], `sealing.rs`): its callers hand it records in clear and
//! get them back in clear, and the backends only ever hold sealed ones.

pub mod config;
mod listing;
pub mod memory;
pub mod postgres;
pub mod record;
pub mod redis;
pub mod seal;
mod sealing;
mod shared;
pub(crate) mod task;
pub mod watch;

use std::time::Duration;

pub use memory::MemoryStore;
pub use postgres::PostgresStore;
pub use record::{Phase, Record, RecordState, Settled, Stamp, StoredResponse, Token};
pub use redis::RedisStore;
pub use sealing::Sealing;
pub use shared::{SharedStore, MEMORY_STORE_MAX_BYTES, MEMORY_STORE_MAX_RECORDS};
pub use watch::{Watch, Watchers};

use crate::store_key::StoreKey;

/// Result of a reservation attempt.
// Not boxed: a `Reserve` lives for one `match` on the request path, and boxing would
// add an allocation to every duplicate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Reserve {
    /// The key was absent; the caller's record is now stored and the caller owns it.
    Won,
    /// Someone else's record is there, read at this time of the **store's** clock
    /// (unix ms): its lease is judged against that, never against a proxy's clock. A
    /// completed record has no lease, and what a repeat of it gets never reads the
    /// clock, so Redis does not send it: 0 then (the reply's shape costs the client
    /// more than the rest of a replay's parsing, see `redis/scripts.rs`).
    Exists(Record, u64),
}

/// Why a store operation failed. Every variant means "the store could not answer":
/// the caller treats it per `store.on_error`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store operation timed out after {0:?}")]
    Timeout(Duration),
    #[error("stored record is corrupt: {0}")]
    Corrupt(String),
    #[error("memory store is full ({0} records)")]
    Full(usize),
}

/// The configured backend, under the sealing layer every operation goes through.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    sealing: Sealing,
}

/// The backend. An enum rather than a trait object: no boxing on the memory path, and
/// new backends (Redis Cluster, Sentinel) are new variants.
#[derive(Clone)]
pub enum Backend {
    Memory(memory::MemoryStore),
    Redis(redis::RedisStore),
    Postgres(postgres::PostgresStore),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match &$self.backend {
            Backend::Memory($s) => $e,
            Backend::Redis($s) => $e,
            Backend::Postgres($s) => $e,
        }
    };
}

/// As `dispatch!` for an operation's future: the Redis store's futures (coalescing,
/// `WAIT`, Sentinel re-resolution) and the PostgreSQL driver's are several KB, and inline
/// they would size every store future — and every request future that holds one, copied
/// on each move — for every backend. Boxed, they cost one allocation per operation, next
/// to a network round trip (measured with bench/callgrind.py: a fresh intent on memory
/// 123.7k → 92.4k instructions, on Redis 133.6k → 120.2k, a replay 87.3k → 76.4k).
macro_rules! dispatch_op {
    ($self:ident, $s:ident => $e:expr) => {
        match &$self.backend {
            Backend::Memory($s) => $e.await,
            Backend::Redis($s) => Box::pin($e).await,
            Backend::Postgres($s) => Box::pin($e).await,
        }
    };
}

impl From<memory::MemoryStore> for Store {
    fn from(store: memory::MemoryStore) -> Store {
        Store::new(Backend::Memory(store), Sealing::off())
    }
}

impl From<redis::RedisStore> for Store {
    fn from(store: redis::RedisStore) -> Store {
        Store::new(Backend::Redis(store), Sealing::off())
    }
}

impl From<postgres::PostgresStore> for Store {
    fn from(store: postgres::PostgresStore) -> Store {
        Store::new(Backend::Postgres(store), Sealing::off())
    }
}

impl Store {
    pub fn new(backend: Backend, sealing: Sealing) -> Store {
        Store { backend, sealing }
    }

    /// This store sealing with `sealing` (`store.encryption`).
    pub fn sealed_by(self, sealing: Sealing) -> Store {
        Store { sealing, ..self }
    }

    /// The sealing layer: whether records are sealed, the keyed credential hash, why a
    /// record did not open.
    pub fn sealing(&self) -> &Sealing {
        &self.sealing
    }

    /// Atomically store `record` under `key` with TTL `ttl` if the key is absent. The
    /// TTL is the record's life (the route's retention): the lease is a deadline inside
    /// the record (`expires_at_ms`), so an attempt is remembered after its lease ends.
    pub async fn reserve(
        &self,
        key: &StoreKey,
        record: &Record,
        ttl: Duration,
    ) -> Result<Reserve, StoreError> {
        let sealed = self.sealing.seal(record, key);
        let record = sealed.as_deref().unwrap_or(record);
        // Opened in place: the `Result` is not unwrapped and rebuilt (a record-sized
        // move on every repeat's path).
        let mut reserved = dispatch_op!(self, s => s.reserve(key, record, ttl));
        if let Ok(Reserve::Exists(existing, _)) = &mut reserved {
            self.sealing.open(existing, key);
        }
        reserved
    }

    /// Replace the record with `record` (TTL `ttl`) only if the stored record's token is
    /// `owner`. With `notify`, watchers of the key (on every replica) are woken.
    /// Returns `false` when the caller no longer owns the key.
    pub async fn replace_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
    ) -> Result<bool, StoreError> {
        let sealed = self.sealing.seal(record, key);
        let record = sealed.as_deref().unwrap_or(record);
        dispatch_op!(self, s => s.replace_if_owner(key, owner, record, ttl, notify))
    }

    /// Replace the record with `record` (TTL `ttl`) only if the stored record's token is
    /// `owner` **and** it is an attempt whose lease has ended by the store's own clock:
    /// taking over an unknown outcome, or settling it. A renewal that landed first
    /// refuses it. With `window` (`on_unknown: retry` under `upstream_key_window`), only
    /// while the attempt's first send is younger than it, on the same clock: a duplicate
    /// paused between its read and this write must not forward a key the upstream has
    /// forgotten. (The caller leaves it `None` for an attempt an operator settled as not
    /// executed: the token fences that reading.) Wakes watchers.
    pub async fn take_over(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        window: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let sealed = self.sealing.seal(record, key);
        let record = sealed.as_deref().unwrap_or(record);
        dispatch_op!(self, s => s.take_over(key, owner, record, ttl, window))
    }

    /// Extend the owner's lease with `record` (its renewed form), only while the stored
    /// record carries `owner`'s token **and** its lease has not ended by the store's
    /// clock: an owner back from a pause longer than its lease finds its attempt already
    /// an unknown outcome, which others may have read, listed or begun to settle, and
    /// does not revive it (SPEC §1: a lease is never kept past its end). Silent.
    pub async fn renew(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let sealed = self.sealing.seal(record, key);
        let record = sealed.as_deref().unwrap_or(record);
        dispatch_op!(self, s => s.renew(key, owner, record, ttl))
    }

    /// The store's clock (unix ms): what its leases are judged against. For the admin,
    /// which reads records without a reservation; one round trip on Redis (`TIME`, of
    /// some node: Cluster nodes' clocks may differ a little) and PostgreSQL.
    pub async fn clock_ms(&self) -> Result<u64, StoreError> {
        dispatch_op!(self, s => s.clock_ms())
    }

    /// Delete the record only if its token is `owner`, and wake watchers.
    pub async fn release_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
    ) -> Result<bool, StoreError> {
        dispatch_op!(self, s => s.release_if_owner(key, owner))
    }

    /// The current record, if any.
    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let mut record = dispatch_op!(self, s => s.get(key));
        if let Ok(Some(record)) = &mut record {
            self.sealing.open(record, key);
        }
        record
    }

    /// The current record and the store's clock, which judges its lease, for a reader
    /// without a reservation (whose reply would carry the clock): a second round trip,
    /// only when there is a record.
    pub async fn get_at(&self, key: &StoreKey) -> Result<Option<(Record, u64)>, StoreError> {
        match self.get(key).await? {
            Some(record) => Ok(Some((record, self.clock_ms().await?))),
            None => Ok(None),
        }
    }

    /// As [`Store::get`], with how long the record itself remains: its own life (the
    /// route's retention from its last write), which an in-progress record's lease is
    /// only the first part of. One round trip; for the admin view.
    pub async fn get_with_life(
        &self,
        key: &StoreKey,
    ) -> Result<Option<(Record, Duration)>, StoreError> {
        let mut found = dispatch_op!(self, s => s.get_with_life(key))?;
        if let Some((record, _)) = &mut found {
            self.sealing.open(record, key);
        }
        Ok(found)
    }

    /// Unconditional delete (admin), waking watchers. Returns whether a record existed.
    pub async fn delete(&self, key: &StoreKey) -> Result<bool, StoreError> {
        dispatch_op!(self, s => s.delete(key))
    }

    /// Start watching `key` for completion/release. Create the watch *before* reading
    /// the record, so a change between the read and the wait is not missed.
    pub fn watch(&self, key: &StoreKey) -> Watch {
        dispatch!(self, s => s.watch(key))
    }

    /// The in-progress records (unknown outcomes and calls in flight), those whose lease
    /// ends first first, at most `limit` (`usize::MAX`: all). An admin operation, whose
    /// cost follows the records not completed: Redis reads its open index, PostgreSQL
    /// its `in_progress` partial index, memory its per-shard set of open records.
    pub async fn list_in_progress(
        &self,
        limit: usize,
    ) -> Result<Vec<(StoreKey, Record)>, StoreError> {
        let mut records = dispatch_op!(self, s => s.list_in_progress(limit))?;
        for (key, record) in &mut records {
            self.sealing.open(record, key);
        }
        Ok(records)
    }

    /// Makes every record not completed listable: on Redis, indexes the records a
    /// release before the open index wrote (one `SCAN`, see `redis/listing.rs`);
    /// nothing to do on the other stores. Returns how many it indexed.
    pub async fn index_existing(&self) -> Result<u64, StoreError> {
        match &self.backend {
            Backend::Redis(s) => s.index_existing().await,
            _ => Ok(0),
        }
    }

    /// The completed records, given that `open` records are not completed: exact on the
    /// memory store; on Redis the database's other keys less idem's open indexes
    /// (`DBSIZE`: give idem a database of its own); on PostgreSQL the planner's
    /// estimate of the table's rows. Read in constant time on every store.
    pub async fn completed_count(&self, open: u64) -> Result<u64, StoreError> {
        let total = match &self.backend {
            Backend::Memory(s) => s.len() as u64,
            Backend::Redis(s) => s.record_count().await?.saturating_sub(s.index_keys(open)),
            Backend::Postgres(s) => s.record_count().await?,
        };
        Ok(total.saturating_sub(open))
    }

    /// The memory store's capacity (`store.memory.max_records`); `None` elsewhere.
    pub fn capacity(&self) -> Option<usize> {
        match &self.backend {
            Backend::Memory(s) => Some(s.max_records()),
            _ => None,
        }
    }

    /// The `maxmemory-policy` of every Redis master the store writes to; `None` on the
    /// stores that never evict a record before its TTL (memory, PostgreSQL).
    pub async fn eviction_policies(&self) -> Result<Option<Vec<redis::NodePolicy>>, StoreError> {
        match &self.backend {
            Backend::Redis(s) => Box::pin(s.eviction_policies()).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Whether the store answers (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch_op!(self, s => s.ping())
    }
}
