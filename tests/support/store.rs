//! Fixtures for store tests: the one `Backend` enum of the test support (a running store
//! that hands out instances sharing data, and configures idem for it), and record
//! builders.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use idem::config::{PostgresConfig, RedisConfig, RedisMode};
use idem::key::StoreKey;
use idem::store::{MemoryStore, PostgresStore, Record, RedisStore, Store, StoredResponse};

use super::poll::eventually;
use super::postgres::PgServer;
use super::redis::RedisServer;
use super::redis_cluster::RedisCluster;
use super::redis_sentinel::RedisSentinelSet;

/// The default `store.redis.op_timeout`.
pub const OP_TIMEOUT: Duration = Duration::from_millis(250);

/// A Redis backend's YAML (or `Env::base_yaml`'s) with the store timeout raised to
/// `op_timeout`, for a test whose subject is not the store's speed (a read of many
/// records, a race held behind a Redis pause) on a loaded machine.
pub fn with_op_timeout(yaml: &str, op_timeout: &str) -> String {
    let default = format!("op_timeout: {}ms", OP_TIMEOUT.as_millis());
    assert!(
        yaml.contains(&default),
        "no default store timeout in {yaml}"
    );
    yaml.replace(&default, &format!("op_timeout: {op_timeout}"))
}

/// A store backend under test. `instance()` returns another handle on the same data:
/// for Redis a separate `RedisStore` (its own connections and subscription, i.e. another
/// replica), for memory a clone. `yaml()` is the `store:` section that points an idem
/// at it (for memory, each idem has its own).
pub enum Backend {
    Memory(MemoryStore),
    Redis(RedisServer),
    RedisCluster(RedisCluster),
    RedisSentinel(RedisSentinelSet),
    Postgres(PgServer),
}

/// Instantiates `async fn(Backend)` test cases on stores: one module per store, named
/// after its `Backend` constructor, with a test per case. The one way a test file runs
/// cases on several stores:
///
/// ```ignore
/// store_cases!([memory, redis, postgres] [first_call_forwards_once, wait_times_out]);
/// ```
///
/// Stores: `memory`, `redis`, `redis_cluster`, `redis_sentinel`, `postgres`; the stores
/// several idem processes can share are all but `memory`. Each case runs under the panic
/// watch: a panic in a store's own tasks fails it.
#[macro_export]
macro_rules! store_cases {
    ([$($store:ident),* $(,)?] $cases:tt) => {
        $($crate::store_cases!(@one $store $cases);)*
    };
    (@one $store:ident [$($case:ident),* $(,)?]) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let _panics = $crate::support::panics::watched();
                    super::$case($crate::support::store::Backend::$store()).await
                }
            )*
        }
    };
}

impl Backend {
    pub fn memory() -> Backend {
        Backend::Memory(MemoryStore::new(10_000, usize::MAX))
    }

    pub fn redis() -> Backend {
        Backend::Redis(RedisServer::start())
    }

    /// Three masters, no replicas: enough for keys to spread over nodes.
    pub fn redis_cluster() -> Backend {
        Backend::RedisCluster(RedisCluster::start(3, 0))
    }

    /// A master, one replica and three sentinels (no failover expected).
    pub fn redis_sentinel() -> Backend {
        Backend::RedisSentinel(RedisSentinelSet::start_without_failover(1))
    }

    /// A private PostgreSQL with the table migrated, as an operator sets it up.
    pub fn postgres() -> Backend {
        Backend::Postgres(migrated_postgres())
    }

    pub async fn instance(&self) -> Store {
        match self {
            Backend::Memory(m) => Store::from(m.clone()),
            Backend::Redis(server) => Store::from(subscribed(&server.url()).await),
            Backend::RedisCluster(cluster) => {
                Store::from(subscribed_with(&cluster_config(cluster.seeds())).await)
            }
            Backend::RedisSentinel(set) => {
                Store::from(subscribed_with(&sentinel_config(set.sentinel_urls())).await)
            }
            Backend::Postgres(server) => Store::from(listening(&server.url()).await),
        }
    }

    /// The `store:` section of an idem configuration using this backend.
    pub fn yaml(&self) -> String {
        match self {
            Backend::Memory(_) => "store:\n  backend: memory\n".to_owned(),
            Backend::Redis(server) => format!(
                "store:\n  backend: redis\n  redis:\n    url: {}\n    op_timeout: {}ms\n",
                server.url(),
                OP_TIMEOUT.as_millis()
            ),
            Backend::RedisCluster(cluster) => format!(
                "store:\n  backend: redis\n  redis:\n    mode: cluster\n    nodes: [{}]\n    op_timeout: {}ms\n",
                cluster.seeds().join(", "),
                OP_TIMEOUT.as_millis()
            ),
            Backend::RedisSentinel(set) => format!(
                "store:\n  backend: redis\n  redis:\n    mode: sentinel\n    url: redis://127.0.0.1:1/0\n    sentinel_master: mymaster\n    nodes: [{}]\n    op_timeout: {}ms\n",
                set.sentinel_urls().join(", "),
                OP_TIMEOUT.as_millis()
            ),
            Backend::Postgres(server) => format!(
                "store:\n  backend: postgres\n  postgres:\n    url: {}\n    op_timeout: 500ms\n    pool_size: 8\n",
                server.url()
            ),
        }
    }

