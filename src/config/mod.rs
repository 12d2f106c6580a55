//! Typed, validated configuration.
//!
//! Pipeline: YAML text → a positioned node tree (`yaml.rs`) → one walk that reads every
//! field, expands `${VAR}` in string values (`env.rs`), parses units (`crate::units`) and
//! checks cross-field rules (`validate.rs`), collecting every error with its file, line,
//! column and field path (`error.rs`) → [`Config`]. Nothing downstream ever sees a string
//! that still needs parsing: durations are [`Duration`](std::time::Duration), sizes are
//! `usize`, templates are compiled.
//!
//! The types are their parts': the store's (`store/config.rs`), the traces'
//! (`traces/mod.rs`), the upstream client's (`upstream/config.rs`), the server's
//! (`server/config.rs`), the admin listener's (`admin/config.rs`) and the routes'
//! (`policy/`). This module builds and re-exports them; no part imports it, so it sits
//! above all of them.
//!
//! A route setting comes from the route itself, else `defaults:`, else the built-in
//! default (`defaults.rs`). [`Config::for_upstream`] is the no-config setup.
//!
//! # Layout
//! - `load.rs`: the entry points ([`Config::load`], [`Config::from_yaml_str`], …).
//! - `yaml.rs`: YAML → nodes with positions; `walk.rs`: typed getters that collect errors.
//! - `sections.rs`: `listen`, `server`, `admin`, `upstream`, `store`; `telemetry.rs`: `telemetry`.
//! - `routes.rs`, `policy_fields.rs`, `values.rs`: `defaults:` and `routes:`.
//! - `validate.rs`: cross-field and cross-route checks; `table.rs`: `idem check` output.
//! - `choice.rs`: enum spellings; `env.rs`: `${VAR}`.

mod breaker;
mod choice;
mod defaults;
mod env;
mod error;
mod load;
mod mcp;
mod policy_fields;
mod reconcile;
mod routes;
mod sections;
mod table;
mod telemetry;
mod validate;
mod values;
mod walk;
mod yaml;

pub use choice::Choice;

pub use crate::admin::config::AdminConfig;
pub use crate::policy::{
    BodyFingerprint, BreakerPolicy, DefaultAction, FingerprintSpec, Found, KeyFormat, OnAmbiguous,
    OnConcurrent, OnFailure, OnUnknown, Reconcile, RoutePolicy, StatusSet, StoreHeaders,
};
pub use crate::server::config::ServerConfig;
pub use crate::store::config::{
    BackendName, EncryptionConfig, KeyPlaces, OnStoreError, PostgresConfig, RedisConfig, RedisMode,
    RedisModeName, StoreBackend, StoreConfig,
};
pub use crate::traces::TelemetryConfig;
pub use crate::units::{format_duration, format_size, parse_duration, parse_size};
pub use crate::upstream::config::UpstreamConfig;
pub use env::{expand as expand_env, EnvError};
pub use error::{ConfigError, ConfigErrors, Pos};
pub use sections::{parse_listen, parse_upstream_url, parse_workers};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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

#[cfg(test)]
mod tests;
