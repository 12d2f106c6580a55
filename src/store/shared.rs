//! The process-wide part of the configured store, from which each worker thread builds
//! its own handle ([`SharedStore::for_worker`]): the one memory map, or the one Redis
//! event subscription or PostgreSQL `LISTEN` (every worker then opens its own command
//! connection or pool on its own runtime).

use std::sync::Arc;

use super::postgres::{self, PostgresStore};
use super::redis::{RedisEvents, RedisStore};
use super::{memory::MemoryStore, Store, StoreError};
use crate::config::{RedisConfig, StoreBackend, StoreConfig};

/// Records the memory store keeps before evicting the soonest-expiring completed one.
pub const MEMORY_STORE_MAX_RECORDS: usize = 100_000;

/// The store's process-wide part.
#[derive(Clone)]
pub enum SharedStore {
    Memory(Store),
    /// The subscription, and the settings each worker's connections are made with.
    Redis(RedisEvents, Arc<RedisConfig>),
    Postgres(Arc<postgres::Shared>),
}

impl SharedStore {
    /// Starts the shared part. Redis and PostgreSQL connect in the background and
    /// reconnect by themselves, so idem starts (unready) even while the store is down.
    /// `workers` share PostgreSQL's `pool_size`.
    pub fn start(cfg: &StoreConfig, workers: usize) -> Result<SharedStore, StoreError> {
        Ok(match &cfg.backend {
            StoreBackend::Memory => {
                SharedStore::Memory(Store::Memory(MemoryStore::new(cfg.memory_max_records)))
            }
            StoreBackend::Redis(redis) => {
                SharedStore::Redis(RedisStore::subscribe(redis)?, Arc::new(redis.clone()))
            }
            StoreBackend::Postgres(pg) => {
                SharedStore::Postgres(postgres::Shared::start(pg, workers)?)
            }
        })
    }

    /// A store handle for the calling worker's runtime.
    pub async fn for_worker(&self) -> Result<Store, StoreError> {
        Ok(match self {
            SharedStore::Memory(store) => store.clone(),
            SharedStore::Redis(events, cfg) => {
                Store::Redis(RedisStore::connect_sharing(cfg, events).await?)
            }
            SharedStore::Postgres(shared) => {
                Store::Postgres(PostgresStore::connect_sharing(shared).await?)
            }
        })
    }
}
