//! The pub/sub subscription that feeds a process's [`Watchers`]: one per process, shared
//! by every worker's `RedisStore` through [`RedisEvents`], so a completion reaches each
//! replica once rather than once per worker thread.
//!
//! Completions, releases and deletes `PUBLISH` the hex store key on
//! `{key_prefix}events` from inside the same Lua script that writes, so every replica
//! learns of a change within one network hop — no polling, and no waiter ever holds a
//! command connection (the "waiters starve the writer" bug). In Sentinel mode the
//! subscription asks the sentinels for the master each time it (re)connects; in cluster
//! mode wake-ups are sharded (`keys.rs`) and `sharded.rs` subscribes instead.
//!
//! The subscription uses its own connection (`client.get_async_pubsub()`, which works
//! with RESP2 and RESP3 alike) in a reconnect loop rather than RESP3 pushes on the
//! command `ConnectionManager`: the loop knows exactly when it is (re)subscribed, and
//! at that moment it wakes *every* watcher, because anything published while it was not
//! subscribed is lost and waiters must re-read. A periodic PING on the subscription
//! detects a connection that died silently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSub;
use redis::Msg;
use tokio::sync::watch;
use tokio::time::{sleep, timeout};

use super::super::task::AbortOnDrop;
use super::events::{dispatch, log_failure, MAX_BACKOFF, MIN_BACKOFF, PING_INTERVAL};
use super::keys::Layout;
use super::local::Local;
use super::switch::{Master, Switches};
use super::target::Target;
use crate::store::Watchers;

/// Sentinel mode: how often the subscription checks it is still on the master.
const MASTER_CHECK: Duration = Duration::from_secs(1);

/// The shared half of every `RedisStore` handle of one process: the event channel's
/// name, the watchers its messages wake, and the subscription task feeding them, which
/// stops when the last handle drops.
#[derive(Clone)]
pub struct RedisEvents {
    pub(super) layout: Layout,
    pub(super) watchers: Watchers,
    /// What this process knows of keys without asking Redis (`local.rs`).
    pub(super) local: Local,
    /// Set while the subscription is up (exposed as `RedisStore::is_subscribed`).
    pub(super) subscribed: Arc<AtomicBool>,
    /// Sentinel mode: bumped when the sentinels announce a new master (`switch.rs`).
    pub(super) switches: Option<Switches>,
    _tasks: Arc<[Option<AbortOnDrop>; 2]>,
}

impl RedisEvents {
    /// Starts the subscription on the current runtime. It connects (and reconnects) in
    /// the background, so this succeeds while Redis is down.
    pub(super) fn start(
        target: Target,
        sharded: Option<redis::cluster::ClusterClientBuilder>,
        layout: Layout,
        op_timeout: Duration,
    ) -> RedisEvents {
        let watchers = Watchers::new();
        let local = Local::default();
        let subscribed = Arc::new(AtomicBool::new(false));
        let timeout = op_timeout.max(Duration::from_secs(1));
        let (switches, announcer) = match &target {
            Target::Sentinel(sentinels) => {
                let (tx, rx) = watch::channel(None);
                let task = tokio::spawn(super::switch::announce(sentinels.clone(), tx));
                (Some(rx), Some(AbortOnDrop(task)))
            }
            _ => (None, None),
        };
        let task = match sharded {
            Some(builder) => tokio::spawn(super::sharded::run(
                builder,
                layout.all_channels(),
                watchers.clone(),
                local.clone(),
                subscribed.clone(),
                timeout,
            )),
            None => tokio::spawn(
                Subscriber {
                    target,
                    channel: layout.all_channels().remove(0),
                    watchers: watchers.clone(),
                    local: local.clone(),
                    subscribed: subscribed.clone(),
                    switches: switches.clone(),
                    timeout,
                }
                .run(),
            ),
        };
        RedisEvents {
            layout,
            watchers,
            local,
            subscribed,
            switches,
            _tasks: Arc::new([Some(AbortOnDrop(task)), announcer]),
        }
    }
}

