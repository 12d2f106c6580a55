//! Typed, validated configuration.
//!
//! Pipeline: YAML text → a positioned node tree (`yaml.rs`) → one walk that reads every
//! field, expands `${VAR}` in string values (`env.rs`), parses units (`units.rs`) and
//! checks cross-field rules (`validate.rs`), collecting every error with its file, line,
//! column and field path (`error.rs`) → [`Config`]. Nothing downstream ever sees a string
//! that still needs parsing: durations are [`Duration`], sizes are `usize`, templates are
//! compiled.
//!
//! A route setting comes from the route itself, else `defaults:`, else the built-in
//! default (`defaults.rs`). [`Config::for_upstream`] is the no-config setup.
//!
//! # Layout
//! - `load.rs`: the entry points ([`Config::load`], [`Config::from_yaml_str`], …).
//! - `yaml.rs`: YAML → nodes with positions; `walk.rs`: typed getters that collect errors.
//! - `sections.rs`: `listen`, `server`, `admin`, `upstream`, `store`; `telemetry.rs`: `telemetry`.
//! - `routes.rs`, `policy.rs`, `values.rs`: `defaults:` and `routes:`.
//! - `validate.rs`: cross-field and cross-route checks; `table.rs`: `idem check` output.
//! - `choice.rs`: enum spellings; `units.rs`: durations and sizes; `env.rs`: `${VAR}`.

mod breaker;
mod choice;
mod defaults;
mod env;
mod error;
mod load;
mod mcp;
mod policy;
mod reconcile;
mod routes;
mod sections;
mod table;
mod telemetry;
mod units;
mod validate;
mod values;
mod walk;
mod yaml;

pub use breaker::BreakerPolicy;
pub use choice::Choice;
pub use reconcile::{Found, Reconcile};

pub use crate::store::config::{
    BackendName, EncryptionConfig, KeyPlaces, OnStoreError, PostgresConfig, RedisConfig, RedisMode,
    RedisModeName, StoreBackend, StoreConfig,
};
pub use crate::traces::TelemetryConfig;
pub use crate::upstream::config::UpstreamConfig;
pub use env::{expand as expand_env, EnvError};
pub use error::{ConfigError, ConfigErrors, Pos};
pub use sections::{parse_listen, parse_upstream_url, parse_workers};
use strum::{Display, EnumString, VariantNames};
pub use units::{format_duration, format_size, parse_duration, parse_size};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};

use crate::path::PathTemplate;
use crate::template::{FieldPath, Template};

