//! Holding a reservation while its upstream call runs: renewal every `lease/3`, and the
//! owner-checked completion or release at the end. A holder whose lease was taken over
//! (it was frozen or too slow) stops renewing and its completion is refused by the
//! store, so it can never overwrite its successor's record.
//!
//! The holder keeps the call's [`SendGate`]: each acknowledged renewal moves the lease's
//! end on this process's monotonic clock, and a renewal that finds the lease lost closes
//! it, so a request not yet written is never sent (SPEC §1 "What the code enforces").

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::RequestContext;
use super::Worker;
use crate::key::StoreKey;
use crate::store::{Record, StoredResponse, Token};
use crate::upstream::SendGate;
use crate::vocabulary::StoreOp;

pub struct LeaseHolder {
    /// The request's context: its store round trips are timed and traced there.
    cx: RequestContext,
    key: StoreKey,
    record: Record,
    lease: Duration,
    /// How long the record lives (renewals keep it that long: an attempt outlives its
    /// lease, so an unknown outcome is never forgotten).
    retention: Duration,
    /// The reservation replaced a record (see [`Record::has_history`]): if the call is
    /// never sent, its lease ends instead of the record being deleted.
    history: bool,
    /// When the lease ends at the latest, on this process's monotonic clock: measured
    /// from before the write that set it, so it errs early against the store's clock,
    /// which is the one that judges it. The exchange asks it before sending.
    gate: SendGate,
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
        asked: Instant,
    ) -> Self {
        let history = record.has_history();
        LeaseHolder {
            history,
            cx,
            key,
            record,
            lease,
            retention,
            gate: match history {
                false => SendGate::new(asked, lease),
                true => SendGate::fixed(asked, lease),
            },
            notify,
        }
    }

    /// The call's send guard, for the exchange.
    pub fn gate(&self) -> &SendGate {
        &self.gate
    }

    /// Seconds until the current lease ends (at least 1).
    pub fn remaining_secs(&self) -> u64 {
        let left = self.gate.until().saturating_duration_since(Instant::now());
        left.as_millis().div_ceil(1000).max(1) as u64
    }

    /// Renew the lease; `false` when the store could not be reached (try again soon).
    async fn renew(&mut self) -> bool {
        let record = self.record.renewed(self.lease);
        let sent = Instant::now();
        // Tests stop an owner here: a renewal asked for, not yet acknowledged.
        crate::pause!("owner_renewing");
        let store = &self.cx.worker.store;
        let renewal = store.renew(&self.key, &self.record.token, &record, self.retention);
        let (result, _) = self.cx.store_op(StoreOp::Renew, renewal).await;
        match result {
            Ok(true) => {
                self.record = record;
                self.gate.renewed(sent, self.lease);
                self.cx.worker.metrics.lease_renewals.inc();
                true
            }
            Ok(false) => {
                // A request not yet written is never sent now.
                self.gate.lose();
                match self.refused_because().await {
                    Refused::Vanished => self.vanished("renewal"),
                    _ => {
                        let why = "lease ended (a pause longer than the lease?) or taken over; renewals stop, a request not yet written is not sent, and the outcome is stored only if no one took it over";
                        tracing::warn!(key = %self.key, "{why}");
                    }
                }
                true
            }
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "lease renewal failed");
                false
            }
        }
    }

    /// The call was never sent: delete the reservation (if still ours) so a retry
    /// forwards again — or, when it replaced a record with history, end its lease now,
    /// so the record keeps when its key was first sent (the next repeat settles it as
    /// the route's `on_unknown` says).
    pub async fn release(&self) {
        let store = &self.cx.worker.store;
        let (key, token) = (&self.key, &self.record.token);
        let release = async {
            match self.history {
                false => store.release_if_owner(key, token).await,
                true => {
                    let ended = self.record.lease_ended_now();
                    store
                        .replace_if_owner(key, token, &ended, self.retention, true)
                        .await
                }
            }
        };
        let (result, _) = self.cx.store_op(StoreOp::Release, release).await;
        if let Err(e) = result {
            tracing::warn!(key = %self.key, error = %e, "release failed; once its lease ends the attempt counts as an unknown outcome");
        }
    }

    /// Store the outcome, if we still own the key. A store failure here does not hold
    /// up the caller: the write is retried in the background for as long as the record
    /// still carries our token, and meanwhile the in-progress record keeps repeats out.
    pub async fn complete(&self, response: StoredResponse, retention: Duration) {
        // In clear: the store seals what it writes (`store/sealing.rs`).
        let record = self.record.completed(response, retention);
        let write = self.write_completion(&record, retention);
        let (result, _) = self.cx.store_op(StoreOp::Complete, write).await;
        match result {
            Ok(true) => {}
            Ok(false) => self.stale().await,
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "completion write failed; retrying");
                let retry = LeaseHolder {
                    cx: self.cx.clone(),
                    key: self.key,
                    record: self.record.clone(),
                    lease: self.lease,
                    retention: self.retention,
                    history: self.history,
                    gate: self.gate.clone(),
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

    /// Retry for as long as the record still carries our token — not only until the
    /// lease ends. The store refuses the write (`Ok(false)`) once a repeat has taken the
    /// unknown outcome over, or the record is gone; until then the outcome this process
    /// holds is the truth, and recording it late beats leaving it unknown (or having it
    /// forwarded again under `on_unknown: retry`). Bounded by the record's retention,
    /// after which it no longer exists. The backoff stays short, so the write lands soon
    /// after the store returns.
    async fn retry_completion(self, record: Record, retention: Duration) {
        let deadline = Instant::now() + self.retention;
        let mut backoff = Duration::from_millis(50);
        let mut warned = false;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            tokio::time::sleep(backoff.min(left)).await;
            match self.write_completion(&record, retention).await {
                Ok(true) => {
                    if warned {
                        tracing::info!(key = %self.key, "outcome recorded after the lease ended");
                    }
                    return;
                }
                Ok(false) => return self.stale().await,
                Err(_) => backoff = (backoff * 2).min(Duration::from_millis(1_000)),
            }
            if !warned && Instant::now() >= self.gate.until() {
                warned = true;
                tracing::warn!(key = %self.key, "outcome not recorded yet and the lease has ended; still retrying while the record is ours");
            }
        }
        tracing::error!(
            key = %self.key,
            "outcome could not be recorded within the record's retention"
        );
    }

    /// The store refused our completion: someone took the attempt over or settled it,
    /// or the record vanished (never reported as a takeover).
    async fn stale(&self) {
        match self.refused_because().await {
            Refused::Vanished => self.vanished("completion"),
            Refused::Other => {
                self.cx.worker.metrics.stale_completions.inc();
                tracing::warn!(key = %self.key, "completion refused: the lease was taken over by another owner, or the attempt settled");
            }
        }
    }

    /// Why the store refused a fenced write of ours: one more read, only on this rare
    /// path. A record under another token was taken over or settled; none at all
    /// vanished (a record deleted by an operator counts here too).
    async fn refused_because(&self) -> Refused {
        match self.cx.worker.store.get(&self.key).await {
            Ok(None) => Refused::Vanished,
            _ => Refused::Other,
        }
    }

    fn vanished(&self, write: &str) {
        self.cx.worker.metrics.guards.records_vanished.inc();
        tracing::error!(
            key = %self.key,
            write,
            "the record vanished while its call ran (evicted by Redis, or deleted): a repeat \
             can now run the call again. Set maxmemory-policy noeviction on every Redis master"
        );
    }
}

