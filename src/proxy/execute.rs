//! The winner's upstream call, **not tied to the client connection**: if the caller
//! disconnects, the call still reads the upstream response and records the outcome, and
//! the caller's retry gets the replay.
//!
//! The call starts in the caller's own task ([`Started`]) and moves to a task of its
//! own only when it has to: when the caller goes away before the answer, or when the
//! answer's head has gone to the caller while the call still runs (a streamed body, the
//! record still being written). The usual short call thus costs no spawn and no wake-up
//! across tasks. While it runs in the caller's task, hyper polls it on every wake-up, so
//! the lease's renewal timer (every `lease/3`) is served as in a task of its own; once
//! the caller reads the body, which it may do slowly, the call is already on its own.
//!
//! The response streams to the caller as it arrives ([`Outbound`]): every frame goes
//! out as soon as the upstream sends it, and only the **end of the response is held
//! until the record is written**, so a caller who has the whole response and repeats the
//! request gets the replay, never a 409.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use super::body::{ProxyBody, UpstreamBody};
use super::breaker::Ticket;
use super::context::RequestContext;
use super::decide::{settle, Exchanged, Settle};
use super::exchange::{self, Ended, McpAnswer, StatusAnswer};
use super::lease::{renewing, LeaseHolder};
use super::outbound::Outbound;
use super::problem::{self, ProblemFormat};
use crate::config::{OnConcurrent, RoutePolicy};
use crate::key::StoreKey;
use crate::mcp::ToolCall;
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
    pub request: Request<UpstreamBody>,
    /// The route's breaker hears whether the upstream answered (`breaker:`).
    pub ticket: Option<Ticket>,
}

/// Start the call; the future yields the response for the caller (streaming, or a
/// problem). Dropping it does not stop the call.
pub fn start(cx: RequestContext, call: Call) -> Started {
    let (reply, answer) = oneshot::channel();
    let tasks = cx.worker.tasks.clone();
    Started {
        // Boxed where it is made: the call's future is ~5 KB; boxed, it is moved into a
        // task, if it must be, as one pointer.
        call: Some(Box::pin(run(cx, call, reply))),
        answer,
        tasks,
    }
}

/// A call in progress, polled in the caller's task until it has the caller's answer.
pub struct Started {
    call: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    answer: oneshot::Receiver<Response<ProxyBody>>,
    tasks: TaskTracker,
}

impl Started {
    /// The call goes on in a task of its own (`tasks`: the shutdown waits for it).
    fn detach(&mut self) {
        if let Some(call) = self.call.take() {
            // A drop outside any runtime is the process exiting: nothing left to run it.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                self.tasks.spawn_on(call, &runtime);
            }
        }
    }
}

impl Future for Started {
    type Output = Result<Response<ProxyBody>, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(call) = self.call.as_mut() {
            if call.as_mut().poll(cx).is_ready() {
                self.call = None;
            }
        }
        let answer = std::task::ready!(Pin::new(&mut self.answer).poll(cx));
        // The caller has its answer; whatever the call still does (the body's frames,
        // the record), it does on its own, not at the pace of the caller's reading.
        self.detach();
        Poll::Ready(answer)
    }
}

impl Drop for Started {
    /// The caller went away before its answer: the call carries on without it.
    fn drop(&mut self) {
        self.detach();
    }
}

async fn run(cx: RequestContext, call: Call, reply: oneshot::Sender<Response<ProxyBody>>) {
    let Call {
        policy,
        format,
        mcp,
        key,
        record,
        request,
        ticket,
    } = call;
    let worker = cx.worker.clone();
    worker.metrics.inflight.inc();
    let started = Instant::now();
    let waiters = policy.on_concurrent == OnConcurrent::Wait;
    let out = Outbound::new(reply, worker.upstream.timeout);
    // Boxed: the exchange is the largest part of the call, and inline it would make
    // the call's future, boxed once in `start`, larger.
    let mut work = match mcp.as_deref() {
        Some(call) => {
            let answer = McpAnswer::new(call, &policy);
            futures_util::future::Either::Left(Box::pin(exchange::execute(
                &cx, request, answer, out,
            )))
        }
        None => {
            let answer = StatusAnswer::new(&policy);
            futures_util::future::Either::Right(Box::pin(exchange::execute(
                &cx, request, answer, out,
            )))
        }
    };
    let times = (policy.lease, policy.retention);
    let holder = LeaseHolder::new(cx.clone(), key, record, times, waiters);
    let (holder, ended) = renewing(holder, std::pin::Pin::new(&mut work)).await;
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
