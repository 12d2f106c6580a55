//! The admin listener's typed configuration (`admin:`), which `config/` reads from the
//! YAML and the app hands to the admin API.

use std::net::SocketAddr;

/// The `admin:` section: where the admin API listens and who may use it.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// When set, key admin requires `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Without a token: `Host` names served besides `localhost` and IP literals (the
    /// DNS-rebinding guard, `admin/guard.rs`), lowercase.
    pub allowed_hosts: Vec<String>,
}
