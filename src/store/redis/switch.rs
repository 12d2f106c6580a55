//! Sentinel mode: hearing a failover as the sentinels announce it.
//!
//! The command connections ask the sentinels where the master is every second, and at
//! once after an error a failover explains (`conn.rs`). Between the two a switch can go
//! unnoticed for up to a second, e.g. while no request flows or when the old master is
//! still up and answers. So one task per process also subscribes to `+switch-master` on
//! one sentinel at a time (the next one after any loss) and publishes the new address
//! when our master is announced; the health loops and the event subscription watch it
//! and ask the sentinels again at once, taking the answer of a sentinel that already
//! names the announced master (the others learn of the switch a moment later). The poll
//! stays as the fallback: a sentinel that is down or partitioned announces nothing.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSub;
use tokio::sync::watch;
use tokio::time::{sleep, timeout};

use super::events::{MAX_BACKOFF, MIN_BACKOFF, PING_INTERVAL};
use super::sentinel::Sentinels;

const CHANNEL: &str = "+switch-master";

/// The master the sentinels announced last (receivers watch for a change).
pub(super) type Switches = watch::Receiver<Option<Master>>;
pub(super) type Master = (String, u16);

/// Listens for `+switch-master` until the store's guard aborts the task.
pub(super) async fn announce(sentinels: Arc<Sentinels>, switched: watch::Sender<Option<Master>>) {
    let bound = sentinels.op_timeout();
    let mut next = 0;
    let mut backoff = MIN_BACKOFF;
    loop {
        let i = next % sentinels.len().max(1);
        next += 1;
        match timeout(bound, subscribe(&sentinels, i)).await {
            Ok(Ok(pubsub)) => {
                backoff = MIN_BACKOFF;
                tracing::debug!(sentinel = i, "listening for +switch-master");
                listen(pubsub, &sentinels, &switched, bound).await;
            }
            Ok(Err(e)) => {
                tracing::debug!(sentinel = i, error = %e, "cannot subscribe to +switch-master")
            }
            Err(_) => tracing::debug!(sentinel = i, "subscribing to +switch-master timed out"),
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn subscribe(sentinels: &Sentinels, i: usize) -> Result<PubSub, String> {
    let client = sentinels.client(i).ok_or("no sentinel configured")?;
    let mut pubsub = client.get_async_pubsub().await.map_err(|e| e.to_string())?;
    pubsub.subscribe(CHANNEL).await.map_err(|e| e.to_string())?;
    Ok(pubsub)
}

/// Returns when the sentinel's connection is lost or stops answering PINGs.
async fn listen(
    pubsub: PubSub,
    sentinels: &Sentinels,
    switched: &watch::Sender<Option<Master>>,
    bound: Duration,
) {
    let (mut sink, mut stream) = pubsub.split();
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.tick().await; // the first tick is immediate
    loop {
        tokio::select! {
            msg = stream.next() => match msg {
                Some(msg) => {
                    // `<master name> <old ip> <old port> <new ip> <new port>`
                    let payload = String::from_utf8_lossy(msg.get_payload_bytes());
                    if let Some(master) = ours(&payload, sentinels.master_name()) {
                        tracing::info!(announced = %payload, "the sentinels switched the redis master");
                        switched.send_replace(Some(master));
                    }
                }
                None => return,
            },
            _ = ping.tick() => {
                let pong = sink.ping::<redis::Value>();
                if !matches!(timeout(bound, pong).await, Ok(Ok(_))) {
                    return;
                }
            }
        }
    }
}

/// The new address in a `+switch-master` payload about the master named `name`.
fn ours(payload: &str, name: &str) -> Option<Master> {
    let parts: Vec<&str> = payload.split(' ').collect();
    match parts[..] {
        [master, _, _, host, port] if master == name => {
            Some((host.to_string(), port.parse().ok()?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::ours;

    #[test]
    fn only_our_master_counts() {
        let new = Some(("10.0.0.2".to_string(), 6380));
        assert_eq!(
            ours("mymaster 10.0.0.1 6379 10.0.0.2 6380", "mymaster"),
            new
        );
        assert_eq!(ours("other 10.0.0.1 6379 10.0.0.2 6380", "mymaster"), None);
        assert_eq!(
            ours("mymaster2 10.0.0.1 6379 10.0.0.2 6380", "mymaster"),
            None
        );
        assert_eq!(ours("mymaster 10.0.0.1 6379 10.0.0.2", "mymaster"), None);
    }
}