/// Why a fenced write of the owner was refused.
enum Refused {
    /// No record at all under the key.
    Vanished,
    /// Another owner's record, an ended lease, or the store did not answer.
    Other,
}

/// Run `work` while renewing the lease every `lease/3`; return its output.
///
/// `work` is pinned by the caller and the holder borrowed: taken by value, each would be
/// copied into this future's state and the holder copied out again with the output.
pub async fn renewing<F: Future>(holder: &mut LeaseHolder, mut work: Pin<&mut F>) -> F::Output {
    let period = (holder.lease / 3).max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut backoff = RENEW_RETRY_FIRST;
    loop {
        tokio::select! {
            output = work.as_mut() => return output,
            _ = ticker.tick(), if !holder.gate.is_lost() => {
                if holder.renew().await {
                    backoff = RENEW_RETRY_FIRST;
                } else {
                    // A store blip must not cost a third of the lease: try again soon,
                    // so the lease survives outages up to nearly its whole length.
                    ticker.reset_after(backoff.min(period));
                    backoff = (backoff * 2).min(RENEW_RETRY_MAX);
                }
            }
        }
    }
}

/// The first retry of a renewal the store did not answer, doubling up to
/// [`RENEW_RETRY_MAX`] (and never later than the regular period).
const RENEW_RETRY_FIRST: Duration = Duration::from_millis(50);
const RENEW_RETRY_MAX: Duration = Duration::from_millis(400);

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
