//! The protected flow of one request (SPEC §1 steps 2–5): read the body, derive the
//! intent, reserve its key, and either forward (winner), replay, or refuse (loser).

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use super::body::ProxyBody;
use super::execute::{self, Call};
use super::forward::upstream_request;
use super::intent::{key_problem, read_body, Intent};
use super::lease::{release_orphan, retry_after_secs};
use super::problem::{self, Problem};
use super::replay::replay;
use super::{forward_unprotected, Inner};
use crate::body::BodyView;
use crate::config::{OnConcurrent, OnFailure, OnStoreError, RoutePolicy};
use crate::key::{self, StoreKey};
use crate::metrics::{Outcome, StoreOp};
use crate::route::Captures;
use crate::store::{Record, RecordState, Reserve, StoreError};

/// What the pipeline needs to answer and log one protected request.
pub struct Handled {
    pub response: Response<ProxyBody>,
    pub outcome: Outcome,
    pub key: Option<StoreKey>,
    /// Time spent in store round trips.
    pub store_time: Duration,
    /// Time until the upstream answered (winner only).
    pub upstream_time: Option<Duration>,
}

/// One protected request on its way through the flow.
struct Flow<'a> {
    inner: &'a Arc<Inner>,
    policy: Arc<RoutePolicy>,
    parts: request::Parts,
    body: BodyView,
    client_ip: Option<IpAddr>,
    on_store_error: OnStoreError,
    key: Option<StoreKey>,
    store_time: Duration,
}

pub async fn protect(
    inner: &Arc<Inner>,
    policy: Arc<RoutePolicy>,
    captures: Captures,
    parts: request::Parts,
    body: Incoming,
    client_ip: Option<IpAddr>,
    on_store_error: OnStoreError,
) -> Handled {
    let limit = policy.max_request_bytes;
    let raw = read_body(body, &parts.headers, limit, inner.upstream.timeout).await;
    let mut flow = Flow {
        inner,
        policy,
        parts,
        body: BodyView::new(raw.as_ref().cloned().unwrap_or_default()),
        client_ip,
        on_store_error,
        key: None,
        store_time: Duration::ZERO,
    };
    if let Err(p) = raw {
        return flow.refuse(p, Outcome::rejected);
    }
    match Intent::derive(&flow.policy, &flow.parts, &captures, &flow.body) {
        Ok(Some(intent)) => {
            flow.key = Some(intent.store_key);
            flow.reserve(intent).await
        }
        Ok(None) if !flow.policy.require_key => flow.unprotected(Outcome::passthrough).await,
        Ok(None) => {
            let p = problem::key_missing(&flow.policy.name);
            flow.refuse(p, Outcome::rejected)
        }
        Err(e) => flow.refuse(key_problem(e), Outcome::rejected),
    }
}

