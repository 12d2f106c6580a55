//! `LISTEN` on a dedicated connection, feeding the process's [`Watchers`]: one per
//! process, shared by every worker's `PostgresStore` (like Redis's subscriber).
//!
//! Completions, releases and deletes call `pg_notify(channel, hex key)` inside the
//! statement that writes, and PostgreSQL delivers the notification when that statement
//! commits — to every idem process listening, so a waiting duplicate on another replica
//! re-reads at once. Waiters hold no connection meanwhile.
//!
//! The listening connection is outside the pool (a pooled connection could be handed to
//! a request mid-`LISTEN`). It is re-established after any loss — to whichever host of
//! a multi-host URL is now the primary — and at that moment every watcher is woken,
//! since notifications sent while nobody listened are lost. A periodic query detects a
//! connection that died silently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, NoTls, Socket};

use super::target::Target;
use crate::store::task::AbortOnDrop;
use crate::store::Watchers;
use crate::store_key::StoreKey;

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const PING_INTERVAL: Duration = Duration::from_secs(5);

/// The shared half of every `PostgresStore` handle of one process.
#[derive(Clone)]
pub struct PgNotifications {
    pub(super) watchers: Watchers,
    /// Set while `LISTEN` is in effect.
    pub(super) listening: Arc<AtomicBool>,
    _task: Arc<AbortOnDrop>,
}

impl PgNotifications {
    /// Starts listening on `channel` in the background (on the current runtime).
    pub(super) fn start(target: Target, channel: String, op_timeout: Duration) -> PgNotifications {
        let listener = Listener {
            target,
            channel,
            watchers: Watchers::new(),
            listening: Arc::new(AtomicBool::new(false)),
            timeout: op_timeout.max(Duration::from_secs(1)),
        };
        PgNotifications {
            watchers: listener.watchers.clone(),
            listening: listener.listening.clone(),
            _task: Arc::new(AbortOnDrop(tokio::spawn(listener.run()))),
        }
    }
}

struct Listener {
    target: Target,
    channel: String,
    watchers: Watchers,
    listening: Arc<AtomicBool>,
    /// Bound for connecting, `LISTEN` and the health query.
    timeout: Duration,
}

impl Listener {
    async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        let mut failures = 0u32;
        loop {
            let outcome = match self.target.tls.clone() {
                Some(tls) => self.session(tls, &mut backoff).await,
                None => self.session(NoTls, &mut backoff).await,
            };
            self.listening.store(false, Ordering::Release);
            match outcome {
                Ok(()) => {
                    failures = 0;
                    tracing::warn!(channel = %self.channel, "postgres LISTEN connection lost; reconnecting");
                }
                Err(error) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(channel = %self.channel, %error, "cannot LISTEN on postgres; retrying");
                    } else {
                        tracing::debug!(channel = %self.channel, %error, failures, "postgres LISTEN failed");
                    }
                }
            }
            sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One connection's life: connect, `LISTEN`, dispatch until it fails. `Ok` once it
    /// had been listening (the loss is then logged once, not as a failure to connect).
    async fn session<T>(&self, tls: T, backoff: &mut Duration) -> Result<(), String>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
    {
        let connect = self.target.config.connect(tls);
        let (client, mut conn) = match timeout(self.timeout, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("connect timed out".to_string()),
        };
        // The connection object must be polled for anything to happen; it hands
        // notifications over a channel and ends (closing it) when the socket does.
        let (tx, mut notifications) = mpsc::unbounded_channel();
        let _driver = AbortOnDrop(tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
            }
        }));
        let listen = format!("LISTEN {}", self.channel);
        match timeout(self.timeout, client.batch_execute(&listen)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("LISTEN timed out".to_string()),
        }
        tracing::debug!(channel = %self.channel, "postgres LISTEN established");
        *backoff = MIN_BACKOFF;
        self.listening.store(true, Ordering::Release);
        // Anything notified while nobody listened was missed: waiters re-read.
        self.watchers.notify_all();
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.tick().await; // the first tick is immediate
        loop {
            tokio::select! {
                payload = notifications.recv() => match payload {
                    Some(payload) => self.dispatch(&payload),
                    None => return Ok(()),
                },
                _ = ping.tick() => {
                    let alive = timeout(self.timeout, client.simple_query("SELECT 1")).await;
                    if !matches!(alive, Ok(Ok(_))) {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn dispatch(&self, payload: &str) {
        match crate::fast_hex::decode(payload.as_bytes()) {
            Some(key) => self.watchers.notify(&StoreKey(key)),
            None => tracing::debug!(channel = %self.channel, "ignoring malformed notification"),
        }
    }
}
