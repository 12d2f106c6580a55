//! The reservation of an intent's key, as named steps (SPEC §1 steps 3–4).
//!
//! [`Flow::reserve`] reads as the SPEC's decision table: admit (the breaker), then look
//! at the store until a look ends the request. Each [`Flow::look`] reserves, reads what
//! is already there, lets the pure [`decide`] say what it means, and takes that one step:
//! forward, replay, refuse, take a failed attempt over, settle an unknown outcome, or
//! wait. Only a wait or a lost race for a takeover looks again. Refusals travel as a
//! [`Refusal`] and are built into an answer in one place (`respond.rs`).

use std::time::Instant;

use super::super::decide::{answer, decide, retry_after_secs, Decision};
use super::super::intent::Intent;
use super::super::lease::release_orphan;
use super::super::refusal::Refusal;
use super::unknown::Settling;
use super::{Flow, Handled};
use crate::policy::{OnConcurrent, RoutePolicy};
use crate::store::config::OnStoreError;
use crate::store::{Record, Reserve, Settled, StoreError, Token, Watch};
use crate::traces::RequestTrace;
use crate::vocabulary::{StoreOp, WokenBy};

/// Where one look at the store leaves the request.
enum Next {
    /// It owns the key with this record: forward the attempt.
    Forward(Record),
    /// Answered from the store (a replay).
    Answer(Handled),
    /// Refused because of the record under the key.
    Refuse(Refusal),
    /// The store could not answer.
    StoreFailed(StoreError),
    /// Look again: a wait ended, or another duplicate moved first.
    LookAgain,
}

/// What the looks of one request share.
struct Looks {
    /// The route waits for a duplicate in progress (`on_concurrent: wait`) until here.
    waits: bool,
    deadline: Instant,
    /// The unknown outcome this request already failed to take over: seen again, it is
    /// another replica's (or a renewed owner's) now, so the request is refused.
    lost: Option<Token>,
}

impl Looks {
    fn new(policy: &RoutePolicy) -> Looks {
        Looks {
            waits: policy.on_concurrent == OnConcurrent::Wait,
            deadline: Instant::now() + policy.wait_timeout,
            lost: None,
        }
    }
}

