//! Redis backend (standalone; Cluster and Sentinel are later variants of [`connect`]).
//!
//! - Store key: `key_prefix` + hex(`StoreKey`). Event channel: `{key_prefix}events`.
//! - Every operation is one round trip, bounded by `op_timeout` ([`StoreError::Timeout`]);
//!   any Redis or connection error is [`StoreError::Unavailable`].
//! - Commands share one multiplexed, self-reconnecting connection per handle built by
//!   `connect` (`conn.rs`; each worker thread has its own); wake-ups come from one
//!   pub/sub subscription per process, shared through [`Events`] (`subscriber.rs`).
//!   Both start in the background: [`RedisStore::connect`] succeeds even while Redis is
//!   down.
//!
//! [`connect`]: RedisStore::connect

mod conn;
mod scripts;
mod subscriber;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{
    Client, Cmd, FromRedisValue, IntoConnectionInfo, RedisResult, RedisWrite, Script, ToRedisArgs,
};
use tokio::time::timeout;

use self::conn::Conn;
pub use self::subscriber::Events;
use super::encode::{encode_into, encoded_size_hint};
use super::record::decode;
use super::task::AbortOnDrop;
use super::{Record, Reserve, StoreError, Token, Watch};
use crate::config::{RedisConfig, RedisMode};
use crate::key::StoreKey;

/// Handle to a Redis store; clones share connections, subscription and watchers.
#[derive(Clone)]
pub struct RedisStore {
    conn: Arc<Conn>,
    /// With `wait_replicas > 0`, reservations and their `WAIT` use a connection of their
    /// own (see [`RedisStore::reserve`]); otherwise this is `conn`.
    reserve_conn: Arc<Conn>,
    prefix: Arc<str>,
    op_timeout: Duration,
    wait_replicas: u32,
    events: Events,
    /// Stops the health and timer tasks when the last clone drops.
    _tasks: Arc<[AbortOnDrop; 2]>,
}

impl RedisStore {
    /// Builds the store with a subscription of its own and starts its background tasks.
    /// Fails only on configuration problems (bad URL, unsupported mode); an unreachable
    /// Redis is logged and retried in the background while operations fail with
    /// `Unavailable` or `Timeout`.
    pub async fn connect(cfg: &RedisConfig) -> Result<RedisStore, StoreError> {
        RedisStore::connect_sharing(cfg, &RedisStore::subscribe(cfg)?).await
    }

    /// Starts the event subscription that [`RedisStore::connect_sharing`] handles share:
    /// one per process, however many worker threads have a connection of their own.
    pub fn subscribe(cfg: &RedisConfig) -> Result<Events, StoreError> {
        let client = client(cfg)?;
        let channel = format!("{}events", cfg.key_prefix);
        Ok(Events::start(client, &channel, cfg.op_timeout))
    }

    /// A store with its own command connection(s), started on the current runtime, and
    /// the given shared subscription and watchers.
    pub async fn connect_sharing(
        cfg: &RedisConfig,
        events: &Events,
    ) -> Result<RedisStore, StoreError> {
        let client = client(cfg)?;
        let conn = Arc::new(Conn::new(client.clone(), cfg.op_timeout)?);
        let reserve_conn = match cfg.wait_replicas {
            0 => conn.clone(),
            _ => Arc::new(Conn::new(client, cfg.op_timeout)?),
        };
        let mut conns = vec![conn.clone()];
        if !Arc::ptr_eq(&conn, &reserve_conn) {
            conns.push(reserve_conn.clone());
        }
        let tasks = [
            AbortOnDrop(tokio::spawn(conn::health(conns, cfg.op_timeout))),
            AbortOnDrop(tokio::spawn(conn::keep_a_timer_near(cfg.op_timeout))),
        ];
        let store = RedisStore {
            conn,
            reserve_conn,
            prefix: cfg.key_prefix.as_str().into(),
            op_timeout: cfg.op_timeout,
            wait_replicas: cfg.wait_replicas,
            events: events.clone(),
            _tasks: Arc::new(tasks),
        };
        if let Err(e) = store.ping().await {
            tracing::warn!(error = %e, "redis not reachable at startup; retrying in the background");
        }
        Ok(store)
    }

