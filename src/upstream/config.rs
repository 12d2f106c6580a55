//! The upstream's typed configuration (`upstream:`), owned here: `config/` parses the
//! YAML into it and re-exports it, and the client reads nothing else of the
//! configuration.

use std::time::Duration;

use http::Uri;

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// `http://host:port` or `https://host:port` (no path other than `/`).
    pub url: Uri,
    pub connect_timeout: Duration,
    /// Until the response head; each body read is bounded by it too.
    pub timeout: Duration,
}
