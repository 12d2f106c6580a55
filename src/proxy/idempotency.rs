//! The protected flow of one request (SPEC §1 steps 2–5): read the body, derive the
//! key, reserve it, and either forward (winner), replay, or refuse (loser).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, request, Response};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;

use super::body::ProxyBody;
use super::execute::{self, Call};
use super::forward::upstream_request;
use super::problem::{self, Problem};
use super::replay::replay;
use super::{forward_unprotected, Inner};
use crate::body::BodyView;
use crate::config::{OnConcurrent, OnFailure, OnStoreError, RoutePolicy};
use crate::key::{self, KeyError, StoreKey};
use crate::metrics::{Outcome, StoreOp};
use crate::route::Captures;
use crate::store::{Record, RecordState, Reserve, StoreError, Token};
use crate::template::RequestView;

/// What the pipeline needs to answer and log one protected request.
pub struct Handled {
    pub response: Response<ProxyBody>,
    pub outcome: Outcome,
    pub key: Option<StoreKey>,
}

impl Handled {
    fn problem(p: Problem, outcome: Outcome, key: Option<StoreKey>) -> Self {
        Handled {
            response: p.into_response(),
            outcome,
            key,
        }
    }
}

/// The identity of one intent, derived from the request.
struct Intent {
    key: String,
    scope: String,
    store_key: StoreKey,
    fingerprint: [u8; 32],
    credentials: [u8; 32],
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
    let raw = match read_body(
        body,
        &parts.headers,
        policy.max_request_bytes,
        inner.upstream.timeout,
    )
    .await
    {
        Ok(raw) => raw,
        Err(p) => return Handled::problem(p, Outcome::rejected, None),
    };
    let body = BodyView::new(raw);
    let intent = match derive(&policy, &parts, &captures, &body) {
        Ok(Some(intent)) => intent,
        Ok(None) if !policy.require_key => {
            let upstream_body = Either::Left(Full::new(body.raw().clone()));
            let response = forward_unprotected(inner, parts, upstream_body, client_ip).await;
            return Handled {
                response,
                outcome: Outcome::passthrough,
                key: None,
            };
        }
        Ok(None) => {
            return Handled::problem(problem::key_missing(&policy.name), Outcome::rejected, None)
        }
        Err(KeyError::BodyNotJson) => {
            return Handled::problem(problem::body_not_json(), Outcome::rejected, None)
        }
        Err(KeyError::Invalid(reason)) => {
            return Handled::problem(problem::key_invalid(&reason), Outcome::rejected, None)
        }
    };
    let key = Some(intent.store_key);

    let deadline = Instant::now() + policy.wait_timeout;
    let mut attempt_record = new_record(&policy, &intent);
    loop {
        // Watch before reading, so a completion between the read and the wait is seen.
        let mut watch = (policy.on_concurrent == OnConcurrent::Wait)
            .then(|| inner.store.watch(&intent.store_key));
        let started = Instant::now();
        let reserved = inner
            .store
            .reserve(&intent.store_key, &attempt_record, policy.lease)
            .await;
        inner.metrics.store_op(StoreOp::reserve, started.elapsed());
        let existing = match reserved {
            Err(e) => {
                if matches!(e, StoreError::Timeout(_)) && on_store_error == OnStoreError::Reject {
                    release_orphan(inner, intent.store_key, attempt_record.token, policy.lease);
                }
                return store_failed(inner, e, parts, body, client_ip, on_store_error, key).await;
            }
            Ok(Reserve::Won) => {
                return winner(
                    inner,
                    &policy,
                    &intent,
                    attempt_record,
                    parts,
                    body,
                    client_ip,
                )
                .await
            }
            Ok(Reserve::Exists(existing)) => existing,
        };
        if existing.credentials != intent.credentials {
            return Handled::problem(problem::credential_mismatch(), Outcome::rejected, key);
        }
        if existing.fingerprint != intent.fingerprint {
            return Handled::problem(problem::key_reused(), Outcome::mismatch, key);
        }
        match (existing.state, &existing.response) {
            (RecordState::Completed, Some(stored)) => {
                let retry =
                    policy.on_failure == OnFailure::Retry && (400..500).contains(&stored.status);
                if !retry {
                    return match replay(stored) {
                        Ok(response) => Handled {
                            response,
                            outcome: Outcome::replayed,
                            key,
                        },
                        Err(p) => Handled::problem(p, Outcome::conflict, key),
                    };
                }
                // A stored 4xx with `on_failure: retry`: take the key over for a new attempt.
                let next = existing.next_attempt(policy.lease);
                let started = Instant::now();
                let taken = inner
                    .store
                    .replace_if_owner(
                        &intent.store_key,
                        &existing.token,
                        &next,
                        policy.lease,
                        false,
                    )
                    .await;
                inner.metrics.store_op(StoreOp::takeover, started.elapsed());
                match taken {
                    Ok(true) => {
                        return winner(inner, &policy, &intent, next, parts, body, client_ip).await
                    }
                    Ok(false) => continue,
                    Err(e) => {
                        return store_failed(inner, e, parts, body, client_ip, on_store_error, key)
                            .await
                    }
                }
            }
            _ => {
                let remaining = existing.remaining();
                let retry_after = super::lease::retry_after_secs(&existing);
                let now = Instant::now();
                let Some(watch) = watch.as_mut().filter(|_| now < deadline) else {
                    return Handled::problem(
                        problem::in_progress(&policy.name, retry_after),
                        Outcome::conflict,
                        key,
                    );
                };
                // Wake on completion (pub/sub), at the lease's end (its owner may have died),
                // or after a second as a safety net against a lost notification.
                let wake = now + (remaining + Duration::from_millis(5)).min(Duration::from_secs(1));
                tokio::select! {
                    _ = watch.changed() => {}
                    _ = tokio::time::sleep_until(wake.min(deadline).into()) => {}
                }
                attempt_record = new_record(&policy, &intent);
            }
        }
    }
}

