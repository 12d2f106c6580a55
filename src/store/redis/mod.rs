//! Redis backend: standalone, Cluster and Sentinel (`store.redis.mode`).
//!
//! - Names: `keys.rs` (hash-tagged in cluster mode, so a record and its wake-up channel
//!   share one slot). Every operation is one round trip on the key's node, bounded by
//!   `op_timeout` ([`StoreError::Timeout`]); any Redis or connection error is
//!   [`StoreError::Unavailable`].
//! - Commands share one multiplexed, self-reconnecting link per handle (`conn.rs`;
//!   each worker thread has its own), which in Sentinel mode follows the master through
//!   a failover (`sentinel.rs`) and in cluster mode follows MOVED/ASK and failovers
//!   (redis-rs `ClusterConnection`). Wake-ups come from one subscription per process,
//!   shared through [`RedisEvents`] (`subscriber.rs`, `sharded.rs`). Everything connects in
//!   the background: [`RedisStore::connect`] succeeds even while Redis is down.
//! - `wait_replicas: N` makes reservations, renewals and completions wait for N replica acks
//!   (see [`RedisStore::reserve`]; `command.rs`).
//! - Concurrent duplicates of one key in this process share one reservation, and a key
//!   the process owns is answered from memory (`local.rs`).

mod admin_read;
mod client;
mod command;
mod conn;
mod events;
mod eviction;
mod keys;
mod listing;
mod local;
mod scripts;
mod sentinel;
mod sharded;
mod subscriber;
mod switch;
mod target;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisResult, Value};
use tokio::sync::Notify;
use tokio::time::timeout;

use self::command::{eval, millis, Encoded};
use self::conn::{Conn, Link};
pub use self::eviction::NodePolicy;
use self::keys::Layout;
use self::local::Coalesce;
use self::scripts::Scripts;
pub use self::subscriber::RedisEvents;
use self::target::Target;
use super::record::decode_owned;
use super::task::AbortOnDrop;
use super::{Record, Reserve, StoreError, Token, Watch};
use crate::store::config::{RedisConfig, RedisMode};
use crate::store_key::StoreKey;

/// Handle to a Redis store; clones share connections, subscription and watchers.
#[derive(Clone)]
pub struct RedisStore {
    conn: Arc<Conn>,
    /// With `wait_replicas > 0`, the writes followed by `WAIT` (reservations,
    /// renewals, completions, takeovers) use a connection of their own: `WAIT` blocks
    /// its whole connection, so a lagging replica must not hold up reads and releases.
    /// Otherwise `conn`.
    wait_conn: Arc<Conn>,
    layout: Layout,
    scripts: &'static Scripts,
    op_timeout: Duration,
    wait_replicas: u32,
    events: RedisEvents,
    /// Stops the health and timer tasks when the last clone drops.
    _tasks: Arc<[AbortOnDrop; 2]>,
}

/// What a fenced write checks besides the owner's token (see `scripts.rs`).
#[derive(Clone, Copy)]
enum Guard {
    Owner,
    /// The lease has not ended (a renewal).
    Renew,
    /// The lease has ended, and the first send is within the key window if one is given.
    TakeOver(Option<Duration>),
}

impl RedisStore {
    /// Builds the store with a subscription of its own and starts its background tasks.
    /// Fails only on configuration problems (bad URL, unreadable CA file); an
    /// unreachable Redis is logged and retried in the background while operations fail
    /// with `Unavailable` or `Timeout`.
    pub async fn connect(cfg: &RedisConfig) -> Result<RedisStore, StoreError> {
        RedisStore::connect_sharing(cfg, &RedisStore::subscribe(cfg)?).await
    }

    /// Starts the event subscription that [`RedisStore::connect_sharing`] handles share:
    /// one per process, however many worker threads have a connection of their own.
    pub fn subscribe(cfg: &RedisConfig) -> Result<RedisEvents, StoreError> {
        let target = Target::new(cfg)?;
        let layout = Layout::new(&cfg.key_prefix, cfg.mode.is_cluster());
        let sharded = match &cfg.mode {
            RedisMode::Cluster { nodes } => {
                let certs = client::certificates(cfg)?;
                Some(target::cluster_builder(cfg, nodes, &certs)?)
            }
            _ => None,
        };
        Ok(RedisEvents::start(target, sharded, layout, cfg.op_timeout))
    }

