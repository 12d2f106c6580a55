//! A new intent on a route whose circuit breaker is open (SPEC §1 "Upstream outages"):
//! nothing is reserved or sent. The request may still be the repeat of an intent the
//! store already holds, so its record is read (never written) and a stored outcome is
//! replayed, a conflict answered as usual; anything that would send is `circuit_open`.

use std::time::Duration;

use super::{Flow, Handled};
use crate::proxy::decide::{decide, Decision};
use crate::proxy::intent::Intent;
use crate::proxy::problem;
use crate::store::{Record, Settled};
use crate::vocabulary::{Outcome, StoreOp};

impl Flow<'_> {
    /// Answer `intent` without reserving it while the breaker is open for `retry_after`.
    pub(super) async fn while_open(mut self, intent: Intent, retry_after: Duration) -> Handled {
        let store = &self.cx.worker.store;
        let read = self
            .timed(StoreOp::Reserve, store.get_at(&intent.store_key))
            .await;
        let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        let open = problem::circuit_open(&self.policy.name, secs);
        let (existing, store_now): (Record, u64) = match read {
            Ok(Some(found)) => found,
            Ok(None) => return self.refuse(open, Outcome::CircuitOpen),
            Err(e) => return Box::pin(self.store_failed(e)).await,
        };
        if let Err(refusal) = self.readable(&existing, &intent.store_key) {
            return self.refuse_because(refusal);
        }
        // A token no record carries: this request owns nothing.
        let mine = intent.reservation(&self.policy);
        match decide(
            &existing,
            &intent,
            &mine.token,
            &self.policy,
            false,
            store_now,
        ) {
            Decision::Replay { stored, body } => {
                let reconciled = existing.settled == Some(Settled::Reconciled);
                self.replay(stored, body, reconciled)
            }
            Decision::Refuse(refusal) => self.refuse_because(refusal),
            // Each of these would send to the upstream (or look it up).
            Decision::Won
            | Decision::NewAttempt
            | Decision::Retry
            | Decision::Reconcile
            | Decision::Wait { .. } => self.refuse(open, Outcome::CircuitOpen),
        }
    }
}
