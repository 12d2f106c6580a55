//! A repeat of an attempt whose outcome is unknown (its lease ended without an outcome,
//! SPEC §1 "Unknown outcomes"), once [`decide`](super::super::decide) has said what the
//! route wants: forward it again under a new lease, or first ask the upstream's records
//! (`reconcile:`). Every change to the record is a fenced takeover
//! ([`crate::store::Store::take_over`]): of several replicas settling the same attempt at
//! once, one wins, and an owner that came back and renewed its lease refuses them all.

use http::{request, Request, Uri};
use http_body_util::{Either, Full};

use super::super::decide::Lookup;
use super::super::exchange;
use super::super::forward::upstream_request;
use super::super::problem::UnknownBecause;
use super::super::refusal::Refusal;
use super::Flow;
use crate::key;
use crate::policy::OnUnknown;
use crate::proxy::intent::Intent;
use crate::store::{Record, Settled, StoreError};
use crate::template::RequestView;
use crate::traces::RequestTrace;
use crate::vocabulary::Reconciliation;
use crate::vocabulary::StoreOp;

/// What settling an unknown outcome led to.
pub(super) enum Settling {
    /// Taken over: forward this attempt (same upstream key).
    Forward(Record),
    /// Settled from the upstream's records: replay this completed record.
    Replay(Record),
    /// Still unknown: refuse.
    Refuse(Refusal),
    StoreFailed(StoreError),
    /// Another replica settled it first, or its owner came back: look again.
    Lost,
}

/// Headers of the original request that a lookup does not carry: it is a new request
/// without a body, and no idempotency key (it is a read).
static NOT_FOR_LOOKUP: [http::HeaderName; 4] = [
    http::header::CONTENT_LENGTH,
    http::header::CONTENT_TYPE,
    http::header::TRANSFER_ENCODING,
    http::header::EXPECT,
];

impl Flow<'_> {
    /// Take the attempt over under a new lease, to forward it again.
    pub(super) async fn retry_unknown(&mut self, intent: &Intent, existing: &Record) -> Settling {
        let mut next = existing.retried(self.policy.lease);
        next.trace = self.cx.trace().and_then(RequestTrace::link).map(Box::new);
        // The store checks the key window again on its clock, at the write: this
        // duplicate may have paused since it read the record.
        let window = match (self.policy.on_unknown, existing.settled) {
            (_, Some(Settled::NotExecuted)) => None,
            (OnUnknown::Retry, _) => self.policy.retry_window(),
            _ => None,
        };
        // Tests stop a duplicate here: it has read the unknown outcome, not yet taken it.
        crate::pause!("duplicate_before_takeover");
        match self.take_over(intent, existing, &next, window).await {
            Ok(true) => Settling::Forward(next),
            Ok(false) => Settling::Lost,
            Err(e) => Settling::StoreFailed(e),
        }
    }

    /// Ask the upstream whether the attempt happened: found → its answer is the
    /// outcome; absent → forward it again; no answer → 409 with `Retry-After`.
    pub(super) async fn reconcile(&mut self, intent: &Intent, existing: &Record) -> Settling {
        let policy = self.policy.clone();
        let Some(reconcile) = policy.reconcile.as_deref() else {
            // `idem check` refuses `on_unknown: reconcile` without a lookup.
            return self.retry_unknown(intent, existing).await;
        };
        let upstream_key = key::upstream_key(&intent.key, existing.attempt);
        let Some(request) = self.lookup_request(&upstream_key) else {
            let reason = "a placeholder of reconcile.path does not resolve from the request";
            let metrics = &self.cx.worker.metrics;
            metrics.reconciled(&policy.name, Reconciliation::Failed);
            return self.lookup_failed(existing, reason);
        };
        let looked = exchange::lookup(self.cx, request, reconcile, &policy).await;
        let result = match &looked {
            Lookup::Found(_) => Reconciliation::Found,
            Lookup::Absent => Reconciliation::Absent,
            Lookup::Failed(_) => Reconciliation::Failed,
        };
        self.cx.worker.metrics.reconciled(&policy.name, result);
        match looked {
            Lookup::Found(response) => {
                let settled =
                    existing.settled_with(Settled::Reconciled, response, policy.retention);
                match self.take_over(intent, existing, &settled, None).await {
                    Ok(true) => Settling::Replay(settled),
                    Ok(false) => Settling::Lost,
                    Err(e) => Settling::StoreFailed(e),
                }
            }
            Lookup::Absent => self.retry_unknown(intent, existing).await,
            Lookup::Failed(reason) => self.lookup_failed(existing, &reason),
        }
    }

    fn lookup_failed(&self, existing: &Record, reason: &str) -> Settling {
        tracing::warn!(route = %self.policy.name, %reason, "reconciliation lookup failed; the outcome stays unknown");
        let seconds = self
            .policy
            .reconcile
            .as_ref()
            .map_or(1, |r| r.timeout.as_secs().max(1));
        Settling::Refuse(Refusal::OutcomeUnknown {
            sent_at_ms: existing.sent_at_ms,
            because: UnknownBecause::LookupFailed,
            retry_after: Some(seconds),
        })
    }

    /// The lookup request: the route's `reconcile` method and path, with the original
    /// request's headers (the upstream's credentials) but no body.
    fn lookup_request(&self, upstream_key: &str) -> Option<Request<crate::upstream::UpstreamBody>> {
        let reconcile = self.policy.reconcile.as_deref()?;
        let view = RequestView {
            method: &self.parts.method,
            route: &self.policy.name,
            captures: &self.captures,
            query: self.parts.uri.query(),
            headers: &self.parts.headers,
            body: &self.body,
            mcp: self.mcp.as_deref(),
        };
        let path = reconcile.render(upstream_key, &view).ok()??;
        let uri: Uri = path.parse().ok()?;
        let mut headers = self.parts.headers.clone();
        for name in NOT_FOR_LOOKUP
            .iter()
            .chain([&self.policy.forward_key_header])
        {
            headers.remove(name);
        }
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.method = reconcile.method.clone();
        parts.uri = uri;
        parts.headers = headers;
        let parts: request::Parts = parts;
        let url = &self.cx.worker.upstream.url;
        let body = Either::Left(Full::default());
        Some(upstream_request(url, parts, body, self.client_ip, None))
    }

    /// The fenced write that settles or takes over `existing`, timed as a takeover.
    async fn take_over(
        &mut self,
        intent: &Intent,
        existing: &Record,
        next: &Record,
        window: Option<std::time::Duration>,
    ) -> Result<bool, StoreError> {
        let store = &self.cx.worker.store;
        let (key, ttl) = (&intent.store_key, self.policy.retention);
        let write = store.take_over(key, &existing.token, next, ttl, window);
        self.timed(StoreOp::Takeover, write).await
    }
}
