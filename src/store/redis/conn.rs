//! The command connection: one multiplexed link per mode (a `ConnectionManager` to the
//! server or the sentinels' current master, or a `ClusterConnection`), plus a health
//! loop that keeps it connected when no request is flowing.
//!
//! `ConnectionManager` reconnects by itself, but only when a command fails with a
//! dropped connection, and it gives up for good after a handshake error that is not an
//! I/O error (e.g. `LOADING` while Redis restarts, or an ACL change). So:
//! - the link is created *lazily*: idem starts even when Redis is down;
//! - the health loop PINGs it every second (every 250 ms while failing), which both
//!   triggers the reconnect without traffic and notices recovery;
//! - after [`REPLACE_AFTER`] consecutive failed PINGs the link is replaced by a fresh
//!   one, which also covers half-open TCP connections that never report an error;
//! - in Sentinel mode every tick first asks the sentinels where the master is and moves
//!   the link when it changed (`sentinel.rs`); a store operation that failed in a way a
//!   failover explains ([`Conn::suspect`]), or a switch the sentinels announce
//!   (`switch.rs`), wakes the loop at once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::Notify;
use tokio::time::{sleep, timeout};

use super::subscriber::announced;
use super::switch::{Master, Switches};
use super::target::Target;
use crate::store::StoreError;

const HEALTHY_INTERVAL: Duration = Duration::from_secs(1);
/// Test-only: the healthy interval in milliseconds, instead of [`HEALTHY_INTERVAL`]. Not
/// a setting (nothing documents it for operators): `tests/stores/redis_scale_out.rs` sets it
/// very long so that no tick can move idem to a new Sentinel master before the
/// sentinels' announcement does, and a move is then the announcement's.
const HEALTHY_INTERVAL_ENV: &str = "IDEM_TEST_REDIS_HEALTH_INTERVAL_MS";
const FAILING_INTERVAL: Duration = Duration::from_millis(250);
/// Consecutive failed health PINGs before the link is thrown away and rebuilt.
const REPLACE_AFTER: u32 = 8;

/// One multiplexed connection of whichever mode; clones share it.
#[derive(Clone)]
pub(super) enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// Sentinel mode before any sentinel named the master.
    Down,
}

/// A replaceable handle to one [`Link`].
pub(super) struct Conn {
    target: Target,
    config: ConnectionManagerConfig,
    op_timeout: Duration,
    /// Read on every operation (a cheap clone), written only by the health loop.
    current: RwLock<(Link, Option<(String, u16)>)>,
    /// Wakes the health loop early (shared by every `Conn` of one store).
    suspect: Arc<Notify>,
}

impl Conn {
    pub(super) fn new(
        target: Target,
        op_timeout: Duration,
        suspect: Arc<Notify>,
    ) -> Result<Conn, StoreError> {
        let config = ConnectionManagerConfig::new()
            // Operations are bounded by `op_timeout` in `RedisStore`; a response timeout
            // here would only duplicate it (and does not trigger a reconnect).
            .set_response_timeout(None)
            .set_connection_timeout(Some(op_timeout.max(Duration::from_secs(1))))
            // Few, short retries inside one reconnect: operations fail fast with
            // `Unavailable` during an outage, and the health loop keeps retrying.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let conn = Conn {
            target,
            config,
            op_timeout,
            current: RwLock::new((Link::Down, None)),
            suspect,
        };
        let link = conn.fresh(None)?;
        *conn.current.write().unwrap_or_else(|e| e.into_inner()) = (link, None);
        Ok(conn)
    }

    /// The current link (clones share the connection).
    pub(super) fn link(&self) -> Link {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// An operation failed in a way a master failover explains (connection lost,
    /// `READONLY`): check where the master is now rather than at the next tick.
    pub(super) fn suspect(&self, e: &RedisError) {
        let moved = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
        if moved && matches!(self.target, Target::Sentinel(_)) {
            self.suspect.notify_one();
        }
    }

    /// A new lazy link; in Sentinel mode to `master` (or `Down` if none is known).
    fn fresh(&self, master: Option<&(String, u16)>) -> Result<Link, StoreError> {
        let manager = |client: &redis::Client| {
            ConnectionManager::new_lazy_with_config(client.clone(), self.config.clone())
                .map(Link::Single)
                .map_err(|e| StoreError::Unavailable(format!("redis connection setup: {e}")))
        };
        match (&self.target, master) {
            (Target::Standalone(client), _) => manager(client),
            (Target::Cluster(client), _) => {
                let config = ClusterConfig::new()
                    .set_connection_timeout(self.op_timeout.max(Duration::from_secs(1)));
                Ok(Link::Cluster(
                    client.get_pending_async_connection_with_config(config),
                ))
            }
            (Target::Sentinel(sentinels), Some((host, port))) => {
                manager(&sentinels.master_client(host, *port)?)
            }
            (Target::Sentinel(_), None) => Ok(Link::Down),
        }
    }

    fn replace(&self) -> Result<(), StoreError> {
        let master = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone();
        let link = self.fresh(master.as_ref())?;
        self.current.write().unwrap_or_else(|e| e.into_inner()).0 = link;
        Ok(())
    }

    /// Sentinel mode: move the link if the sentinels name another master (after an
    /// `announced` switch, preferring a sentinel that already names that one).
    pub(super) async fn follow_master(&self, announced: Option<&Master>) -> Result<(), String> {
        let Target::Sentinel(sentinels) = &self.target else {
            return Ok(());
        };
        let addr = sentinels
            .master_addr(announced)
            .await
            .map_err(|e| e.to_string())?;
        let known = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone();
        if known.as_ref() == Some(&addr) {
            if announced.is_some() {
                // A health tick got there first (it asks the sentinels every second).
                tracing::info!(host = %addr.0, port = addr.1,
                    "the announced redis master is the one already followed");
            }
            return Ok(());
        }
        let link = self.fresh(Some(&addr)).map_err(|e| e.to_string())?;
        // `announced`: moved on the sentinels' `+switch-master`, not at a health tick.
        tracing::info!(host = %addr.0, port = addr.1, previous = ?known.map(|k| k.1),
            announced = announced.is_some(), "following the redis master named by the sentinels");
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (link, Some(addr));
        Ok(())
    }

    async fn ping(&self, announced: Option<&Master>) -> Result<(), String> {
        self.follow_master(announced).await?;
        let mut link = self.link();
        let ping = redis::cmd("PING");
        match timeout(self.op_timeout, ping.query_async::<String>(&mut link)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no PONG within {:?}", self.op_timeout)),
        }
    }
}