    /// Whether the event subscription is currently up (wake-ups from other replicas
    /// only arrive while it is).
    pub fn is_subscribed(&self) -> bool {
        self.events.subscribed.load(Ordering::Acquire)
    }

    /// `SET key value NX GET PX lease`: one round trip that both reserves and, for a
    /// loser, returns the existing record (Redis ≥ 7.0).
    ///
    /// With `wait_replicas = N > 0`, a winner then sends `WAIT N op_timeout`, so the
    /// reservation is on N replicas before the upstream is called and survives a
    /// failover. Trade-offs: every reservation costs a second round trip and up to
    /// `op_timeout` more while replicas lag; too few acks are only logged (refusing the
    /// request would turn a replica outage into a proxy outage; the reservation is in
    /// place on the primary either way). `WAIT` blocks its whole client connection, so
    /// reservations then use a connection of their own: a lagging replica slows new
    /// reservations but never completions or lease renewals.
    pub async fn reserve(
        &self,
        key: &StoreKey,
        record: &Record,
        lease: Duration,
    ) -> Result<Reserve, StoreError> {
        let mut conn = self.reserve_conn.manager();
        let mut cmd = command("SET", Some(record));
        cmd.arg(&self.store_key(key)[..])
            .arg(Encoded(record))
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(millis(lease));
        let existing: Option<Vec<u8>> = self.bounded(cmd.query_async(&mut conn)).await?;
        if let Some(bytes) = existing {
            return Ok(Reserve::Exists(decode(&bytes)?));
        }
        if self.wait_replicas > 0 {
            let mut wait = redis::cmd("WAIT");
            wait.arg(self.wait_replicas).arg(millis(self.op_timeout));
            // Redis answers WAIT itself after `op_timeout`; allow it that long plus one.
            let acked = timeout(self.op_timeout * 2, wait.query_async::<u32>(&mut conn)).await;
            match acked {
                Ok(Ok(n)) if n >= self.wait_replicas => {}
                Ok(Ok(n)) => tracing::warn!(acked = n, wanted = self.wait_replicas, key = %key,
                    "reservation not yet on enough replicas; a failover now could lose it"),
                Ok(Err(e)) => tracing::warn!(error = %e, key = %key, "WAIT for replicas failed"),
                Err(_) => tracing::warn!(key = %key, "WAIT for replicas timed out"),
            }
        }
        Ok(Reserve::Won)
    }

