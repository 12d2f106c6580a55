//! The winner's upstream call, run as a detached task so it is **not tied to the
//! client connection**: if the caller disconnects, the task still reads the upstream
//! response and records the outcome, and the caller's retry gets the replay.
//!
//! While the call runs the lease is renewed every `lease/3`. The response streams to
//! the caller as it arrives ([`Outbound`]): every frame goes out as soon as the upstream
//! sends it, and only the **end of the response is held until the record is written**,
//! so a caller who has the whole response and repeats the request gets the replay,
//! never a 409.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::sync::oneshot;

use super::body::{ProxyBody, UpstreamBody};
use super::capture::Capture;
use super::headers::strip_hop_by_hop;
use super::lease::{renewing, LeaseHolder};
use super::outbound::Outbound;
use super::{problem, Inner};
use crate::config::{OnAmbiguous, OnConcurrent, RoutePolicy};
use crate::key::StoreKey;
use crate::store::{Record, StoredResponse};

/// One owned reservation about to be executed upstream.
pub struct Call {
    pub policy: Arc<RoutePolicy>,
    pub key: StoreKey,
    /// Our in-progress record; its token proves ownership.
    pub record: Record,
    pub request: Request<UpstreamBody>,
}

/// Start the call; the receiver yields the response for the caller (streaming, or a
/// problem). Dropping the receiver does not stop the call.
pub fn spawn(inner: &Arc<Inner>, call: Call) -> oneshot::Receiver<Response<ProxyBody>> {
    let (reply, rx) = oneshot::channel();
    // Boxed where it is made: the call's future is ~9 KB, and spawning moves (copies)
    // a future by value several times on its way into the task.
    inner.tasks.spawn(Box::pin(run(inner.clone(), call, reply)));
    rx
}

/// How the exchange with the upstream ended.
enum Exchange {
    /// Connection refused / not sent: nothing happened upstream.
    NotSent { out: Outbound },
    /// Sent, but no complete answer (timeout, reset, stalled body): the effect may
    /// or may not have happened.
    Ambiguous { reason: String, out: Outbound },
    /// A complete response. `out` still holds its end (and the head, if nothing has gone
    /// out yet).
    Finished {
        stored: Option<StoredResponse>,
        out: Outbound,
    },
}

async fn run(inner: Arc<Inner>, call: Call, reply: oneshot::Sender<Response<ProxyBody>>) {
    let Call {
        policy,
        key,
        record,
        request,
    } = call;
    inner.metrics.inflight.inc();
    let started = Instant::now();
    let waiters = policy.on_concurrent == OnConcurrent::Wait;
    let holder = LeaseHolder::new(inner.clone(), key, record, policy.lease, waiters);
    let out = Outbound::new(reply, inner.upstream.timeout);
    let work = std::pin::pin!(exchange(&inner, &policy, request, out));
    let (holder, exchange) = renewing(holder, work).await;
    inner
        .metrics
        .upstream_duration
        .observe(started.elapsed().as_secs_f64());

    match exchange {
        Exchange::NotSent { mut out } => {
            holder.release().await;
            let reason = "upstream unavailable".to_owned();
            out.fail(problem::upstream_unavailable().into_response(), reason)
                .await;
        }
        Exchange::Ambiguous { reason, mut out } => {
            tracing::warn!(key = %key, %reason, "upstream outcome unknown");
            let held_for = match policy.on_ambiguous {
                OnAmbiguous::Hold => Some(holder.remaining_secs()),
                OnAmbiguous::Release => {
                    holder.release().await;
                    None
                }
            };
            out.fail(problem::upstream_timeout(held_for).into_response(), reason)
                .await;
        }
        Exchange::Finished { stored, mut out } => {
            match stored {
                Some(response) => holder.complete(response, policy.retention).await,
                None => holder.release().await,
            }
            out.finish().await;
        }
    }
    inner.metrics.inflight.dec();
}

async fn exchange(
    inner: &Inner,
    policy: &RoutePolicy,
    request: Request<UpstreamBody>,
    mut out: Outbound,
) -> Exchange {
    let timeout = inner.upstream.timeout;
    let response = match tokio::time::timeout(timeout, inner.client.request(request)).await {
        Err(_) => {
            return Exchange::Ambiguous {
                reason: format!("no response head within {timeout:?}"),
                out,
            }
        }
        Ok(Err(e)) if e.is_connect() => return Exchange::NotSent { out },
        Ok(Err(e)) => {
            return Exchange::Ambiguous {
                reason: format!("upstream error: {e}"),
                out,
            }
        }
        Ok(Ok(response)) => response,
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let status = parts.status.as_u16();
    let storable = policy.store_statuses.contains(status);
    let mut capture =
        storable.then(|| Capture::new(policy.max_response_bytes, body.size_hint().exact()));
    let stored_headers: Vec<_> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    out.set_head(Response::from_parts(parts, ()), body.size_hint());

    if let Err(reason) = pump(body, timeout, &mut capture, &mut out).await {
        return Exchange::Ambiguous { reason, out };
    }
    let stored = capture.map(|c| StoredResponse {
        status,
        headers: stored_headers,
        body: c.finish(),
    });
    Exchange::Finished { stored, out }
}

/// Copy upstream frames to the caller as they come, keeping a capture.
async fn pump(
    mut body: crate::upstream::ResponseBody,
    timeout: Duration,
    capture: &mut Option<Capture>,
    out: &mut Outbound,
) -> Result<(), String> {
    loop {
        match tokio::time::timeout(timeout, body.frame()).await {
            Err(_) => return Err(format!("response body stalled for {timeout:?}")),
            Ok(None) => return Ok(()),
            Ok(Some(Err(e))) => return Err(format!("response body failed: {e}")),
            Ok(Some(Ok(frame))) => {
                if let (Some(c), Some(data)) = (capture.as_mut(), frame.data_ref()) {
                    c.push(data);
                }
                out.push(frame).await;
            }
        }
    }
}
