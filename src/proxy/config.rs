//! The proxy's own configuration, which the app builds from the loaded file and hands
//! over at start ([`ProxyConfig`]) and at each reload ([`Reloaded`]): the proxy reads
//! the parts it needs, never the parser's whole `Config`.

use std::sync::Arc;
use std::time::Duration;

use crate::policy::{DefaultAction, RoutePolicy};
use crate::store::config::{EncryptionConfig, OnStoreError};
use crate::upstream::config::UpstreamConfig;

/// What the workers' proxies are built from; only [`Reloaded`] changes afterwards.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub upstream: UpstreamConfig,
    /// How long a protected request's body may take to arrive
    /// (`server.body_read_timeout`, resolved against `upstream.timeout`).
    pub body_read_timeout: Duration,
    /// `server.max_buffered_bytes`: one budget for every worker.
    pub max_buffered_bytes: usize,
    pub reloaded: Reloaded,
}

/// The part of the configuration a reload swaps.
#[derive(Debug, Clone)]
pub struct Reloaded {
    /// In file order; the first match wins.
    pub routes: Vec<Arc<RoutePolicy>>,
    /// What happens to a request no route matches.
    pub default: DefaultAction,
    /// `store.on_error`.
    pub on_store_error: OnStoreError,
    /// `store.encryption`: a reload rereads its key files.
    pub encryption: Option<EncryptionConfig>,
}