// === impl Link ===

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
            Link::Down => Box::pin(async { Err(no_master()) }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Down => Box::pin(async { Err(no_master()) }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
            Link::Down => 0,
        }
    }
}

fn no_master() -> RedisError {
    RedisError::from((
        ErrorKind::Io,
        "no redis master known yet (asking the sentinels)",
    ))
}

/// Keeps every connection in `conns` alive; runs until aborted by the store's guard.
/// Sentinel mode: a tick comes early on a suspect error or an announced switch.
pub(super) async fn health(
    conns: Vec<Arc<Conn>>,
    suspect: Arc<Notify>,
    mut switches: Option<Switches>,
) {
    let healthy_interval = std::env::var(HEALTHY_INTERVAL_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(HEALTHY_INTERVAL, Duration::from_millis);
    let mut failures = vec![0u32; conns.len()];
    let mut switched = None;
    loop {
        for (conn, failures) in conns.iter().zip(failures.iter_mut()) {
            match conn.ping(switched.as_ref()).await {
                Ok(()) if *failures > 0 => {
                    tracing::info!(after_failed_pings = *failures, "redis reachable again");
                    *failures = 0;
                }
                Ok(()) => {}
                Err(e) => {
                    *failures += 1;
                    if *failures == 1 {
                        tracing::warn!(error = %e, "redis unreachable; reconnecting in the background");
                    }
                    if *failures % REPLACE_AFTER == 0 {
                        tracing::debug!("replacing the redis connection");
                        if let Err(e) = conn.replace() {
                            tracing::warn!(error = %e, "cannot rebuild the redis connection");
                        }
                    }
                }
            }
        }
        let failing = failures.iter().any(|&f| f > 0);
        let pause = if failing {
            FAILING_INTERVAL
        } else {
            healthy_interval
        };
        switched = None;
        tokio::select! {
            _ = sleep(pause) => {}
            _ = suspect.notified() => {}
            master = announced(&mut switches) => switched = Some(master),
        }
    }
}

/// Keeps a timer due within `op_timeout / 2` pending on the current runtime, until
/// aborted by the store's guard.
///
/// Why: tokio wakes its I/O driver (a `write` to an eventfd, and one more turn of the
/// event loop) whenever a task registers a timer that is due before every timer the
/// driver last saw — even from the driver's own thread. Every operation is bounded by
/// `op_timeout`, and the other timers a worker has pending (upstream timeout, lease
/// renewal, the health loop) are further away, so the first operation after each turn
/// of the loop paid that syscall: about one per four requests under load. With this
/// tick pending, a new operation's timeout is never the earliest.
pub(super) async fn keep_a_timer_near(op_timeout: Duration) {
    let period = (op_timeout / 2).clamp(Duration::from_millis(5), Duration::from_millis(500));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}