    /// The private redis-server of a Redis backend, to stop, pause or inspect it.
    #[track_caller]
    pub fn redis_server(&self) -> &RedisServer {
        match self {
            Backend::Redis(server) => server,
            _ => panic!("not a Redis backend"),
        }
    }

    #[track_caller]
    pub fn redis_server_mut(&mut self) -> &mut RedisServer {
        match self {
            Backend::Redis(server) => server,
            _ => panic!("not a Redis backend"),
        }
    }

    /// The private PostgreSQL of a PostgreSQL backend, to stop, kill or inspect it.
    #[track_caller]
    pub fn postgres_server(&self) -> &PgServer {
        match self {
            Backend::Postgres(server) => server,
            _ => panic!("not a PostgreSQL backend"),
        }
    }

    #[track_caller]
    pub fn postgres_server_mut(&mut self) -> &mut PgServer {
        match self {
            Backend::Postgres(server) => server,
            _ => panic!("not a PostgreSQL backend"),
        }
    }
}

pub fn redis_config(url: &str) -> RedisConfig {
    RedisConfig {
        mode: RedisMode::Standalone {
            url: url.to_owned(),
        },
        op_timeout: OP_TIMEOUT,
        ..RedisConfig::default()
    }
}

/// Sentinel mode over `sentinels`, master `mymaster`.
pub fn sentinel_config(sentinels: Vec<String>) -> RedisConfig {
    RedisConfig {
        mode: RedisMode::Sentinel {
            url: "redis://ignored:0/0".to_owned(),
            sentinels,
            master: "mymaster".to_owned(),
        },
        op_timeout: OP_TIMEOUT,
        ..RedisConfig::default()
    }
}

/// Cluster mode over `seeds`.
pub fn cluster_config(seeds: Vec<String>) -> RedisConfig {
    RedisConfig {
        mode: RedisMode::Cluster { nodes: seeds },
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
    eventually(within, "the store's event subscription", async || {
        store.is_subscribed()
    })
    .await;
}

/// The PostgreSQL store's settings for tests: the SPEC's defaults on `url`.
pub fn postgres_config(url: &str) -> PostgresConfig {
    PostgresConfig {
        url: url.to_owned(),
        table: "idem_records".to_owned(),
        pool_size: 16,
        op_timeout: Duration::from_millis(500),
    }
}

/// `idem migrate` (the library's) on `url`'s `idem_records`, as an operator runs it
/// before serving: serving runs no DDL. On a thread of its own, so that it can be
/// called from sync and async tests alike.
pub fn migrate(url: &str) {
    // idem's own code, in-process: a panic in a task it spawns fails the caller.
    let _panics = super::panics::watched();
    let cfg = postgres_config(url);
    let migrated = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(idem::store::postgres::migrate(&cfg))
    })
    .join()
    .expect("migrate thread");
    if let Err(e) = migrated {
        panic!("idem migrate: {e}");
    }
}

/// [`PgServer::start`], then [`migrate`].
pub fn migrated_postgres() -> PgServer {
    let server = PgServer::start();
    migrate(&server.url());
    server
}

/// A `PostgresStore` whose `LISTEN` is in effect (its own listener: another replica).
pub async fn listening(url: &str) -> PostgresStore {
    let store = PostgresStore::connect(&postgres_config(url))
        .await
        .expect("connect");
    wait_listening(&store, Duration::from_secs(5)).await;
    store
}

pub async fn wait_listening(store: &PostgresStore, within: Duration) {
    eventually(within, "the store's LISTEN", async || store.is_listening()).await;
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

/// A liveness deadline, not a speed bound: far above any operation's `op_timeout` on a
/// loaded machine, so reaching it means something hangs (no timeout enforced, a waiter
/// never notified), never that the machine was slow. No test asserts how fast.
pub const HANG: Duration = Duration::from_secs(10);

/// Asserts `elapsed` is under [`HANG`]: `what` ended rather than hung.
#[track_caller]
pub fn assert_ended(what: &str, elapsed: Duration) {
    assert!(elapsed < HANG, "{what} took {elapsed:?}: it hangs");
}

/// `record` without the times a store stamps from its own clock (an attempt's first
/// send, an in-progress record's lease end): what a writer's record and the store's copy
/// of it share.
#[allow(dead_code)]
pub fn unclocked(record: &Record) -> Record {
    let mut r = record.clone();
    r.stamp = None;
    r.sent_at_ms = 0;
    if !r.is_completed() {
        r.expires_at_ms = 0;
    }
    r
}
