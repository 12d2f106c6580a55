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
use super::decide::{settle, Exchanged, Settle};
use super::headers::strip_hop_by_hop;
use super::lease::{renewing, LeaseHolder};
use super::outbound::Outbound;
use super::problem::{self, ProblemFormat};
use super::Worker;
use crate::config::{OnConcurrent, RoutePolicy};
use crate::key::StoreKey;
use crate::mcp::ToolCall;
use crate::metrics::UpstreamFailure;
use crate::store::{Record, StoredResponse};
use crate::traces::request::end_upstream;
use crate::traces::RequestTrace;
use crate::upstream::Sent;

/// One owned reservation about to be executed upstream.
pub struct Call {
    pub policy: Arc<RoutePolicy>,
    /// How a failure is answered, if the caller has had nothing yet.
    pub format: ProblemFormat,
    /// The protected MCP call, on an MCP route: its final response is what is stored.
    pub mcp: Option<Arc<ToolCall>>,
    pub key: StoreKey,
    /// Our in-progress record; its token proves ownership.
    pub record: Record,
    pub request: Request<UpstreamBody>,
    /// The request's spans, when traces are on: the lease's store operations and the
    /// upstream call are its children.
    pub trace: Option<Box<RequestTrace>>,
}

/// Start the call; the receiver yields the response for the caller (streaming, or a
/// problem). Dropping the receiver does not stop the call.
pub fn spawn(worker: &Arc<Worker>, call: Call) -> oneshot::Receiver<Response<ProxyBody>> {
    let (reply, rx) = oneshot::channel();
    // Boxed where it is made: the call's future is ~5 KB, and spawning moves (copies)
    // a future by value several times on its way into the task.
    worker
        .tasks
        .spawn(Box::pin(run(worker.clone(), call, reply)));
    rx
}

/// How the exchange with the upstream ended, with what settling it needs.
pub(super) struct Ended {
    pub exchanged: Exchanged,
    /// Why the outcome is unknown or nothing was sent (logged; ends the caller's body).
    pub reason: String,
    /// The response to record, when the route stores its status.
    pub stored: Option<StoredResponse>,
    /// The caller's side: its end (and the head, if nothing went out yet) still held.
    pub out: Outbound,
}

async fn run(worker: Arc<Worker>, call: Call, reply: oneshot::Sender<Response<ProxyBody>>) {
    let Call {
        policy,
        format,
        mcp,
        key,
        record,
        mut request,
        trace,
    } = call;
    worker.metrics.inflight.inc();
    let started = Instant::now();
    let waiters = policy.on_concurrent == OnConcurrent::Wait;
    let upstream_span = trace
        .as_ref()
        .and_then(|t| t.upstream(&mut request))
        .map(Box::new);
    let holder = LeaseHolder::new(worker.clone(), key, record, policy.lease, waiters, trace);
    let out = Outbound::new(reply, worker.upstream.timeout);
    // Boxed: the exchange is the largest part of the call, and inline it would be
    // copied with the whole call future on its way into the task (see `spawn`).
    let mut work = Box::pin(exchange(&worker, &policy, mcp.as_deref(), request, out));
    let (holder, ended) = renewing(holder, work.as_mut()).await;
    drop(work);
    let exemplar = holder.trace().and_then(RequestTrace::exemplar);
    let took = started.elapsed().as_secs_f64();
    worker.metrics.upstream_duration.observe(took, exemplar);

    let Ended {
        exchanged,
        reason,
        stored,
        mut out,
    } = ended;
    if let Some(span) = upstream_span {
        let status = match exchanged {
            Exchanged::Answered(status) => Some(status),
            _ => None,
        };
        let failure = (status.is_none()).then_some(reason.as_str());
        end_upstream(*span, status, failure);
    }
    let settled = settle(exchanged, &policy);
    let held_for = (settled == Settle::Hold).then(|| holder.remaining_secs());
    match (settled, stored) {
        (Settle::Store, Some(response)) => holder.complete(response, policy.retention).await,
        (Settle::Hold, _) => {}
        _ => holder.release().await,
    }
    match exchanged {
        Exchanged::Answered(_) | Exchanged::NotFinal => out.finish().await,
        Exchanged::NotSent => {
            worker.metrics.upstream_failure(UpstreamFailure::not_sent);
            let p = problem::upstream_unavailable();
            out.fail(format.respond(p), reason).await;
        }
        Exchanged::Ambiguous => {
            tracing::warn!(key = %key, %reason, "upstream outcome unknown");
            worker.metrics.upstream_failure(UpstreamFailure::ambiguous);
            let p = problem::upstream_timeout(held_for);
            out.fail(format.respond(p), reason).await;
        }
    }
    worker.metrics.inflight.dec();
}

async fn exchange(
    worker: &Worker,
    policy: &RoutePolicy,
    mcp: Option<&ToolCall>,
    request: Request<UpstreamBody>,
    mut out: Outbound,
) -> Ended {
    let timeout = worker.upstream.timeout;
    let unanswered = |exchanged, reason, out| Ended {
        exchanged,
        reason,
        stored: None,
        out,
    };
    let response = match worker.client.send(request, timeout).await {
        Sent::NotSent(e) => return unanswered(Exchanged::NotSent, e.to_string(), out),
        Sent::Ambiguous(reason) => return unanswered(Exchanged::Ambiguous, reason, out),
        Sent::Answered(response) => response,
    };
    if let Some(call) = mcp {
        // Boxed: inline, its state would enlarge every call's future, which is copied
        // when spawned (measured: +1.8k instructions per fresh intent in memcpy).
        let answer = super::mcp_answer::exchange(response, call, policy, timeout, out);
        return Box::pin(answer).await;
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let status = parts.status.as_u16();
    let storable = settle(Exchanged::Answered(status), policy) == Settle::Store;
    let mut capture =
        storable.then(|| Capture::new(policy.max_response_bytes, body.size_hint().exact()));
    let stored_headers: Vec<_> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    out.set_head(Response::from_parts(parts, ()), body.size_hint());

    if let Err(reason) = pump(body, timeout, &mut capture, &mut out).await {
        return unanswered(Exchanged::Ambiguous, reason, out);
    }
    let stored = capture.map(|c| StoredResponse {
        status,
        headers: stored_headers,
        body: c.finish(),
    });
    Ended {
        exchanged: Exchanged::Answered(status),
        reason: String::new(),
        stored,
        out,
    }
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
