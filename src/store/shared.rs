//! The process-wide part of the configured store, from which each worker thread builds
//! its own handle ([`SharedStore::for_worker`]): the one memory map, or the one Redis
//! event subscription or PostgreSQL `LISTEN` (every worker then opens its own command
//! connection or pool on its own runtime). Every handle shares one [`Sealing`]: a reload
//! that swaps the keys of `store.encryption` reaches them all.

use std::sync::Arc;

use super::config::{RedisConfig, StoreBackend, StoreConfig};
use super::postgres::{self, PostgresStore};
use super::redis::{RedisEvents, RedisStore};
use super::{memory::MemoryStore, Backend, Sealing, Store, StoreError};

/// Records the memory store keeps before evicting the soonest-expiring completed one.
pub const MEMORY_STORE_MAX_RECORDS: usize = 100_000;

/// Bytes the memory store's records may hold together (`store.memory.max_bytes`).
pub const MEMORY_STORE_MAX_BYTES: usize = 256 << 20;

/// The store's process-wide part.
#[derive(Clone)]
pub struct SharedStore {
    shared: Shared,
    sealing: Sealing,
}

#[derive(Clone)]
enum Shared {
    Memory(MemoryStore),
    /// The subscription, and the settings each worker's connections are made with.
    Redis(RedisEvents, Arc<RedisConfig>),
    Postgres(Arc<postgres::Shared>),
}

impl SharedStore {
    /// Starts the shared part. Redis and PostgreSQL connect in the background and
    /// reconnect by themselves, so idem starts (unready) even while the store is down.
    /// `workers` share PostgreSQL's `pool_size`. Every handle seals with `sealing`.
    pub fn start(
        cfg: &StoreConfig,
        workers: usize,
        sealing: Sealing,
    ) -> Result<SharedStore, StoreError> {
        let shared = match &cfg.backend {
            StoreBackend::Memory => Shared::Memory(MemoryStore::new(
                cfg.memory_max_records,
                cfg.memory_max_bytes,
            )),
            StoreBackend::Redis(redis) => {
                Shared::Redis(RedisStore::subscribe(redis)?, Arc::new(redis.clone()))
            }
            StoreBackend::Postgres(pg) => Shared::Postgres(postgres::Shared::start(pg, workers)?),
        };
        Ok(SharedStore { shared, sealing })
    }

    /// The sealing layer every handle shares (a reload swaps its keys).
    pub fn sealing(&self) -> &Sealing {
        &self.sealing
    }

    /// A store handle for the calling worker's runtime.
    pub async fn for_worker(&self) -> Result<Store, StoreError> {
        let backend = match &self.shared {
            Shared::Memory(store) => Backend::Memory(store.clone()),
            Shared::Redis(events, cfg) => {
                Backend::Redis(RedisStore::connect_sharing(cfg, events).await?)
            }
            Shared::Postgres(shared) => {
                Backend::Postgres(PostgresStore::connect_sharing(shared).await?)
            }
        };
        Ok(Store::new(backend, self.sealing.clone()))
    }
}