fn derive(
    policy: &RoutePolicy,
    parts: &request::Parts,
    captures: &Captures,
    body: &BodyView,
) -> Result<Option<Intent>, KeyError> {
    let view = RequestView {
        method: &parts.method,
        route: &policy.name,
        captures,
        query: parts.uri.query(),
        headers: &parts.headers,
        body,
    };
    let Some(key) = key::render_key(policy, &view)? else {
        return Ok(None);
    };
    let Some(scope) = key::render_scope(policy, &view)? else {
        return Ok(None);
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    Ok(Some(Intent {
        store_key: StoreKey::new(&policy.name, &scope, &key),
        fingerprint: key::fingerprint(&policy.fingerprint, &parts.method, path, body),
        credentials: key::credential_hash(&policy.bind_credentials, &parts.headers),
        key,
        scope,
    }))
}

fn new_record(policy: &RoutePolicy, intent: &Intent) -> Record {
    Record::in_progress(
        &policy.name,
        &intent.scope,
        &intent.key,
        intent.fingerprint,
        intent.credentials,
        policy.lease,
    )
}

/// We own the key: forward once, with the key passed on, in a detached task.
async fn winner(
    inner: &Arc<Inner>,
    policy: &Arc<RoutePolicy>,
    intent: &Intent,
    record: Record,
    parts: request::Parts,
    body: BodyView,
    client_ip: Option<IpAddr>,
) -> Handled {
    let upstream_key = key::upstream_key(&intent.key, record.attempt);
    let key_value = key::forward_key_value(&upstream_key, policy.forward_key_format);
    let request = upstream_request(
        &inner.upstream.url,
        parts,
        Either::Left(Full::new(body.raw().clone())),
        client_ip,
        Some((&policy.forward_key_header, key_value)),
    );
    let call = Call {
        policy: policy.clone(),
        key: intent.store_key,
        record,
        request,
    };
    let response = match execute::spawn(inner, call).await {
        Ok(response) => response,
        Err(_) => problem::upstream_unavailable().into_response(),
    };
    Handled {
        response,
        outcome: Outcome::forwarded,
        key: Some(intent.store_key),
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
fn release_orphan(inner: &Arc<Inner>, key: StoreKey, token: Token, lease: Duration) {
    use std::sync::atomic::Ordering;
    if inner.orphans.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING_ORPHANS {
        inner.orphans.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let inner = inner.clone();
    tokio::spawn(async move {
        let deadline = Instant::now() + lease;
        let mut backoff = Duration::from_millis(100);
        let mut absent_since: Option<Instant> = None;
        while Instant::now() + backoff < deadline {
            tokio::time::sleep(backoff).await;
            match inner.store.release_if_owner(&key, &token).await {
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
        inner.orphans.fetch_sub(1, Ordering::Relaxed);
    });
}

/// The store could not answer: refuse (default) or forward unprotected, marked.
async fn store_failed(
    inner: &Arc<Inner>,
    error: StoreError,
    parts: request::Parts,
    body: BodyView,
    client_ip: Option<IpAddr>,
    on_store_error: OnStoreError,
    key: Option<StoreKey>,
) -> Handled {
    tracing::warn!(error = %error, "idempotency store unavailable");
    let response = match on_store_error {
        OnStoreError::Reject => problem::store_unavailable().into_response(),
        OnStoreError::Passthrough => {
            let upstream_body = Either::Left(Full::new(body.raw().clone()));
            let mut response = forward_unprotected(inner, parts, upstream_body, client_ip).await;
            response
                .headers_mut()
                .insert(super::headers::IDEMPOTENCY_DEGRADED, super::headers::TRUE);
            response
        }
    };
    Handled {
        response,
        outcome: Outcome::store_error,
        key,
    }
}

/// Read the whole body, refusing more than `limit` bytes (at once when the declared
/// `Content-Length` is already over it).
async fn read_body(
    body: Incoming,
    headers: &http::HeaderMap,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Problem> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(problem::body_too_large(limit));
    }
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(problem::body_invalid("it was not received in time")),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(problem::body_too_large(limit))
        }
        Ok(Err(e)) => Err(problem::body_invalid(&e.to_string())),
    }
}
