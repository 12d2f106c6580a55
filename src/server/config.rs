//! The server's typed configuration (`server:`), which `config/` reads from the YAML and
//! the app hands to the listener and the workers. Its built-in values are in
//! `config/defaults.rs`, except `body_read_timeout`'s, which depends on the upstream's
//! timeout and is applied here.

use std::time::Duration;

use crate::upstream::config::UpstreamConfig;

/// `server.body_read_timeout` by default (capped at `upstream.timeout`).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The `server:` section: the main listener's limits and the data-plane threads.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Also bounds an idle HTTP/2 connection (no open stream) and the time from its
    /// preface to its first request (issue 46 §3).
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// Data-plane threads; `None` is `auto`: one per CPU the process may use.
    pub workers: Option<usize>,
    /// `server.http2`: serve h2c (HTTP/2 with prior knowledge) on the main listener.
    pub http2: bool,
    /// `server.http2_max_streams`: concurrent HTTP/2 streams per connection.
    pub http2_max_streams: u32,
    /// `server.max_buffered_bytes`: request and response bodies held at once, across
    /// the process (issue 46 §5); past it, 503 `overloaded`.
    pub max_buffered_bytes: usize,
    /// `server.body_read_timeout`: the whole request body of a protected route must
    /// arrive within it; `None`: 10 s, or `upstream.timeout` when that is shorter.
    pub body_read_timeout: Option<Duration>,
}

impl ServerConfig {
    /// How long a protected request's body may take to arrive: `body_read_timeout`, by
    /// default 10 s or `upstream` timeout when shorter.
    pub fn body_read_timeout(&self, upstream: &UpstreamConfig) -> Duration {
        self.body_read_timeout
            .unwrap_or(BODY_READ_TIMEOUT.min(upstream.timeout))
    }

    /// The number of worker threads to run: `workers`, or with `auto` the CPUs this
    /// process may use (the cgroup CPU quota counts, as in a Kubernetes CPU limit).
    pub fn worker_count(&self) -> usize {
        self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }
}
