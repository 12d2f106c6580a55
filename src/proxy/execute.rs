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
use std::time::Instant;

use http::{Request, Response};
use tokio::sync::oneshot;

use super::body::{ProxyBody, UpstreamBody};
use super::breaker::Ticket;
use super::context::RequestContext;
use super::decide::{settle, Exchanged, Settle};
use super::exchange::{self, Ended, McpAnswer, StatusAnswer};
use super::lease::{renewing, LeaseHolder};
use super::outbound::Outbound;
use super::problem::{self, ProblemFormat};
use crate::key::StoreKey;
use crate::mcp::ToolCall;
use crate::policy::{OnConcurrent, RoutePolicy};
use crate::store::Record;
use crate::vocabulary::UpstreamFailure;

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
    /// When the store write that granted the lease was asked for (the send guard counts
    /// the lease from there).
    pub asked: Instant,
    pub request: Request<UpstreamBody>,
    /// The route's breaker hears whether the upstream answered (`breaker:`).
    pub ticket: Option<Ticket>,
}

/// Start the call; the receiver yields the response for the caller (streaming, or a
/// problem). Dropping the receiver does not stop the call.
pub fn spawn(cx: RequestContext, call: Call) -> oneshot::Receiver<Response<ProxyBody>> {
    let (reply, rx) = oneshot::channel();
    let tasks = cx.worker.tasks.clone();
    // Boxed where it is made: the call's future is ~5 KB, and spawning moves (copies)
    // a future by value several times on its way into the task.
    tasks.spawn(Box::pin(run(cx, call, reply)));
    rx
}

async fn run(cx: RequestContext, call: Call, reply: oneshot::Sender<Response<ProxyBody>>) {
    let Call {
        policy,
        format,
        mcp,
        key,
        record,
        asked,
        request,
        ticket,
    } = call;
    let worker = cx.worker.clone();
    worker.metrics.inflight.inc();
    let started = Instant::now();
    let waiters = policy.on_concurrent == OnConcurrent::Wait;
    let out = Outbound::new(reply, worker.upstream.timeout, &worker.buffers);
    let times = (policy.lease, policy.retention);
    let mut holder = LeaseHolder::new(cx.clone(), key, record, times, waiters, asked);
    let gate = holder.gate().clone();
    // Boxed: the exchange is the largest part of the call, and inline it would be
    // copied with the whole call future on its way into the task (see `spawn`).
    let mut work = match mcp.as_deref() {
        Some(call) => {
            let answer = McpAnswer::new(call, &policy, &worker.buffers);
            futures_util::future::Either::Left(Box::pin(exchange::execute(
                &cx, request, answer, out, gate,
            )))
        }
        None => {
            let answer = StatusAnswer::new(&policy, &worker.buffers);
            futures_util::future::Either::Right(Box::pin(exchange::execute(
                &cx, request, answer, out, gate,
            )))
        }
    };
    let ended = renewing(&mut holder, std::pin::Pin::new(&mut work)).await;
    drop(work);
    let took = started.elapsed().as_secs_f64();
    worker
        .metrics
        .upstream_duration
        .observe(took, cx.exemplar());

    let Ended {
        exchanged,
        reason,
        stored,
        mut out,
    } = ended;
    if let Some(ticket) = ticket {
        match exchanged {
            Exchanged::Answered(_) | Exchanged::NotFinal => ticket.answered(),
            Exchanged::NotSent | Exchanged::Ambiguous => ticket.unanswered(),
            // Nothing was asked of the upstream: the breaker learns nothing.
            Exchanged::Withheld => drop(ticket),
        }
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
        Exchanged::Withheld => {
            tracing::warn!(key = %key, %reason, "call not sent: the lease ended first");
            worker.metrics.guards.sends_withheld.inc();
            out.fail(format.respond(problem::lease_lost()), reason)
                .await;
        }
        Exchanged::NotSent => {
            worker.metrics.upstream_failure(UpstreamFailure::NotSent);
            let p = problem::upstream_unavailable();
            out.fail(format.respond(p), reason).await;
        }
        Exchanged::Ambiguous => {
            tracing::warn!(key = %key, %reason, "upstream outcome unknown");
            worker.metrics.upstream_failure(UpstreamFailure::Ambiguous);
            let p = problem::upstream_timeout(held_for, policy.on_unknown);
            out.fail(format.respond(p), reason).await;
        }
    }
    worker.metrics.inflight.dec();
}
