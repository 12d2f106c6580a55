//! Fixtures for store tests: a backend that hands out store instances sharing data,
//! and record builders.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use idem::config::{RedisConfig, RedisMode};
use idem::key::StoreKey;
use idem::store::{MemoryStore, Record, RedisStore, Store, StoredResponse};

use super::redis::RedisServer;
use super::redis_cluster::RedisCluster;
use super::redis_sentinel::RedisSentinelSet;

/// The default `store.redis.op_timeout`.
pub const OP_TIMEOUT: Duration = Duration::from_millis(250);

/// A store backend under test. `instance()` returns another handle on the same data:
/// for Redis a separate `RedisStore` (its own connections and subscription, i.e. another
/// replica), for memory a clone.
pub enum Backend {
    Memory(MemoryStore),
    Redis(RedisServer),
    RedisCluster(RedisCluster),
    RedisSentinel(RedisSentinelSet),
}

impl Backend {
    pub fn memory() -> Backend {
        Backend::Memory(MemoryStore::new(10_000))
    }

    pub fn redis() -> Backend {
        Backend::Redis(RedisServer::start())
    }

    /// Three masters, no replicas: enough for keys to spread over nodes.
    pub fn redis_cluster() -> Backend {
        Backend::RedisCluster(RedisCluster::start(3, 0))
    }

    /// A master, one replica and three sentinels.
    pub fn redis_sentinel() -> Backend {
        Backend::RedisSentinel(RedisSentinelSet::start(1))
    }

    pub async fn instance(&self) -> Store {
        match self {
            Backend::Memory(m) => Store::Memory(m.clone()),
            Backend::Redis(server) => Store::Redis(subscribed(&server.url()).await),
            Backend::RedisCluster(cluster) => {
                Store::Redis(subscribed_with(&cluster_config(cluster.seeds())).await)
            }
            Backend::RedisSentinel(set) => {
                Store::Redis(subscribed_with(&sentinel_config(set.sentinel_urls())).await)
            }
        }
    }
}

pub fn redis_config(url: &str) -> RedisConfig {
    RedisConfig {
        url: url.to_owned(),
        op_timeout: OP_TIMEOUT,
        ..RedisConfig::default()
    }
}

/// Sentinel mode over `sentinels`, master `mymaster`.
pub fn sentinel_config(sentinels: Vec<String>) -> RedisConfig {
    RedisConfig {
        mode: RedisMode::Sentinel,
        nodes: sentinels,
        url: "redis://ignored:0/0".to_owned(),
        op_timeout: OP_TIMEOUT,
        ..RedisConfig::default()
    }
}

/// Cluster mode over `seeds`.
pub fn cluster_config(seeds: Vec<String>) -> RedisConfig {
    RedisConfig {
        mode: RedisMode::Cluster,
        nodes: seeds,
        op_timeout: OP_TIMEOUT,
        ..RedisConfig::default()
    }
}

/// A `RedisStore` whose event subscription is up, so timing assertions measure
/// pub/sub delivery rather than subscription start-up.
pub async fn subscribed(url: &str) -> RedisStore {
    subscribed_with(&redis_config(url)).await
}

pub async fn subscribed_with(cfg: &RedisConfig) -> RedisStore {
    let store = RedisStore::connect(cfg).await.expect("connect");
    wait_subscribed(&store, Duration::from_secs(10)).await;
    store
}

pub async fn wait_subscribed(store: &RedisStore, within: Duration) {
    let start = Instant::now();
    while !store.is_subscribed() {
        assert!(start.elapsed() < within, "not subscribed within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn key(n: u8) -> StoreKey {
    StoreKey([n; 32])
}

pub fn in_progress(lease: Duration) -> Record {
    Record::in_progress("charge", "tenant", "charge:inv_1", [3; 32], [4; 32], lease)
}

/// A completed form of `r` with a binary body and a non-UTF-8 header value.
pub fn completed(r: &Record, retention: Duration) -> Record {
    let raw = HeaderValue::from_bytes(b"caf\xe9").expect("obs-text header value");
    let response = StoredResponse {
        status: 201,
        headers: vec![(HeaderName::from_static("x-raw"), raw)],
        body: Some(Bytes::from_static(b"\x00\xff\n{\"id\":\"ch_1\"}\n")),
    };
    r.completed(response, retention)
}

/// Asserts `elapsed` is within `bound`, naming what was measured.
#[track_caller]
pub fn assert_within(what: &str, elapsed: Duration, bound: Duration) {
    assert!(
        elapsed <= bound,
        "{what} took {elapsed:?}, more than {bound:?}"
    );
}
