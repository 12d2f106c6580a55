//! Sentinel mode: asking the sentinels where the master is.
//!
//! redis-rs's async Sentinel support resolves the master once and never moves a live
//! connection after a failover, so idem wraps it thinly: the command connection's
//! health loop (`conn.rs`) asks the sentinels for the master's address every tick, at
//! once after a connection error or a `READONLY` reply (the old master demoted to a
//! replica), and at once when a sentinel announces `+switch-master` (`switch.rs`); it
//! rebuilds the connection when the address changed.
//!
//! The question is plain `SENTINEL GET-MASTER-ADDR-BY-NAME` on a cached connection to
//! one sentinel at a time (trying the next on any failure): cheap enough to ask every
//! second. The master's connection takes everything but host and port from
//! `store.redis.url` (credentials, database, TLS, protocol).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, TlsCertificates};
use tokio::sync::Mutex;
use tokio::time::timeout;

use super::client::{client, node_info};
use crate::store::config::RedisConfig;
use crate::store::StoreError;

/// The sentinel set of one master.
pub(crate) struct Sentinels {
    sentinels: Vec<Client>,
    master_name: String,
    /// `store.redis.url`: everything but the address of the master's connection.
    master_info: ConnectionInfo,
    certs: Option<TlsCertificates>,
    op_timeout: Duration,
    /// The sentinel that answered last, and a connection to it.
    cached: Mutex<Option<(usize, MultiplexedConnection)>>,
}

impl Sentinels {
    pub(super) fn new(
        cfg: &RedisConfig,
        master_url: &str,
        sentinels: &[String],
        master: &str,
        certs: Option<TlsCertificates>,
    ) -> Result<Sentinels, StoreError> {
        let sentinels = sentinels
            .iter()
            .map(|url| client(node_info(url)?, &certs))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Sentinels {
            sentinels,
            master_name: master.to_owned(),
            master_info: node_info(master_url)?,
            certs,
            op_timeout: cfg.op_timeout.max(Duration::from_millis(500)),
            cached: Mutex::new(None),
        })
    }

    pub(super) fn len(&self) -> usize {
        self.sentinels.len()
    }

    /// A client for sentinel `i` (with its URL's credentials and the CA).
    pub(super) fn client(&self, i: usize) -> Option<&Client> {
        self.sentinels.get(i)
    }

    pub(super) fn master_name(&self) -> &str {
        &self.master_name
    }

    pub(super) fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    /// The master's address as the first answering sentinel reports it; after an
    /// `announced` switch, as the first sentinel that already names that master reports
    /// it (or else the first answer).
    pub(super) async fn master_addr(
        &self,
        announced: Option<&(String, u16)>,
    ) -> Result<(String, u16), StoreError> {
        let mut cached = self.cached.lock().await;
        let start = cached.as_ref().map_or(0, |(i, _)| *i);
        let mut last_error = String::from("no sentinel configured");
        let mut first_answer = None;
        for n in 0..self.sentinels.len() {
            let i = (start + n) % self.sentinels.len();
            let conn = match cached.take() {
                Some((j, conn)) if j == i => conn,
                _ => match self.connect(i).await {
                    Ok(conn) => conn,
                    Err(e) => {
                        last_error = e;
                        continue;
                    }
                },
            };
            let mut ask = conn.clone();
            let mut cmd = redis::cmd("SENTINEL");
            cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.master_name);
            match timeout(self.op_timeout, cmd.query_async(&mut ask)).await {
                Ok(Ok(Some(named))) => {
                    *cached = Some((i, conn));
                    if announced.is_none_or(|a| *a == named) {
                        return Ok(named);
                    }
                    first_answer.get_or_insert(named);
                }
                Ok(Ok(None)) => {
                    *cached = Some((i, conn));
                    last_error = format!("sentinels know no master named {:?}", self.master_name);
                }
                Ok(Err(e)) => last_error = e.to_string(),
                Err(_) => last_error = format!("no answer within {:?}", self.op_timeout),
            }
        }
        first_answer.ok_or_else(|| {
            StoreError::Unavailable(format!(
                "cannot learn the redis master from the sentinels: {last_error}"
            ))
        })
    }

    /// A client for the master at `host:port`, with the URL's credentials and TLS.
    pub(super) fn master_client(&self, host: &str, port: u16) -> Result<Client, StoreError> {
        let addr = match self.master_info.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_string(), port),
        };
        client(self.master_info.clone().set_addr(addr), &self.certs)
    }

    async fn connect(&self, i: usize) -> Result<MultiplexedConnection, String> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.op_timeout))
            .set_response_timeout(Some(self.op_timeout));
        let connect = self.sentinels[i].get_multiplexed_async_connection_with_config(&config);
        match timeout(self.op_timeout * 2, connect).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("sentinel connect timed out".into()),
        }
    }
}
