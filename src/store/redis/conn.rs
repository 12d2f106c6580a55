//! The command connection: a multiplexed `ConnectionManager`, plus a health loop that
//! keeps it connected when no request is flowing.
//!
//! `ConnectionManager` reconnects by itself, but only when a command fails with a
//! dropped connection, and it gives up for good after a handshake error that is not an
//! I/O error (e.g. `LOADING` while Redis restarts, or an ACL change). So:
//! - the manager is created *lazily*: idem starts even when Redis is down;
//! - the health loop PINGs it every second (every 250 ms while failing), which both
//!   triggers the manager's reconnect without traffic and notices recovery;
//! - after [`REPLACE_AFTER`] consecutive failed PINGs the manager is replaced by a fresh
//!   one, which also covers half-open TCP connections that never report an error.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Client;
use tokio::time::{sleep, timeout};

use crate::store::StoreError;

const HEALTHY_INTERVAL: Duration = Duration::from_secs(1);
const FAILING_INTERVAL: Duration = Duration::from_millis(250);
/// Consecutive failed health PINGs before the manager is thrown away and rebuilt.
const REPLACE_AFTER: u32 = 8;

/// A replaceable handle to one multiplexed connection.
pub(super) struct Conn {
    client: Client,
    config: ConnectionManagerConfig,
    /// Read on every operation (a cheap `Arc` clone), written only by the health loop.
    current: RwLock<ConnectionManager>,
}

impl Conn {
    pub(super) fn new(client: Client, op_timeout: Duration) -> Result<Conn, StoreError> {
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
        let manager = lazy(&client, &config)?;
        Ok(Conn {
            client,
            config,
            current: RwLock::new(manager),
        })
    }

    /// The current manager (clones share the connection).
    pub(super) fn manager(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn replace(&self) -> Result<(), StoreError> {
        let fresh = lazy(&self.client, &self.config)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    async fn ping(&self, op_timeout: Duration) -> Result<(), String> {
        let mut manager = self.manager();
        let ping = redis::cmd("PING");
        match timeout(op_timeout, ping.query_async::<String>(&mut manager)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no PONG within {op_timeout:?}")),
        }
    }
}

fn lazy(
    client: &Client,
    config: &ConnectionManagerConfig,
) -> Result<ConnectionManager, StoreError> {
    ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
        .map_err(|e| StoreError::Unavailable(format!("redis connection setup: {e}")))
}

/// Keeps every connection in `conns` alive; runs until aborted by the store's guard.
pub(super) async fn health(conns: Vec<Arc<Conn>>, op_timeout: Duration) {
    let mut failures = vec![0u32; conns.len()];
    loop {
        for (conn, failures) in conns.iter().zip(failures.iter_mut()) {
            match conn.ping(op_timeout).await {
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
                        tracing::debug!("replacing the redis connection manager");
                        if let Err(e) = conn.replace() {
                            tracing::warn!(error = %e, "cannot rebuild the redis connection");
                        }
                    }
                }
            }
        }
        let failing = failures.iter().any(|&f| f > 0);
        sleep(if failing {
            FAILING_INTERVAL
        } else {
            HEALTHY_INTERVAL
        })
        .await;
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