    pub async fn replace_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn.manager();
        let script = &*scripts::REPLACE_IF_OWNER;
        let mut cmd = evalsha(script, &self.store_key(key), Some(record));
        cmd.arg(&owner.hex()[..])
            .arg(Encoded(record))
            .arg(millis(ttl))
            .arg(if notify { &*self.events.channel } else { "" })
            .arg(&key.hex()[..]);
        let replaced: i64 = self.bounded(eval(&mut conn, script, &cmd)).await?;
        if replaced == 1 && notify {
            // Local waiters need not wait for the round trip through pub/sub.
            self.events.watchers.notify(key);
        }
        Ok(replaced == 1)
    }

    pub async fn release_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn.manager();
        let script = &*scripts::RELEASE_IF_OWNER;
        let mut cmd = evalsha(script, &self.store_key(key), None);
        cmd.arg(&owner.hex()[..])
            .arg(&*self.events.channel)
            .arg(&key.hex()[..]);
        let released: i64 = self.bounded(eval(&mut conn, script, &cmd)).await?;
        if released == 1 {
            self.events.watchers.notify(key);
        }
        Ok(released == 1)
    }

    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let mut conn = self.conn.manager();
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.store_key(key)[..]);
        let bytes: Option<Vec<u8>> = self.bounded(cmd.query_async(&mut conn)).await?;
        bytes.map(|b| decode(&b)).transpose()
    }

    pub async fn delete(&self, key: &StoreKey) -> Result<bool, StoreError> {
        let mut conn = self.conn.manager();
        let script = &*scripts::DELETE;
        let mut cmd = evalsha(script, &self.store_key(key), None);
        cmd.arg(&*self.events.channel).arg(&key.hex()[..]);
        let deleted: i64 = self.bounded(eval(&mut conn, script, &cmd)).await?;
        if deleted == 1 {
            self.events.watchers.notify(key);
        }
        Ok(deleted == 1)
    }

    pub fn watch(&self, key: &StoreKey) -> Watch {
        self.events.watchers.watch(key)
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.manager();
        let ping = redis::cmd("PING");
        self.bounded(ping.query_async::<String>(&mut conn))
            .await
            .map(drop)
    }

    /// `key_prefix` + hex(`key`).
    fn store_key(&self, key: &StoreKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + 64);
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(&key.hex());
        out
    }

    /// Bounds a Redis call by `op_timeout` and maps its errors.
    async fn bounded<T>(&self, op: impl Future<Output = RedisResult<T>>) -> Result<T, StoreError> {
        match timeout(self.op_timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
            Err(_) => Err(StoreError::Timeout(self.op_timeout)),
        }
    }
}

/// A client for the configured URL (no connection yet).
fn client(cfg: &RedisConfig) -> Result<Client, StoreError> {
    if cfg.mode != RedisMode::Standalone {
        let msg = format!("redis mode {:?} is not supported yet", cfg.mode);
        return Err(StoreError::Unavailable(msg));
    }
    crate::tls::install_crypto_provider();
    let bad_url =
        |e: redis::RedisError| StoreError::Unavailable(format!("cannot use redis url: {e}"));
    let info = cfg.url.as_str().into_connection_info().map_err(bad_url)?;
    // redis-rs leaves Nagle's algorithm on. Commands are small and pipelined; with Nagle
    // the tail of a record that spans segments can wait for the server's delayed ACK
    // (tens of milliseconds on a real network). Other Redis clients set TCP_NODELAY too.
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Client::open(info.set_tcp_settings(tcp)).map_err(bad_url)
}

/// A record as one command argument, encoded straight into the command's buffer (no
/// intermediate copy of the stored body).
struct Encoded<'a>(&'a Record);

impl ToRedisArgs for Encoded<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        encode_into(self.0, &mut out.writer_for_next_arg());
    }
}

/// `name`, to which the caller appends the arguments. When one of them is `carries`, the
/// buffer is sized for that record up front, so encoding into it never regrows (and
/// copies) it midway.
fn command(name: &str, carries: Option<&Record>) -> Cmd {
    let bytes = 192 + carries.map_or(0, encoded_size_hint);
    let mut cmd = Cmd::with_capacity(10, bytes);
    cmd.arg(name);
    cmd
}

/// `EVALSHA <sha> 1 <store key>`, to which the caller appends the script's ARGV.
fn evalsha(script: &Script, store_key: &[u8], carries: Option<&Record>) -> Cmd {
    let mut cmd = command("EVALSHA", carries);
    cmd.arg(script.get_hash()).arg(1).arg(store_key);
    cmd
}

/// Run an `EVALSHA` command; on `NOSCRIPT` (after a Redis restart or `SCRIPT FLUSH`)
/// load the script and retry once. Building the command ourselves rather than through
/// `ScriptInvocation` spares two copies of every argument (the record included).
async fn eval<T: FromRedisValue>(
    conn: &mut ConnectionManager,
    script: &Script,
    cmd: &Cmd,
) -> RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(conn).await?;
            cmd.query_async(conn).await
        }
        other => other,
    }
}

/// Milliseconds for `PX`/`WAIT`: Redis rejects `PX 0`, and a sub-millisecond TTL
/// rounds up rather than to "no expiry".
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, i64::MAX as u64)
}
