//! Cluster mode's subscription: the 256 shard channels (`keys.rs`), each `SSUBSCRIBE`d
//! on the node that serves its slot, over one redis-rs `ClusterConnection` in RESP3
//! whose pushes arrive on a channel.
//!
//! redis-rs re-subscribes a shard channel when its slot moves or its node's connection
//! is rebuilt, but only notices either when a command goes through the connection. So
//! after a `Disconnection` push (a node died or failed over) this task keeps sending
//! `SSUBSCRIBE` for every channel (harmless for channels already subscribed) until all
//! succeed, which makes redis-rs refresh the slot map and reconnect; then it wakes every
//! watcher, since messages published meanwhile were missed. A PING every few seconds
//! notices a connection that died silently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::{sleep, timeout};

use super::events::{dispatch, log_failure, MAX_BACKOFF, MIN_BACKOFF, PING_INTERVAL};
use super::local::Local;
use crate::store::Watchers;

/// Subscribes, dispatches shard messages, and re-subscribes after any loss, until the
/// store's guard aborts the task.
pub(super) async fn run(
    builder: ClusterClientBuilder,
    channels: Vec<String>,
    watchers: Watchers,
    local: Local,
    subscribed: Arc<AtomicBool>,
    bound: Duration,
) {
    let (tx, mut pushes) = unbounded_channel::<PushInfo>();
    let client = match builder
        .use_protocol(ProtocolVersion::RESP3)
        .push_sender(tx)
        .build()
    {
        Ok(client) => client,
        Err(e) => return tracing::error!(error = %e, "cannot build the redis cluster subscriber"),
    };
    let mut backoff = MIN_BACKOFF;
    let mut failures = 0u32;
    loop {
        let connected = timeout(bound, client.get_async_connection()).await;
        let mut conn = match connected {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                log_failure(&mut failures, &e.to_string());
                sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Err(_) => {
                log_failure(&mut failures, "cluster connect timed out");
                sleep(backoff).await;
                continue;
            }
        };
        // Subscribed to every channel, or try again; then listen until a node is lost.
        loop {
            match subscribe_all(&mut conn, &channels, bound).await {
                Ok(()) => {
                    // The confirmations of our own SSUBSCRIBEs are not news.
                    while let Ok(push) = pushes.try_recv() {
                        on_message(&push, &watchers, &local);
                    }
                    backoff = MIN_BACKOFF;
                    failures = 0;
                    subscribed.store(true, Ordering::Release);
                    // Anything published while a shard was not subscribed was missed.
                    local.all_changed();
                    watchers.notify_all();
                    listen(&mut conn, &mut pushes, &watchers, &local, bound).await;
                    subscribed.store(false, Ordering::Release);
                    tracing::warn!("redis cluster subscription lost a node; resubscribing");
                }
                Err(e) => log_failure(&mut failures, &e),
            }
            sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

async fn subscribe_all(
    conn: &mut ClusterConnection,
    channels: &[String],
    bound: Duration,
) -> Result<(), String> {
    // One channel per command: each lives in its own slot, possibly on another node.
    for channel in channels {
        match timeout(bound, conn.ssubscribe(channel)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("SSUBSCRIBE {channel}: {e}")),
            Err(_) => return Err(format!("SSUBSCRIBE {channel}: timed out")),
        }
    }
    Ok(())
}

/// Returns when a node's connection was lost or the cluster stops answering PINGs.
async fn listen(
    conn: &mut ClusterConnection,
    pushes: &mut UnboundedReceiver<PushInfo>,
    watchers: &Watchers,
    local: &Local,
    bound: Duration,
) {
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.tick().await; // the first tick is immediate
    loop {
        tokio::select! {
            push = pushes.recv() => match push {
                Some(push @ PushInfo { kind: PushKind::SMessage, .. }) => on_message(&push, watchers, local),
                // redis-rs re-subscribed a channel (slot moved, connection rebuilt):
                // its messages may have been missed meanwhile.
                Some(PushInfo { kind: PushKind::SSubscribe, .. }) => {
                    local.all_changed();
                    watchers.notify_all()
                }
                Some(PushInfo { kind: PushKind::Disconnection | PushKind::SUnsubscribe, .. }) => {
                    return
                }
                Some(_) => {}
                None => return,
            },
            _ = ping.tick() => {
                let ping_cmd = redis::cmd("PING");
                let pong = ping_cmd.query_async::<Value>(conn);
                if !matches!(timeout(bound, pong).await, Ok(Ok(_))) {
                    return;
                }
            }
        }
    }
}

fn on_message(push: &PushInfo, watchers: &Watchers, local: &Local) {
    if push.kind == PushKind::SMessage {
        if let Some(Value::BulkString(payload)) = push.data.get(1) {
            dispatch(watchers, local, payload);
        }
    }
}
