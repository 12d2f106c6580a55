//! How the protected flow answers when it does not forward: a replay, a refusal, the
//! store's failure (refuse or degrade), a sealed record opened or found unreadable.
//! Refusals because of the record under the key are built here from a [`Refusal`].

use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use http::Response;
use http_body_util::{Either, Full};

use super::super::body::ProxyBody;
use super::super::problem::{self, Problem};
use super::super::refusal::Refusal;
use super::super::replay::{replay, replay_mcp};
use super::super::{forward_unprotected, Handled};
use super::Flow;
use crate::key::StoreKey;
use crate::store::config::OnStoreError;
use crate::store::{Record, StoreError, StoredResponse};
use crate::vocabulary::{Outcome, StoreOp};

impl Flow<'_> {
    // The store's failure and the unprotected forward are boxed where they are awaited
    // (`mod.rs`): each holds a whole upstream exchange (~2.8 KB), which inline would
    // sit in every protected request's future and be copied with it.

    /// The store could not answer: refuse (default) or forward unprotected, marked.
    pub(super) async fn store_failed(self, error: StoreError) -> Handled {
        if let StoreError::Full(max) = error {
            // Reachable, yet it cannot take a new intent: never forwarded unprotected.
            tracing::warn!(
                max_records = max,
                "memory store full of records in flight or unknown"
            );
            let p = problem::store_full(max);
            return self.refuse(p, Outcome::StoreError);
        }
        tracing::warn!(error = %error, "idempotency store unavailable");
        match self.on_store_error {
            OnStoreError::Reject => self.refuse(problem::store_unavailable(), Outcome::StoreError),
            OnStoreError::Passthrough => {
                self.cx.worker.metrics.degraded.inc();
                let mut handled = self.unprotected(Outcome::StoreError).await;
                let headers = handled.response.headers_mut();
                headers.insert(
                    super::super::headers::IDEMPOTENCY_DEGRADED,
                    super::super::headers::TRUE,
                );
                handled
            }
        }
    }

    /// Forward without idempotency (`require_key: false`, or a degraded store).
    pub(super) async fn unprotected(self, outcome: Outcome) -> Handled {
        let body = Either::Left(Full::new(self.body.raw().clone()));
        let started = Instant::now();
        let (cx, format) = (self.cx, &self.format);
        let (parts, ip) = (self.parts, self.client_ip);
        let response = forward_unprotected(cx, parts, body, ip, format).await;
        Handled::answered(response, outcome)
            .keyed(self.key, self.store_time)
            .upstream_since(started)
    }

    /// Whether `existing` came back opened from the store, or the 409
    /// `record_unreadable` when it is still sealed, no listed key opening it: never
    /// executed again. By reference: the record is not moved on every repeat's path.
    pub(super) fn readable(&self, existing: &Record, key: &StoreKey) -> Result<(), Refusal> {
        if existing.sealed.is_none() {
            return Ok(());
        }
        let Some(why) = self.cx.worker.store.sealing().why_unreadable(existing) else {
            return Ok(());
        };
        tracing::warn!(route = %self.policy.name, key = %key, reason = %why, "stored record cannot be read");
        self.cx.worker.metrics.unreadable(&self.policy.name);
        Err(Refusal::Unreadable)
    }

    /// Answer from the stored outcome (`reconciled`: it came from the upstream's records).
    pub(super) fn replay(
        &self,
        stored: &StoredResponse,
        body: &Bytes,
        reconciled: bool,
    ) -> Handled {
        let mut response = match &self.mcp {
            Some(call) => replay_mcp(stored, body, call, &self.policy.store_headers.exclude),
            None => replay(stored, body, &self.policy.store_headers.exclude),
        };
        if reconciled {
            let headers = response.headers_mut();
            headers.insert(
                super::super::headers::IDEMPOTENT_RECONCILED,
                super::super::headers::TRUE,
            );
        }
        self.answer(response, Outcome::Replayed)
    }

    pub(super) fn refuse(&self, p: Problem, outcome: Outcome) -> Handled {
        let response = self.format.respond(p);
        self.answer(response, outcome)
    }

    /// Refuse because of the record under the key: the one place such answers are built.
    pub(super) fn refuse_because(&self, refusal: Refusal) -> Handled {
        self.refuse(refusal.problem(&self.policy.name), refusal.outcome())
    }

    pub(super) fn answer(&self, response: Response<ProxyBody>, outcome: Outcome) -> Handled {
        Handled::answered(response, outcome).keyed(self.key, self.store_time)
    }

    /// Run one store round trip, timed for the metrics and the request's log line.
    /// Every store round trip of the flow: timed, and remembered as the last one asked
    /// for, which is the write that granted the lease when the flow then forwards.
    pub(super) async fn timed<T>(&mut self, op: StoreOp, round_trip: impl Future<Output = T>) -> T {
        let (out, asked, took) = self.cx.store_op_from(op, round_trip).await;
        self.store_time += took;
        self.asked = Some(asked);
        out
    }
}
