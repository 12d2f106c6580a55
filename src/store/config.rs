//! The store's typed configuration (`store:`), owned by the store: `config/` parses the
//! YAML into these types and re-exports them, and the store reads nothing else of the
//! configuration (so no store module imports `config/`).

use std::time::Duration;

use strum::{Display, EnumString, VariantNames};

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    pub on_error: OnStoreError,
    /// `store.encryption`: which files hold the keys records are sealed with (SPEC §1
    /// "Stored responses"). `None`: stored in clear.
    pub encryption: Option<EncryptionConfig>,
    /// `store.memory.max_records`: the memory store's capacity (SPEC §1 "Upstream
    /// outages"); completed records are evicted first, the others never.
    pub memory_max_records: usize,
    /// `store.memory.max_bytes`: what the memory store's records may hold together,
    /// stored responses included; completed records are evicted first (issue 46 §5: a
    /// count alone let 1 MiB answers outgrow the pod's memory limit).
    pub memory_max_bytes: usize,
}

/// `store.encryption`: the key files by id (the first seals, all open) and the
/// credential key's file. Ids and paths only: the keys are read by the store's sealing
/// layer (`store/sealing.rs`), at start and on every reload, and live nowhere else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncryptionConfig {
    pub keys: Vec<(String, std::path::PathBuf)>,
    pub credential_key_file: Option<std::path::PathBuf>,
    /// `accept_unsealed_until` (unix ms): an unsealed record created before it is read
    /// as it is (written before encryption was turned on); any other unsealed record is
    /// 409 `record_unreadable`. `None`: every unsealed record is (issue 46 §1).
    pub accept_unsealed_until_ms: Option<u64>,
    /// Where the configuration names each file, for the errors of reading it.
    pub places: KeyPlaces,
}

/// Where each key file is named in the configuration (`idem.yaml:7:15:
/// store.encryption.keys[0].file`), prefixed to the errors of reading it: the files are
/// read by the sealing layer alone, once per start, check or reload, so an error still
/// points at the line to fix. Empty for a configuration built in code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPlaces {
    /// One per entry of `keys`, in order.
    pub keys: Vec<String>,
    pub credential_key_file: Option<String>,
}

impl KeyPlaces {
    /// Prefix every place with the configuration file's name.
    pub fn in_file(&mut self, file: &std::path::Path) {
        let name = file.display();
        for place in self.keys.iter_mut().chain(&mut self.credential_key_file) {
            *place = format!("{name}:{place}");
        }
    }
}

/// `store.backend` with that backend's own settings, and only those: a PostgreSQL or
/// memory store has no Redis timeout to be read by mistake.
#[derive(Debug, Clone)]
pub enum StoreBackend {
    /// One replica's own store (the embedded default).
    Memory,
    Redis(RedisConfig),
    Postgres(PostgresConfig),
}

impl StoreConfig {
    /// The bound on one store round trip: the backend's own `op_timeout`; `None` for
    /// the memory store, which answers in microseconds.
    pub fn op_timeout(&self) -> Option<Duration> {
        match &self.backend {
            StoreBackend::Memory => None,
            StoreBackend::Redis(redis) => Some(redis.op_timeout),
            StoreBackend::Postgres(postgres) => Some(postgres.op_timeout),
        }
    }

    /// The backend's name, as `store.backend` spells it.
    pub fn backend_name(&self) -> BackendName {
        match &self.backend {
            StoreBackend::Memory => BackendName::Memory,
            StoreBackend::Redis(_) => BackendName::Redis,
            StoreBackend::Postgres(_) => BackendName::Postgres,
        }
    }
}

impl RedisMode {
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisMode::Cluster { .. })
    }
}

/// The spelling of `store.backend` (parsing and printing only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum BackendName {
    Memory,
    Redis,
    Postgres,
}

/// `store.redis`: the settings every mode shares, and the mode's own.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub mode: RedisMode,
    pub key_prefix: String,
    pub op_timeout: Duration,
    pub wait_replicas: u32,
    /// Serve even when a Redis master may evict keys (`maxmemory-policy` other than
    /// `noeviction`): an evicted record in flight lets its call run twice, so idem is not
    /// ready on such a Redis unless this is set (SPEC §1 "What the code enforces").
    pub allow_eviction: bool,
    /// PEM file of CAs trusted for `rediss://` instead of the system store (`tls.ca_file`).
    pub tls_ca_file: Option<std::path::PathBuf>,
}

/// How Redis is reached, with each mode's own addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisMode {
    /// One server at `url` (`rediss://` for TLS, `user:password@` for ACL).
    Standalone { url: String },
    /// A Cluster discovered from its seed nodes (each URL carries the credentials).
    Cluster { nodes: Vec<String> },
    /// The master named `master`, as its `sentinels` report it; `url` gives everything
    /// of the master's connection but its address (credentials, database, TLS).
    Sentinel {
        url: String,
        sentinels: Vec<String>,
        master: String,
    },
}

/// The spelling of `store.redis.mode` (parsing and printing only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum RedisModeName {
    Standalone,
    Cluster,
    Sentinel,
}

/// `store.postgres`: durable reservations in one table (see `store::postgres`).
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// libpq-style URL; may name several hosts and `target_session_attrs=read-write`.
    pub url: String,
    /// A plain SQL identifier (checked): it is written into the statements.
    pub table: String,
    /// Connections across all worker threads (each worker gets its share, at least 1).
    pub pool_size: usize,
    pub op_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnStoreError {
    /// 503 `store_unavailable` + `Retry-After`.
    Reject,
    /// Forward unprotected, marked `Idempotency-Degraded: true`.
    Passthrough,
}