impl Flow<'_> {
    /// Reserve, and decide as winner or loser; loops only to wait or to retry a race.
    async fn reserve(mut self, intent: Intent) -> Handled {
        let policy = self.policy.clone();
        let deadline = Instant::now() + policy.wait_timeout;
        loop {
            // Watch before reading, so a completion between the read and the wait is seen.
            let mut watch = (policy.on_concurrent == OnConcurrent::Wait)
                .then(|| self.inner.store.watch(&intent.store_key));
            let mine = intent.reservation(&policy);
            let inner = self.inner;
            let store = &inner.store;
            let reserved = self
                .timed(
                    StoreOp::reserve,
                    store.reserve(&intent.store_key, &mine, policy.lease),
                )
                .await;
            let existing = match reserved {
                Err(e) => {
                    let refused = self.on_store_error == OnStoreError::Reject;
                    if refused && matches!(e, StoreError::Timeout(_)) {
                        release_orphan(self.inner, intent.store_key, mine.token, policy.lease);
                    }
                    return self.store_failed(e).await;
                }
                Ok(Reserve::Won) => return self.forward(&intent, mine).await,
                Ok(Reserve::Exists(existing)) => existing,
            };
            // Credentials first: a stranger learns nothing about the request.
            if existing.credentials != intent.credentials {
                return self.refuse(problem::credential_mismatch(), Outcome::rejected);
            }
            if existing.fingerprint != intent.fingerprint {
                return self.refuse(problem::key_reused(), Outcome::mismatch);
            }
            match (existing.state, &existing.response) {
                (RecordState::Completed, Some(stored)) => {
                    let failed = (400..500).contains(&stored.status);
                    if !(failed && policy.on_failure == OnFailure::Retry) {
                        return self.replay(replay(stored));
                    }
                    // A stored 4xx with `on_failure: retry`: take over for a new attempt.
                    let next = existing.next_attempt(policy.lease);
                    let taken = store.replace_if_owner(
                        &intent.store_key,
                        &existing.token,
                        &next,
                        policy.lease,
                        false,
                    );
                    match self.timed(StoreOp::takeover, taken).await {
                        Ok(true) => return self.forward(&intent, next).await,
                        Ok(false) => continue,
                        Err(e) => return self.store_failed(e).await,
                    }
                }
                _ => {
                    let now = Instant::now();
                    let Some(watch) = watch.as_mut().filter(|_| now < deadline) else {
                        let p = problem::in_progress(&policy.name, retry_after_secs(&existing));
                        return self.refuse(p, Outcome::conflict);
                    };
                    // Wake on completion (pub/sub), at the lease's end (its owner may have
                    // died), or after a second as a safety net against a lost notification.
                    let nap = (existing.remaining() + Duration::from_millis(5))
                        .min(Duration::from_secs(1));
                    tokio::select! {
                        _ = watch.changed() => {}
                        _ = tokio::time::sleep_until((now + nap).min(deadline).into()) => {}
                    }
                }
            }
        }
    }

    /// We own the key: forward once, with the key passed on, in a detached task.
    async fn forward(self, intent: &Intent, record: Record) -> Handled {
        let policy = &self.policy;
        let upstream_key = key::upstream_key(&intent.key, record.attempt);
        let key_value = key::forward_key_value(&upstream_key, policy.forward_key_format);
        let request = upstream_request(
            &self.inner.upstream.url,
            self.parts,
            Either::Left(Full::new(self.body.raw().clone())),
            self.client_ip,
            Some((&policy.forward_key_header, key_value)),
        );
        let call = Call {
            policy: policy.clone(),
            key: intent.store_key,
            record,
            request,
        };
        let started = Instant::now();
        let response = match execute::spawn(self.inner, call).await {
            Ok(response) => response,
            Err(_) => problem::upstream_unavailable().into_response(),
        };
        Handled {
            response,
            outcome: Outcome::forwarded,
            key: self.key,
            store_time: self.store_time,
            upstream_time: Some(started.elapsed()),
        }
    }

    fn replay(self, replayed: Result<Response<ProxyBody>, Problem>) -> Handled {
        match replayed {
            Ok(response) => self.answer(response, Outcome::replayed),
            // Completed, but the body was too large to keep: never a second execution.
            Err(p) => self.refuse(p, Outcome::conflict),
        }
    }

    /// The store could not answer: refuse (default) or forward unprotected, marked.
    async fn store_failed(self, error: StoreError) -> Handled {
        tracing::warn!(error = %error, "idempotency store unavailable");
        match self.on_store_error {
            OnStoreError::Reject => self.refuse(problem::store_unavailable(), Outcome::store_error),
            OnStoreError::Passthrough => {
                let mut handled = self.unprotected(Outcome::store_error).await;
                let headers = handled.response.headers_mut();
                headers.insert(super::headers::IDEMPOTENCY_DEGRADED, super::headers::TRUE);
                handled
            }
        }
    }

    /// Forward without idempotency (`require_key: false`, or a degraded store).
    async fn unprotected(self, outcome: Outcome) -> Handled {
        let body = Either::Left(Full::new(self.body.raw().clone()));
        let started = Instant::now();
        let response = forward_unprotected(self.inner, self.parts, body, self.client_ip).await;
        Handled {
            response,
            outcome,
            key: self.key,
            store_time: self.store_time,
            upstream_time: Some(started.elapsed()),
        }
    }

    fn refuse(self, p: Problem, outcome: Outcome) -> Handled {
        self.answer(p.into_response(), outcome)
    }

    fn answer(self, response: Response<ProxyBody>, outcome: Outcome) -> Handled {
        Handled {
            response,
            outcome,
            key: self.key,
            store_time: self.store_time,
            upstream_time: None,
        }
    }

    /// Run one store round trip, timing it for the metrics and the log line.
    async fn timed<T>(&mut self, op: StoreOp, fut: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = fut.await;
        let took = started.elapsed();
        self.inner.metrics.store_op(op, took);
        self.store_time += took;
        out
    }
}
