//! Every built-in default, in one place (SPEC §3), and the no-config [`Config`].
//!
//! A value comes from, in priority order: the route's own field, the file's `defaults:`
//! section, then the constants here (sozu documents the same section → global →
//! built-in order). `idem serve --upstream URL` without a file uses these defaults plus
//! one catch-all route keyed on the caller's `Idempotency-Key`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, Uri};

use super::{
    AdminConfig, BodyFingerprint, Config, DefaultAction, FingerprintSpec, KeyFormat, OnAmbiguous,
    OnConcurrent, OnFailure, OnStoreError, OnUnknown, PostgresConfig, RedisConfig, RedisMode,
    RoutePolicy, ServerConfig, StatusSet, StoreBackend, StoreConfig, UpstreamConfig,
};
use crate::path::PathTemplate;
use crate::template::Template;

pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));
/// Loopback: key admin must not be reachable from the network by default.
pub const ADMIN_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9901));

/// Methods a route matches when it names none: the ones with side effects.
pub const METHODS: [Method; 4] = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
pub const MAX_KEY_LENGTH: usize = 255;
pub const LEASE: Duration = Duration::from_secs(30);
pub const RETENTION: Duration = Duration::from_secs(24 * 3600);
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_BODY_BYTES: usize = 1 << 20;
pub const FORWARD_KEY_HEADER: &str = "idempotency-key";
pub const BIND_CREDENTIALS: [&str; 3] = ["authorization", "cookie", "x-api-key"];

/// The no-config route: every side-effecting request that carries `Idempotency-Key`.
pub const CATCH_ALL_NAME: &str = "default";
pub const CATCH_ALL_PATH: &str = "/{path*}";
pub const CATCH_ALL_KEY: &str = "{header.idempotency-key}";

/// `server.max_buffered_bytes` by default: 64 MiB, the bodies of 64 requests at the
/// default `max_request_bytes` (1 MiB) at once, or thousands of ordinary tool calls of a
/// few KiB; with the process's ~20 MiB and its connections it fits a 128–256 MiB
/// container, and a flood of stalled bodies meets a 503 before the OOM killer.
pub const MAX_BUFFERED_BYTES: usize = 64 << 20;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 << 10,
            max_connections: 10_000,
            shutdown_grace: Duration::from_secs(25),
            workers: None,
            http2: true,
            // RFC 9113 §6.5.2 advises no fewer than 100; enough for a caller's
            // parallel tool calls, few enough that one connection cannot hold hundreds of
            // bodies (each stream is a request).
            http2_max_streams: 100,
            max_buffered_bytes: MAX_BUFFERED_BYTES,
            body_read_timeout: None,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: ADMIN_LISTEN,
            token: None,
            allowed_hosts: Vec::new(),
        }
    }
}

/// `store.redis.url` when unset.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/0";
/// `store.redis.sentinel_master` when unset.
pub const SENTINEL_MASTER: &str = "mymaster";

impl Default for RedisConfig {
    /// Standalone, on the default URL.
    fn default() -> Self {
        RedisConfig {
            mode: RedisMode::Standalone {
                url: REDIS_URL.to_string(),
            },
            key_prefix: "idem:".to_string(),
            op_timeout: Duration::from_millis(250),
            wait_replicas: 0,
            allow_eviction: false,
            tls_ca_file: None,
        }
    }
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: "postgres://idem@127.0.0.1:5432/idem".to_string(),
            table: "idem_records".to_string(),
            pool_size: 16,
            op_timeout: Duration::from_millis(500),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::Memory,
            on_error: OnStoreError::Reject,
            encryption: None,
            memory_max_records: crate::store::MEMORY_STORE_MAX_RECORDS,
            memory_max_bytes: crate::store::MEMORY_STORE_MAX_BYTES,
        }
    }
}

impl Default for FingerprintSpec {
    /// `[method, path, body]`: a repeat must be the same request, not just the same key.
    fn default() -> Self {
        FingerprintSpec {
            method: true,
            path: true,
            body: BodyFingerprint::Whole,
        }
    }
}

impl UpstreamConfig {
    /// An upstream at `url` with the default timeouts.
    pub fn new(url: Uri) -> Self {
        UpstreamConfig {
            url,
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(30),
        }
    }
}

impl RoutePolicy {
    /// A route with every policy field at its built-in default.
    pub fn with_defaults(name: &str, path: PathTemplate, key: Vec<Template>) -> RoutePolicy {
        RoutePolicy {
            name: name.to_string(),
            methods: METHODS.to_vec(),
            path,
            key,
            require_key: true,
            max_key_length: MAX_KEY_LENGTH,
            scope: Template::empty(),
            fingerprint: FingerprintSpec::default(),
            store_statuses: StatusSet::default(),
            lease: LEASE,
            retention: RETENTION,
            on_concurrent: OnConcurrent::Conflict,
            wait_timeout: WAIT_TIMEOUT,
            on_failure: OnFailure::Replay,
            on_ambiguous: OnAmbiguous::Hold,
            on_unknown: OnUnknown::default_for(None),
            upstream_key_window: None,
            reconcile: None,
            breaker: None,
            store_headers: Default::default(),
            max_request_bytes: MAX_BODY_BYTES,
            max_response_bytes: MAX_BODY_BYTES,
            forward_key_header: HeaderName::from_static(FORWARD_KEY_HEADER),
            forward_key_format: KeyFormat::Plain,
            bind_credentials: BIND_CREDENTIALS
                .iter()
                .map(|h| HeaderName::from_static(h))
                .collect(),
            credentials_absent: Default::default(),
            mcp: None,
        }
    }
}

/// The SPEC's no-config behaviour for `idem serve --upstream URL`: memory store, one
/// route `default` making every POST/PUT/PATCH/DELETE that carries an `Idempotency-Key`
/// idempotent (`require_key: false`, so requests without one pass through unprotected).
/// (An error here is a bug in the template parsers, reported rather than panicking.)
pub(crate) fn for_upstream(url: Uri) -> Result<Config, String> {
    let path = PathTemplate::parse(CATCH_ALL_PATH)
        .map_err(|e| format!("built-in path {CATCH_ALL_PATH}: {e}"))?;
    let key =
        Template::parse(CATCH_ALL_KEY).map_err(|e| format!("built-in key {CATCH_ALL_KEY}: {e}"))?;
    let mut route = RoutePolicy::with_defaults(CATCH_ALL_NAME, path, vec![key]);
    route.require_key = false;
    Ok(Config {
        listen: LISTEN,
        server: ServerConfig::default(),
        admin: AdminConfig::default(),
        upstream: UpstreamConfig::new(url),
        store: StoreConfig::default(),
        telemetry: Default::default(),
        default: DefaultAction::Passthrough,
        routes: vec![Arc::new(route)],
        warnings: Vec::new(),
        source: None,
    })
}
