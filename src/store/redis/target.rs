//! How to reach Redis in each `store.redis.mode`, built from the configuration once:
//! a [`Client`] for one server (standalone), a [`ClusterClient`] over the seed nodes
//! (cluster), or the [`Sentinels`] that name the current master (sentinel).
//!
//! Every mode makes its clients the same way (`client.rs`): TCP_NODELAY, credentials
//! from the URL (`user:password@`, `${ENV}`-expanded at load time), and for `rediss://`
//! the CAs of `tls.ca_file` instead of the system store.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{Client, TlsCertificates};

use super::client::{bad_config, certificates, client, clone_certs, node_info};
use super::sentinel::Sentinels;
use crate::store::config::{RedisConfig, RedisMode};
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
