//! Holding a reservation while its upstream call runs: renewal every `lease/3`, and the
//! owner-checked completion or release at the end. A holder whose lease was taken over
//! (it was frozen or too slow) stops renewing and its completion is refused by the
//! store, so it can never overwrite its successor's record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::RequestContext;
use super::decide::retry_after_secs;
use super::outcome::StoreOp;
use super::Worker;
use crate::key::StoreKey;
use crate::store::record::now_ms;
use crate::store::{Record, StoredResponse, Token};

pub struct LeaseHolder {
    /// The request's context: its store round trips are timed and traced there.
    cx: RequestContext,
    key: StoreKey,
    record: Record,
    lease: Duration,
    /// How long the record lives (renewals keep it that long: an attempt outlives its
    /// lease, so an unknown outcome is never forgotten).
    retention: Duration,
    /// False once a renewal found the record taken over.
    owned: bool,
    /// Wake waiting duplicates (every replica) on completion. Only routes with
    /// `on_concurrent: wait` have waiters; for the others the notification (a Redis
    /// `PUBLISH` fanned out to every replica's subscription) would be pure overhead.
    notify: bool,
}

impl LeaseHolder {
    pub fn new(
        cx: RequestContext,
        key: StoreKey,
        record: Record,
        (lease, retention): (Duration, Duration),
        notify: bool,
    ) -> Self {
        LeaseHolder {
            cx,
            key,
            record,
            lease,
            retention,
            owned: true,
            notify,
        }
    }

    /// Seconds until the current lease ends (at least 1).
    pub fn remaining_secs(&self) -> u64 {
        retry_after_secs(&self.record, now_ms())
    }

    async fn renew(&mut self) {
        let record = self.record.renewed(self.lease);
        let store = &self.cx.worker.store;
        let renewal = store.replace_if_owner(
            &self.key,
            &self.record.token,
            &record,
            self.retention,
            false,
        );
        let (result, _) = self.cx.store_op(StoreOp::Renew, renewal).await;
        match result {
            Ok(true) => {
                self.record = record;
                self.cx.worker.metrics.lease_renewals.inc();
            }
            Ok(false) => {
                tracing::warn!(key = %self.key, "lease lost to another owner; renewals stop");
                self.owned = false;
            }
            Err(e) => tracing::warn!(key = %self.key, error = %e, "lease renewal failed"),
        }
    }

    /// Delete the reservation (if still ours) so a retry forwards again.
    pub async fn release(&self) {
        let store = &self.cx.worker.store;
        let release = store.release_if_owner(&self.key, &self.record.token);
        let (result, _) = self.cx.store_op(StoreOp::Release, release).await;
        if let Err(e) = result {
            tracing::warn!(key = %self.key, error = %e, "release failed; once its lease ends the attempt counts as an unknown outcome");
        }
    }

    /// Store the outcome, if we still own the key. A store failure here does not hold
    /// up the caller: the write is retried in the background until the lease would
    /// have ended, and meanwhile the in-progress record keeps repeats out.
    pub async fn complete(&self, response: StoredResponse, retention: Duration) {
        let record = self.record.completed(response, retention);
        let write = self.write_completion(&record, retention);
        let (result, _) = self.cx.store_op(StoreOp::Complete, write).await;
        match result {
            Ok(true) => {}
            Ok(false) => self.stale(),
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "completion write failed; retrying");
                let retry = LeaseHolder {
                    cx: self.cx.clone(),
                    key: self.key,
                    record: self.record.clone(),
                    lease: self.lease,
                    retention: self.retention,
                    owned: self.owned,
                    notify: self.notify,
                };
                self.cx
                    .worker
                    .tasks
                    .spawn(async move { retry.retry_completion(record, retention).await });
            }
        }
    }

    async fn write_completion(
        &self,
        record: &Record,
        retention: Duration,
    ) -> Result<bool, crate::store::StoreError> {
        self.cx
            .worker
            .store
            .replace_if_owner(
                &self.key,
                &self.record.token,
                record,
                retention,
                self.notify,
            )
            .await
    }

    /// Retry until the reservation's lease really ends (its last renewal + `lease`):
    /// until then no repeat can take the key, so a late write still lands; after it a
    /// repeat may, and the write would be refused anyway. The backoff stays short so the
    /// write lands soon after the store returns and no attempt overshoots the lease.
    async fn retry_completion(self, record: Record, retention: Duration) {
        let deadline = Instant::now() + self.record.remaining();
        let mut backoff = Duration::from_millis(50);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            tokio::time::sleep(backoff.min(left)).await;
            match self.write_completion(&record, retention).await {
                Ok(true) => return,
                Ok(false) => return self.stale(),
                Err(_) => backoff = (backoff * 2).min(Duration::from_millis(250)),
            }
        }
        tracing::error!(
            key = %self.key,
            "outcome could not be recorded before the lease ended; a repeat finds an unknown \
             outcome and gets what the route's on_unknown says"
        );
    }

    fn stale(&self) {
        self.cx.worker.metrics.stale_completions.inc();
        tracing::warn!(key = %self.key, "completion refused: the lease was taken over by another owner");
    }
}

/// Run `work` while renewing the lease every `lease/3`; return the holder and the output.
///
/// `work` is pinned by the caller and borrowed: taking it by value would store the
/// (large) exchange future twice in this future's state, and copy it on every call.
pub async fn renewing<F: Future>(
    mut holder: LeaseHolder,
    mut work: Pin<&mut F>,
) -> (LeaseHolder, F::Output) {
    let period = (holder.lease / 3).max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            output = work.as_mut() => return (holder, output),
            _ = ticker.tick(), if holder.owned => holder.renew().await,
        }
    }
}

/// Orphan releases pending at once; past this, an orphan just expires with its lease.
const MAX_PENDING_ORPHANS: usize = 1_000;

/// A reservation whose `SET` timed out (a frozen, partitioned or slow Redis) may still
/// be applied when the store answers again. Nobody owns it then: the request was refused
/// and nothing was executed, yet repeats would get 409 `request_in_progress` until the
/// lease ends. Delete it — owner-checked, so only this request's own reservation — in
/// the background, until it is gone or would have expired anyway.
///
/// A `0` ("not ours / absent") may come before a late `SET` on another connection, so
/// the release is only trusted after two such answers at least 500 ms apart.
pub fn release_orphan(worker: &Arc<Worker>, key: StoreKey, token: Token, lease: Duration) {
    use std::sync::atomic::Ordering;
    if worker.orphans.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING_ORPHANS {
        worker.orphans.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let worker = worker.clone();
    tokio::spawn(async move {
        let deadline = Instant::now() + lease;
        let mut backoff = Duration::from_millis(100);
        let mut absent_since: Option<Instant> = None;
        while Instant::now() + backoff < deadline {
            tokio::time::sleep(backoff).await;
            match worker.store.release_if_owner(&key, &token).await {
                Ok(true) => {
                    tracing::info!(key = %key, "released a reservation applied after its timeout");
                    break;
                }
                Ok(false) => match absent_since {
                    Some(t) if t.elapsed() >= Duration::from_millis(500) => break,
                    Some(_) => {}
                    None => absent_since = Some(Instant::now()),
                },
                // Short backoff: the orphan appears the moment the store answers again.
                Err(_) => backoff = (backoff * 2).min(Duration::from_millis(500)),
            }
        }
        worker.orphans.fetch_sub(1, Ordering::Relaxed);
    });
}