/// What the subscriber task needs; everything is shared with the store handles.
struct Subscriber {
    /// Standalone or Sentinel.
    target: Target,
    channel: String,
    watchers: Watchers,
    local: Local,
    subscribed: Arc<AtomicBool>,
    switches: Option<Switches>,
    /// Bound for connecting, subscribing and health PINGs.
    timeout: Duration,
}

impl Subscriber {
    /// Subscribes, dispatches messages, and resubscribes after any loss, until the
    /// store's guard aborts the task.
    async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        let mut failures = 0u32;
        loop {
            match timeout(self.timeout, self.subscribe()).await {
                Ok(Ok((pubsub, master))) => {
                    tracing::debug!(channel = %self.channel, "redis subscription established");
                    backoff = MIN_BACKOFF;
                    failures = 0;
                    self.subscribed.store(true, Ordering::Release);
                    // Anything published while we were not subscribed was missed.
                    self.local.all_changed();
                    self.watchers.notify_all();
                    self.listen(pubsub, master).await;
                    self.subscribed.store(false, Ordering::Release);
                    tracing::warn!(channel = %self.channel, "redis subscription lost; resubscribing");
                }
                Ok(Err(e)) => self.log_failure(&mut failures, &e),
                Err(_) => self.log_failure(&mut failures, "timed out"),
            }
            sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// The subscription, and in Sentinel mode the master it is on.
    async fn subscribe(&self) -> Result<(PubSub, Option<(String, u16)>), String> {
        let (client, master) = match &self.target {
            Target::Standalone(client) => (client.clone(), None),
            Target::Sentinel(sentinels) => {
                let (host, port) = sentinels
                    .master_addr(None)
                    .await
                    .map_err(|e| e.to_string())?;
                let client = sentinels
                    .master_client(&host, port)
                    .map_err(|e| e.to_string())?;
                (client, Some((host, port)))
            }
            Target::Cluster(_) => return Err("cluster mode subscribes per shard".into()),
        };
        let mut pubsub = client.get_async_pubsub().await.map_err(|e| e.to_string())?;
        pubsub
            .subscribe(&self.channel)
            .await
            .map_err(|e| e.to_string())?;
        Ok((pubsub, master))
    }

    /// Returns when the connection is lost or stops answering PINGs, or (Sentinel mode)
    /// when the sentinels name another master: a deposed master that is still up does
    /// not see what is published on the new one until Sentinel reconfigures it.
    async fn listen(&self, pubsub: PubSub, master: Option<(String, u16)>) {
        let (mut sink, mut stream) = pubsub.split();
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.tick().await; // the first tick is immediate
        let mut check = tokio::time::interval(MASTER_CHECK);
        check.tick().await;
        let mut switches = self.switches.clone();
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => self.dispatch(&msg),
                    None => return,
                },
                _ = ping.tick() => {
                    let pong = sink.ping::<redis::Value>();
                    if !matches!(timeout(self.timeout, pong).await, Ok(Ok(_))) {
                        return;
                    }
                }
                _ = check.tick(), if master.is_some() => {
                    if self.master_moved(&master, None).await {
                        return;
                    }
                }
                new = announced(&mut switches) => {
                    if self.master_moved(&master, Some(&new)).await {
                        return;
                    }
                }
            }
        }
    }

    /// Sentinel mode: whether the sentinels now name a master other than `master`
    /// (preferring a sentinel that names the `announced` one).
    async fn master_moved(
        &self,
        master: &Option<(String, u16)>,
        announced: Option<&Master>,
    ) -> bool {
        let Target::Sentinel(sentinels) = &self.target else {
            return false;
        };
        let named = sentinels.master_addr(announced).await.ok();
        named.is_some() && named != *master
    }

    fn dispatch(&self, msg: &Msg) {
        dispatch(&self.watchers, &self.local, msg.get_payload_bytes());
    }

    fn log_failure(&self, failures: &mut u32, error: &str) {
        log_failure(failures, error);
    }
}

/// The master the sentinels announce next; never resolves without announcements (other
/// modes, or the announcing task gone).
pub(super) async fn announced(switches: &mut Option<Switches>) -> Master {
    if let Some(rx) = switches {
        while rx.changed().await.is_ok() {
            if let Some(master) = rx.borrow_and_update().clone() {
                return master;
            }
        }
        *switches = None;
    }
    std::future::pending().await
}
