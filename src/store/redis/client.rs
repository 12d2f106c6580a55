//! How a Redis client is made, whatever the mode: TCP_NODELAY, credentials from the URL
//! and, for `rediss://`, the CAs of `tls.ca_file`. A leaf below `target.rs` (which
//! chooses the mode) and `sentinel.rs` (which makes a client for each master it is told
//! of).

use redis::{Client, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

use crate::store::config::RedisConfig;
use crate::store::StoreError;

/// A URL as connection details, with TCP_NODELAY set.
///
/// redis-rs leaves Nagle's algorithm on. Commands are small and pipelined; with Nagle
/// the tail of a record that spans segments can wait for the server's delayed ACK
/// (tens of milliseconds on a real network). Other Redis clients set TCP_NODELAY too.
pub(super) fn node_info(url: &str) -> Result<ConnectionInfo, StoreError> {
    let info = url
        .into_connection_info()
        .map_err(|e| bad_config("redis url", e))?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Ok(info.set_tcp_settings(tcp))
}

/// A client for one server, trusting `certs` for TLS when given.
pub(super) fn client(
    info: ConnectionInfo,
    certs: &Option<TlsCertificates>,
) -> Result<Client, StoreError> {
    let built = match certs {
        Some(certs) => Client::build_with_tls(info, clone_certs(certs)),
        None => Client::open(info),
    };
    built.map_err(|e| bad_config("redis url", e))
}

/// The CAs of `tls.ca_file`, if set.
pub(super) fn certificates(cfg: &RedisConfig) -> Result<Option<TlsCertificates>, StoreError> {
    let Some(path) = &cfg.tls_ca_file else {
        return Ok(None);
    };
    let pem = std::fs::read(path).map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot read store.redis.tls.ca_file {}: {e}",
            path.display()
        ))
    })?;
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

/// `TlsCertificates` is not `Clone`.
pub(super) fn clone_certs(certs: &TlsCertificates) -> TlsCertificates {
    TlsCertificates {
        client_tls: None,
        root_cert: certs.root_cert.clone(),
    }
}

/// redis-rs errors about a URL never quote the URL itself, so no password leaks here.
pub(super) fn bad_config(what: &str, e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("cannot use {what}: {e}"))
}
