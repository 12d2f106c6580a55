//! How to reach Redis in each `store.redis.mode`, built from the configuration once:
//! a [`Client`] for one server (standalone), a [`ClusterClient`] over the seed nodes
//! (cluster), or the [`Sentinels`] that name the current master (sentinel).
//!
//! Every mode shares the same connection details: TCP_NODELAY, credentials from the URL
//! (`user:password@`, `${ENV}`-expanded at load time), and for `rediss://` the CAs of
//! `tls.ca_file` instead of the system store.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{Client, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

use super::sentinel::Sentinels;
use crate::config::{RedisConfig, RedisMode};
use crate::store::StoreError;

/// Where commands go.
// Built a few times per process and cloned only when a connection is rebuilt: the
// variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(super) enum Target {
    Standalone(Client),
    Cluster(ClusterClient),
    Sentinel(Arc<Sentinels>),
}

impl Target {
    pub(super) fn new(cfg: &RedisConfig) -> Result<Target, StoreError> {
        crate::tls::install_crypto_provider();
        let certs = certificates(cfg)?;
        Ok(match &cfg.mode {
            RedisMode::Standalone { url } => Target::Standalone(client(node_info(url)?, &certs)?),
            RedisMode::Cluster { nodes } => Target::Cluster(
                cluster_builder(cfg, nodes, &certs)?
                    .build()
                    .map_err(|e| bad_config("redis cluster nodes", e))?,
            ),
            RedisMode::Sentinel {
                url,
                sentinels,
                master,
            } => {
                let sentinels = Sentinels::new(cfg, url, sentinels, master, certs)?;
                Target::Sentinel(Arc::new(sentinels))
            }
        })
    }
}

/// The seed nodes with idem's connection settings; callers add what they need
/// (the subscriber: RESP3 and a push sender).
pub(super) fn cluster_builder(
    cfg: &RedisConfig,
    nodes: &[String],
    certs: &Option<TlsCertificates>,
) -> Result<ClusterClientBuilder, StoreError> {
    let nodes = nodes
        .iter()
        .map(|url| node_info(url))
        .collect::<Result<Vec<_>, _>>()?;
    let tcp = nodes
        .first()
        .map(|n| n.tcp_settings().clone())
        .unwrap_or_default();
    let mut builder = ClusterClientBuilder::new(nodes)
        .tcp_settings(tcp)
        .connection_timeout(cfg.op_timeout.max(Duration::from_secs(1)))
        // Operations are bounded by `op_timeout` in `RedisStore`; inside that bound the
        // client follows MOVED/ASK and retries a failed node a couple of times quickly.
        .retries(2)
        .min_retry_wait(10)
        .max_retry_wait(100);
    if let Some(certs) = certs {
        builder = builder.certs(clone_certs(certs));
    }
    Ok(builder)
}

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
fn bad_config(what: &str, e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("cannot use {what}: {e}"))
}