impl Flow<'_> {
    /// Reserve the intent's key and act on what the store holds.
    pub(super) async fn reserve(mut self, intent: Intent) -> Handled {
        if let Some(breaker) = &self.breaker {
            match breaker.admit() {
                Ok(ticket) => self.ticket = Some(ticket),
                // Open: nothing is reserved or sent; stored intents still answer.
                Err(retry_after) => return Box::pin(self.while_open(intent, retry_after)).await,
            }
        }
        let mut looks = Looks::new(&self.policy);
        loop {
            match self.look(&intent, &mut looks).await {
                Next::Forward(record) => return self.forward(&intent, record).answered().await,
                Next::Answer(handled) => return handled,
                Next::Refuse(refusal) => return self.refuse_because(refusal),
                Next::StoreFailed(e) => return Box::pin(self.store_failed(e)).await,
                Next::LookAgain => {}
            }
        }
    }

    /// One look: reserve, read what is there, decide, and take the step it names.
    async fn look(&mut self, intent: &Intent, looks: &mut Looks) -> Next {
        // Watch before reading, so a completion between the read and the wait is seen.
        let cx = self.cx;
        let mut watch = looks
            .waits
            .then(|| cx.worker.store.watch(&intent.store_key));
        let mut mine = intent.reservation(&self.policy);
        if let Some(trace) = cx.trace() {
            // The in-progress record already names the execution that will answer.
            mine.trace = trace.link().map(Box::new);
        }
        // The lease is judged on the store's clock, read with the record.
        let (existing, store_now) = match self.reserve_once(intent, &mine).await {
            Err(e) => return Next::StoreFailed(e),
            Ok(Reserve::Won) => return Next::Forward(mine),
            Ok(Reserve::Exists(existing, store_now)) => (existing, store_now),
        };
        if let Err(refusal) = self.readable(&existing, &intent.store_key) {
            return Next::Refuse(refusal);
        }
        let now = Instant::now();
        let may_wait = looks.waits && now < looks.deadline;
        let decision = decide(
            &existing,
            intent,
            &mine.token,
            &self.policy,
            may_wait,
            store_now,
        );
        self.trace_decision(&decision, &existing);
        match decision {
            Decision::Won => Next::Forward(mine),
            Decision::Replay { stored, body } => {
                let reconciled = existing.settled == Some(Settled::Reconciled);
                Next::Answer(self.replay(stored, body, reconciled))
            }
            Decision::Refuse(refusal) => Next::Refuse(refusal),
            Decision::NewAttempt => self.new_attempt(intent, &existing).await,
            Decision::Retry => {
                self.settle(intent, &existing, false, store_now, looks)
                    .await
            }
            Decision::Reconcile => self.settle(intent, &existing, true, store_now, looks).await,
            Decision::Wait { nap } => {
                let until = (now + nap).min(looks.deadline);
                self.wait(watch.as_mut(), until).await;
                Next::LookAgain
            }
        }
    }

    /// Ask the store to reserve the key with `mine`. A timeout under `on_store_error:
    /// reject` may have reserved it all the same: that record is released in the
    /// background, so the intent is not locked out for a lease.
    async fn reserve_once(
        &mut self,
        intent: &Intent,
        mine: &Record,
    ) -> Result<Reserve, StoreError> {
        let (cx, retention) = (self.cx, self.policy.retention);
        let reserving = cx.worker.store.reserve(&intent.store_key, mine, retention);
        let reserved = self.timed(StoreOp::Reserve, reserving).await;
        if let Err(StoreError::Timeout(_)) = &reserved {
            if self.on_store_error == OnStoreError::Reject {
                release_orphan(&cx.worker, intent.store_key, mine.token, self.policy.lease);
            }
        }
        reserved
    }

    /// The trace's link to the record that answered or refused this request.
    fn trace_decision(&self, decision: &Decision<'_>, existing: &Record) {
        let Some(trace) = self.cx.trace() else {
            return;
        };
        match decision {
            Decision::Replay { .. } => trace.replays(existing.trace.as_deref(), existing.attempt),
            // Refused because of that record (in progress, or another payload).
            Decision::Refuse(..) => trace.link_to(existing.trace.as_deref(), "refused_by"),
            _ => {}
        }
    }

    /// A stored 4xx under `on_failure: retry`: take the record over for the next attempt
    /// (a compare-and-swap on its token; of several duplicates one wins, the others look
    /// again and find the new attempt).
    async fn new_attempt(&mut self, intent: &Intent, existing: &Record) -> Next {
        let cx = self.cx;
        let mut next = existing.next_attempt(self.policy.lease);
        next.trace = cx.trace().and_then(RequestTrace::link).map(Box::new);
        let store = &cx.worker.store;
        let retention = self.policy.retention;
        let taken =
            store.replace_if_owner(&intent.store_key, &existing.token, &next, retention, false);
        match self.timed(StoreOp::Takeover, taken).await {
            Ok(true) => Next::Forward(next),
            Ok(false) => Next::LookAgain,
            Err(e) => Next::StoreFailed(e),
        }
    }

    /// An unknown outcome the route settles by itself: take it over and forward it
    /// again (`retry`), or ask the upstream's records first (`reconcile`).
    async fn settle(
        &mut self,
        intent: &Intent,
        existing: &Record,
        reconcile: bool,
        store_now: u64,
        looks: &mut Looks,
    ) -> Next {
        if looks.lost == Some(existing.token) {
            let retry_after = retry_after_secs(existing, store_now);
            return Next::Refuse(Refusal::InProgress { retry_after });
        }
        // Boxed: rare paths (a lookup is a whole upstream exchange), kept out of the
        // state every protected request's future carries and copies (measured: +8k
        // instructions of memcpy per replay when inline).
        let settling = if reconcile {
            Box::pin(self.reconcile(intent, existing)).await
        } else {
            Box::pin(self.retry_unknown(intent, existing)).await
        };
        match settling {
            Settling::Forward(record) => Next::Forward(record),
            // Settled from the upstream's records: answered as a completed record is.
            Settling::Replay(record) => match record.response.as_ref().map(answer) {
                Some(Decision::Replay { stored, body }) => {
                    Next::Answer(self.replay(stored, body, true))
                }
                Some(Decision::Refuse(refusal)) => Next::Refuse(refusal),
                _ => Next::LookAgain,
            },
            Settling::Refuse(refusal) => Next::Refuse(refusal),
            Settling::StoreFailed(e) => Next::StoreFailed(e),
            Settling::Lost => {
                looks.lost = Some(existing.token);
                Next::LookAgain
            }
        }
    }

    /// Wait for the record to change (the store's notification) or until `until`.
    async fn wait(&self, watch: Option<&mut Watch>, until: Instant) {
        let Some(watch) = watch else {
            return;
        };
        let woken_by = tokio::select! {
            _ = watch.changed() => WokenBy::Notification,
            _ = tokio::time::sleep_until(until.into()) => WokenBy::Timer,
        };
        self.cx.worker.metrics.woken(woken_by);
    }
}
