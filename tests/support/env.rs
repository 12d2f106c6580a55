//! A test environment: a mock upstream, optionally a private redis-server or
//! PostgreSQL, and idem configured for one store backend.

use idem::app::Running;

use super::harness;
use super::postgres::PgServer;
use super::redis::RedisServer;
use super::upstream::MockUpstream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Redis,
    Postgres,
}

pub struct Env {
    pub backend: Backend,
    pub upstream: MockUpstream,
    pub redis: Option<RedisServer>,
    pub postgres: Option<PgServer>,
}

impl Env {
    pub async fn new(backend: Backend) -> Env {
        let redis = (backend == Backend::Redis).then(RedisServer::start);
        let postgres = (backend == Backend::Postgres).then(PgServer::start);
        Env {
            backend,
            upstream: MockUpstream::start().await,
            redis,
            postgres,
        }
    }

    /// The `upstream:` and `store:` sections for this environment.
    pub fn base_yaml(&self, upstream_timeout: &str) -> String {
        let store = match (&self.redis, &self.postgres) {
            (Some(redis), _) => format!(
                "store:\n  backend: redis\n  redis:\n    url: {}\n    op_timeout: 250ms\n",
                redis.url()
            ),
            (None, Some(pg)) => format!(
                "store:\n  backend: postgres\n  postgres:\n    url: {}\n    op_timeout: 500ms\n    pool_size: 8\n",
                pg.url()
            ),
            (None, None) => "store:\n  backend: memory\n".to_owned(),
        };
        format!(
            "upstream:\n  url: {}\n  timeout: {upstream_timeout}\n  connect_timeout: 500ms\n{store}",
            self.upstream.url()
        )
    }

    /// Start idem with these extra top-level YAML sections (usually `routes:`).
    pub async fn idem(&self, extra: &str) -> Running {
        self.idem_with_timeout(extra, "3s").await
    }

    pub async fn idem_with_timeout(&self, extra: &str, upstream_timeout: &str) -> Running {
        harness::start(&format!("{}{extra}", self.base_yaml(upstream_timeout))).await
    }
}

/// Instantiate an `async fn(Backend)` test case for every store (memory, Redis,
/// PostgreSQL).
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::env::Backend::Memory).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::env::Backend::Redis).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::env::Backend::Postgres).await
                }
            )*
        }
    };
}

/// Instantiate an `async fn(Backend)` test case for the stores several idem processes
/// can share (Redis, PostgreSQL).
#[macro_export]
macro_rules! shared_stores {
    ($($name:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::env::Backend::Redis).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::env::Backend::Postgres).await
                }
            )*
        }
    };
}