    /// A store with its own command connection(s), started on the current runtime, and
    /// the given shared subscription and watchers.
    pub async fn connect_sharing(
        cfg: &RedisConfig,
        events: &RedisEvents,
    ) -> Result<RedisStore, StoreError> {
        let target = Target::new(cfg)?;
        let suspect = Arc::new(Notify::new());
        let conn = Arc::new(Conn::new(target.clone(), cfg.op_timeout, suspect.clone())?);
        let wait_conn = match cfg.wait_replicas {
            0 => conn.clone(),
            _ => Arc::new(Conn::new(target, cfg.op_timeout, suspect.clone())?),
        };
        let mut conns = vec![conn.clone()];
        if !Arc::ptr_eq(&conn, &wait_conn) {
            conns.push(wait_conn.clone());
        }
        for c in &conns {
            // Sentinel mode: learn the master now rather than at the first health tick.
            if let Err(e) = c.follow_master(None).await {
                tracing::warn!(error = %e, "redis master not known yet; asking again in the background");
            }
        }
        let tasks = [
            AbortOnDrop(tokio::spawn(conn::health(
                conns,
                suspect,
                events.switches.clone(),
            ))),
            AbortOnDrop(tokio::spawn(conn::keep_a_timer_near(cfg.op_timeout))),
        ];
        let layout = events.layout.clone();
        let store = RedisStore {
            conn,
            wait_conn,
            scripts: if layout.sharded() {
                &scripts::SHARDED
            } else {
                &scripts::PLAIN
            },
            layout,
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

    /// The reservation script (`scripts.rs`): `SET key value NX GET PX ttl` with the
    /// lease stamped on the server's clock, in one round trip that both reserves and, for
    /// a loser, returns the existing record and the server's time.
    ///
    /// If the existing record carries this reservation's own fencing token, the command
    /// was retried by the client layer after its first reply was lost (a reconnect, a
    /// cluster redirect): the reservation is ours, so it is won, not a duplicate.
    ///
    /// With `wait_replicas = N > 0`, a winner then sends `WAIT N op_timeout` on the
    /// key's node, so the reservation is on N replicas before the upstream is called and
    /// survives a failover. Too few acks are a store error (the caller refuses or
    /// degrades per `on_error`), after a best-effort release of the reservation so a
    /// retry is not locked out for the whole lease.
    ///
    /// Concurrent reservations of one key in this process are coalesced (`local.rs`):
    /// one goes to Redis and the others take its outcome, and a key this process owns
    /// is answered from memory.
    pub async fn reserve(
        &self,
        key: &StoreKey,
        record: &Record,
        ttl: Duration,
    ) -> Result<Reserve, StoreError> {
        // A record with our own token is ours (a retried call), as in `reserve_in_redis`.
        let exists = |(existing, now): (Record, u64)| match existing.token == record.token {
            true => Reserve::Won,
            false => Reserve::Exists(existing, now),
        };
        match self.events.local.lookup(key) {
            Coalesce::Known(existing) => Ok(exists(existing)),
            Coalesce::Alone => self.reserve_in_redis(key, record, ttl).await,
            Coalesce::Follow(mut outcome) => {
                // The leader's round trip is bounded (op_timeout, and as long again
                // for WAIT). If it failed or was cancelled, go to Redis ourselves: one
                // slow reply must not fail a whole storm of duplicates at once.
                let bound = self.op_timeout * 3;
                let shared = timeout(bound, outcome.wait_for(Option::is_some)).await;
                match shared.ok().and_then(|r| r.ok()).and_then(|o| o.clone()) {
                    Some(Ok(existing)) => Ok(exists(existing)),
                    _ => self.reserve_in_redis(key, record, ttl).await,
                }
            }
            Coalesce::Lead(leader) => {
                let result = self.reserve_in_redis(key, record, ttl).await;
                match &result {
                    Ok(Reserve::Won) => leader.won(record),
                    Ok(Reserve::Exists(existing, now)) => leader.exists(existing, *now),
                    // Dropping the leader lets the followers try Redis themselves.
                    Err(_) => drop(leader),
                }
                result
            }
        }
    }

    async fn reserve_in_redis(
        &self,
        key: &StoreKey,
        record: &Record,
        ttl: Duration,
    ) -> Result<Reserve, StoreError> {
        let mut link = self.wait_conn.link();
        let store_key = self.layout.store_key(key);
        let lease = record.stamp.map_or(Duration::ZERO, |s| s.lease);
        let args = |cmd: &mut Cmd| {
            cmd.arg(Encoded(record))
                .arg(millis(ttl))
                .arg(lease.as_millis() as u64);
        };
        let script = &self.scripts.reserve;
        let reply: Value = self
            .bounded(
                &self.wait_conn,
                eval(&mut link, script, &store_key, Some(record), args),
            )
            .await?;
        let (now, existing) = reserved(reply)?;
        if let Some(bytes) = existing {
            let existing = decode_owned(bytes.into())?;
            if existing.token != record.token {
                return Ok(Reserve::Exists(existing, now));
            }
        }
        if self.wait_replicas > 0 {
            // Boxed: only with `wait_replicas`; its futures (WAIT under a timer, and the
            // release's script) stay out of every reservation's state otherwise.
            Box::pin(self.replicate_reservation(&mut link, &store_key, key, &record.token)).await?;
        }
        Ok(Reserve::Won)
    }

    /// Waits for `wait_replicas` acks of a reservation just written; without them the
    /// reservation is released (a failover now could lose it) and the error returned.
    async fn replicate_reservation(
        &self,
        link: &mut Link,
        store_key: &[u8],
        key: &StoreKey,
        token: &Token,
    ) -> Result<(), StoreError> {
        if let Err(e) = self.wait_for_replicas(link, store_key).await {
            let _ = self.release_if_owner(key, token).await;
            return Err(e);
        }
        Ok(())
    }

    /// Overwrites the record while it carries `owner`'s token. Every such write (a
    /// renewal, a completion, a takeover starting a new attempt) then waits for
    /// `wait_replicas` acks, like a reservation.
    pub async fn replace_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
    ) -> Result<bool, StoreError> {
        self.fenced_write(key, owner, record, ttl, notify, Guard::Owner)
            .await
    }

    /// As [`RedisStore::replace_if_owner`], only while the record is an attempt whose
    /// lease ended by the server's clock (and, with `window`, whose first send is
    /// younger than it); watchers are woken.
    pub async fn take_over(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        window: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let guard = Guard::TakeOver(window);
        self.fenced_write(key, owner, record, ttl, true, guard)
            .await
    }

    /// As [`RedisStore::replace_if_owner`] (silent), only while the owner's lease has
    /// not ended by the server's clock.
    pub async fn renew(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.fenced_write(key, owner, record, ttl, false, Guard::Renew)
            .await
    }

    async fn fenced_write(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
        guard: Guard,
    ) -> Result<bool, StoreError> {
        // Every fenced write waits for `wait_replicas` acks, renewals too (SPEC §1 "What
        // the code enforces"): a renewal a failover could roll back would move the
        // owner's send deadline past the lease a promoted replica holds. The owner moves
        // its deadline only on an acknowledged renewal (`proxy/lease.rs`).
        let conn = &self.wait_conn;
        let mut link = conn.link();
        let (script, window) = match guard {
            Guard::Owner => (&self.scripts.replace_if_owner, None),
            Guard::Renew => (&self.scripts.renew, None),
            Guard::TakeOver(window) => (&self.scripts.take_over, window),
        };
        let window = window.map(|w| millis(w).to_string());
        // The lease to stamp on the server's clock (none for a completed record).
        let lease = record.stamp.map(|s| s.lease.as_millis().to_string());
        let sent = match record.stamp {
            Some(s) if s.sent => "1",
            _ => "0",
        };
        let store_key = self.layout.store_key(key);
        let channel = notify.then(|| self.layout.channel(key));
        let args = |cmd: &mut Cmd| {
            cmd.arg(&owner.hex()[..])
                .arg(Encoded(record))
                .arg(millis(ttl))
                .arg(channel.as_deref().unwrap_or(""))
                .arg(&key.hex()[..])
                .arg(lease.as_deref().unwrap_or(""))
                .arg(sent)
                .arg(window.as_deref().unwrap_or(""));
        };
        let acked = async {
            let replaced: i64 = self
                .bounded(
                    conn,
                    eval(&mut link, script, &store_key, Some(record), args),
                )
                .await?;
            if replaced == 1 {
                self.wait_for_replicas(&mut link, &store_key).await?;
            }
            Ok(replaced)
        };
        let replaced = match acked.await {
            Ok(replaced) => replaced,
            Err(e) => {
                // The write may still land (a timeout is not a refusal): what this
                // process remembers of the key can no longer be trusted, so duplicates
                // ask Redis again instead of being told "in progress" from memory.
                self.events.local.forget(key);
                return Err(e);
            }
        };
        match replaced {
            1 => self.events.local.written(key, owner, record),
            // Not (or no longer) ours: whatever this process remembers of it is stale.
            _ => self.events.local.forget(key),
        }
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
        let mut link = self.conn.link();
        let script = &self.scripts.release_if_owner;
        let store_key = self.layout.store_key(key);
        let channel = self.layout.channel(key);
        let args = |cmd: &mut Cmd| {
            cmd.arg(&owner.hex()[..]).arg(&*channel).arg(&key.hex()[..]);
        };
        let released = self
            .bounded(&self.conn, eval(&mut link, script, &store_key, None, args))
            .await;
        // Forgotten whatever the answer: even a timed-out release may have landed.
        self.events.local.forget(key);
        let released: i64 = released?;
        if released == 1 {
            self.events.watchers.notify(key);
        }
        Ok(released == 1)
    }

    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let mut link = self.conn.link();
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.layout.store_key(key)[..]);
        let bytes: Option<Vec<u8>> = self.bounded(&self.conn, cmd.query_async(&mut link)).await?;
        bytes.map(|b| decode_owned(b.into())).transpose()
    }

    pub async fn delete(&self, key: &StoreKey) -> Result<bool, StoreError> {
        let mut link = self.conn.link();
        let script = &self.scripts.delete;
        let store_key = self.layout.store_key(key);
        let channel = self.layout.channel(key);
        // The suffix tells every replica to drop what it remembers of the key.
        let mut message = key.hex().to_vec();
        message.extend_from_slice(events::DELETED);
        let args = |cmd: &mut Cmd| {
            cmd.arg(&*channel).arg(&message[..]);
        };
        let deleted: i64 = self
            .bounded(&self.conn, eval(&mut link, script, &store_key, None, args))
            .await?;
        if deleted == 1 {
            self.events.local.forget(key);
            self.events.watchers.notify(key);
        }
        Ok(deleted == 1)
    }

    pub fn watch(&self, key: &StoreKey) -> Watch {
        self.events.watchers.watch(key)
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut link = self.conn.link();
        let ping = redis::cmd("PING");
        self.bounded(&self.conn, ping.query_async::<String>(&mut link))
            .await
            .map(drop)
    }

    /// The server's clock (`TIME`), in unix ms.
    pub async fn clock_ms(&self) -> Result<u64, StoreError> {
        let mut link = self.conn.link();
        let time = redis::cmd("TIME");
        let (secs, micros): (u64, u64) = self
            .bounded(&self.conn, time.query_async(&mut link))
            .await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// `WAIT` for `wait_replicas` acks on the key's node (`command::wait_for_replicas`);
    /// an error a failover explains makes the connection look for the master again.
    async fn wait_for_replicas(&self, link: &mut Link, store_key: &[u8]) -> Result<(), StoreError> {
        let waited =
            command::wait_for_replicas(link, store_key, self.wait_replicas, self.op_timeout);
        waited.await.map_err(|(error, cause)| {
            if let Some(cause) = cause {
                self.wait_conn.suspect(&cause);
            }
            error
        })
    }

    /// Bounds a Redis call by `op_timeout` and maps its errors; an error a failover
    /// explains makes `conn` look for the master again at once.
    async fn bounded<T>(
        &self,
        conn: &Conn,
        op: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match crate::time_bound::bounded(self.op_timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                conn.suspect(&e);
                Err(StoreError::Unavailable(e.to_string()))
            }
            Err(_) => Err(StoreError::Timeout(self.op_timeout)),
        }
    }
}

/// The reservation script's reply (`scripts.rs` `RESERVE`): the store's clock, and the
/// existing record if there is one (a completed record comes alone: its clock is 0).
fn reserved(reply: Value) -> Result<(u64, Option<Vec<u8>>), StoreError> {
    let malformed = || StoreError::Corrupt("unexpected reply to the reservation".to_owned());
    match reply {
        Value::Int(now) => Ok((u64::try_from(now).map_err(|_| malformed())?, None)),
        Value::BulkString(completed) => Ok((0, Some(completed))),
        Value::Array(pair) => {
            let mut pair = pair.into_iter();
            let (Some(now), Some(existing), None) = (pair.next(), pair.next(), pair.next()) else {
                return Err(malformed());
            };
            let now = u64::from_redis_value(now).map_err(|_| malformed())?;
            let existing = Vec::<u8>::from_redis_value(existing).map_err(|_| malformed())?;
            Ok((now, Some(existing)))
        }
        _ => Err(malformed()),
    }
}