/// The whole, validated configuration of one idem process.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub upstream: UpstreamConfig,
    pub store: StoreConfig,
    /// `telemetry`: OpenTelemetry traces (off unless an OTLP endpoint is configured).
    pub telemetry: TelemetryConfig,
    /// What happens to a request no route matches.
    pub default: DefaultAction,
    /// Routes in file order; the first match wins.
    pub routes: Vec<Arc<RoutePolicy>>,
    /// Non-fatal findings (e.g. `wait_timeout` with `on_concurrent: conflict`).
    pub warnings: Vec<String>,
    /// The file this came from, if any (for reload and messages).
    pub source: Option<PathBuf>,
}

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
            .unwrap_or(defaults::BODY_READ_TIMEOUT.min(upstream.timeout))
    }

    /// The number of worker threads to run: `workers`, or with `auto` the CPUs this
    /// process may use (the cgroup CPU quota counts, as in a Kubernetes CPU limit).
    pub fn worker_count(&self) -> usize {
        self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// When set, key admin requires `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Without a token: `Host` names served besides `localhost` and IP literals (the
    /// DNS-rebinding guard, `admin/guard.rs`), lowercase.
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum DefaultAction {
    Passthrough,
    /// 404 `no_route`.
    Reject,
}

/// Everything the pipeline needs to know about one route.
#[derive(Debug, Clone)]
pub struct RoutePolicy {
    pub name: String,
    /// Methods this route matches. Never empty after validation.
    pub methods: Vec<Method>,
    pub path: PathTemplate,
    /// Key alternatives, in order of preference; never empty.
    pub key: Vec<Template>,
    pub require_key: bool,
    pub max_key_length: usize,
    /// Namespace for keys; `Template::empty()` when unset.
    pub scope: Template,
    pub fingerprint: FingerprintSpec,
    pub store_statuses: StatusSet,
    pub lease: Duration,
    pub retention: Duration,
    pub on_concurrent: OnConcurrent,
    pub wait_timeout: Duration,
    pub on_failure: OnFailure,
    pub on_ambiguous: OnAmbiguous,
    /// What a repeat of an attempt whose outcome is unknown (its lease ended) gets:
    /// unset, `retry` when the route declares `upstream_key_window` and `hold` when it
    /// does not ([`OnUnknown::default_for`]).
    pub on_unknown: OnUnknown,
    /// How long the upstream deduplicates a forwarded key; `None`: nothing says it
    /// does, so `on_unknown: retry` is refused. `retry` forwards again only within it.
    pub upstream_key_window: Option<Duration>,
    /// The lookup of `on_unknown: reconcile` (always set with it, checked at load).
    pub reconcile: Option<Arc<Reconcile>>,
    /// `breaker:` — stop sending to an upstream that stopped answering; off when `None`.
    pub breaker: Option<BreakerPolicy>,
    /// Which response headers a record keeps (credential headers never).
    pub store_headers: StoreHeaders,
    pub max_request_bytes: usize,
    pub max_response_bytes: usize,
    pub forward_key_header: HeaderName,
    pub forward_key_format: KeyFormat,
    /// Lower-case header names whose values bind a record to its caller.
    pub bind_credentials: Vec<HeaderName>,
    /// The credential hash of a request that carries none of `bind_credentials`,
    /// computed on first use (a loaded policy never changes): callers without
    /// credentials, common for a sidecar's local agent, skip a SHA-256 per request.
    pub credentials_absent: std::sync::OnceLock<[u8; 32]>,
    /// `mcp:` — an MCP endpoint whose `tools/call` for these tools is protected and
    /// whose other messages pass through (SPEC §8). `None` on every other route.
    pub mcp: Option<Arc<crate::mcp::McpRoute>>,
}

impl RoutePolicy {
    /// Whether deriving the key or the fingerprint needs the request body.
    pub fn needs_body(&self) -> bool {
        self.key.iter().any(Template::uses_body)
            || self.scope.uses_body()
            || !matches!(self.fingerprint.body, BodyFingerprint::Ignore)
    }

    /// How long after an attempt's first send `on_unknown: retry` may still take it
    /// over: `upstream_key_window` less one lease, because the retried call leaves up
    /// to a lease after the takeover and must reach the provider while it still
    /// deduplicates the key (`idem check` requires the window to exceed the lease).
    pub fn retry_window(&self) -> Option<Duration> {
        self.upstream_key_window
            .map(|window| window.saturating_sub(self.lease))
    }
}

/// What must be identical for a repeat to count as the same request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintSpec {
    pub method: bool,
    pub path: bool,
    pub body: BodyFingerprint,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFingerprint {
    Ignore,
    /// Canonical JSON when the body is JSON, raw bytes otherwise.
    Whole,
    /// Only these fields of a JSON body (canonical JSON of each, missing = null).
    Fields(Vec<FieldPath>),
}

/// Which upstream statuses are stored and replayed. 401/403/407 and 408/409/425/429
/// never are ([`StatusSet::NEVER_STORED`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    /// Whole classes: index 1..=5 for 1xx..5xx.
    pub classes: [bool; 6],
    pub codes: Vec<u16>,
}

impl StatusSet {
    /// Never stored, whatever `store_statuses` lists: 408/409/425/429 ask the caller to
    /// retry; 401/403/407 refuse the *caller* (its credentials), not the intent, so a
    /// stranger's refused call must not become the owner's stored answer (issue 46 §4).
    pub const NEVER_STORED: [u16; 7] = [401, 403, 407, 408, 409, 425, 429];

    pub fn contains(&self, status: u16) -> bool {
        if Self::NEVER_STORED.contains(&status) {
            return false;
        }
        let class = (status / 100) as usize;
        (class < self.classes.len() && self.classes[class]) || self.codes.contains(&status)
    }
}

impl Default for StatusSet {
    fn default() -> Self {
        StatusSet {
            classes: [false, false, true, false, true, false],
            codes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnConcurrent {
    Conflict,
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnFailure {
    Replay,
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnAmbiguous {
    Hold,
    Release,
}

/// `store_headers`: the response headers a record keeps, beyond the credential headers
/// that are never kept (SPEC §1 "Stored responses").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreHeaders {
    /// An allow-list: only these are kept. `None`: every end-to-end header.
    pub include: Option<Vec<HeaderName>>,
    /// Never kept, on top of the credential headers.
    pub exclude: Vec<HeaderName>,
}

/// `on_unknown` (SPEC §1 "Unknown outcomes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum OnUnknown {
    /// Forward again with the same upstream key, within `upstream_key_window`.
    Retry,
    /// Ask the upstream's records first (`reconcile:`).
    Reconcile,
    /// 409 `outcome_unknown` until an operator resolves it.
    Hold,
}

impl OnUnknown {
    /// The default (SPEC §1 "What the code enforces"): forwarding an unknown outcome
    /// again is safe only while the provider still deduplicates its key, so `retry`
    /// only when the route says how long that is, and `hold` otherwise.
    pub fn default_for(upstream_key_window: Option<Duration>) -> OnUnknown {
        match upstream_key_window {
            Some(_) => OnUnknown::Retry,
            None => OnUnknown::Hold,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "snake_case")]
pub enum KeyFormat {
    Plain,
    /// RFC 8941 sf-string: `"key"`, as the IETF draft sends it.
    #[strum(serialize = "sf-string")]
    SfString,
}

#[cfg(test)]
mod tests;
