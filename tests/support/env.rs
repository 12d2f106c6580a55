//! A test environment: a mock upstream and a store backend (its own redis-server or
//! PostgreSQL for those), with idem configured for both.

use super::harness::{self, Idem};
pub use super::store::Backend;
use super::upstream::MockUpstream;

pub struct Env {
    pub backend: Backend,
    pub upstream: MockUpstream,
}

impl Env {
    pub async fn new(backend: Backend) -> Env {
        Env {
            backend,
            upstream: MockUpstream::start().await,
        }
    }

    /// The `upstream:` and `store:` sections for this environment.
    pub fn base_yaml(&self, upstream_timeout: &str) -> String {
        format!(
            "upstream:\n  url: {}\n  timeout: {upstream_timeout}\n  connect_timeout: 500ms\n{}",
            self.upstream.url(),
            self.backend.yaml()
        )
    }

    /// Start idem with these extra top-level YAML sections (usually `routes:`).
    pub async fn idem(&self, extra: &str) -> Idem {
        self.idem_with_timeout(extra, "3s").await
    }

    pub async fn idem_with_timeout(&self, extra: &str, upstream_timeout: &str) -> Idem {
        harness::start(&format!("{}{extra}", self.base_yaml(upstream_timeout))).await
    }
}
