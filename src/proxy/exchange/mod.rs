//! The one exchange with the upstream: every call idem makes (an unprotected forward, a
//! protected execution, an MCP `tools/call`, a reconciliation lookup) goes through
//! here. Sending and classifying what happened ([`Sent`]), the upstream span, the frame
//! loop with its timeout, and the capture of what is recorded live in this module; what
//! the call's *answer* is comes from an [`Answer`] extractor:
//! - [`StatusAnswer`] (plain HTTP): the response's status is the outcome;
//! - [`McpAnswer`]: the final JSON-RPC message for the call's id, from a JSON answer or
//!   picked out of an event stream.
//!
//! What becomes of the reservation afterwards is not decided here: the caller passes
//! the [`Exchanged`] outcome to [`super::decide::settle`].

mod mcp;
mod plain;

pub use mcp::McpAnswer;
pub use plain::StatusAnswer;

use std::time::Duration;

use bytes::Bytes;
use http::{response, Request, Response};
use http_body::{Body, SizeHint};
use opentelemetry_sdk::trace::Span;

use super::body::{ProxyBody, UpstreamBody};
use super::context::RequestContext;
use super::decide::Exchanged;
use super::headers::strip_hop_by_hop;
use super::outbound::Outbound;
use super::problem::{self, ProblemFormat};
use super::Worker;
use crate::config::{Found, Reconcile, RoutePolicy};
use crate::store::StoredResponse;
use crate::traces::request::end_upstream;
use crate::traces::RequestTrace;
use crate::upstream::{ResponseBody, Sent};

/// What a call's answer is, read off the response as it streams to the caller.
pub trait Answer {
    /// The response head arrived (hop-by-hop headers already stripped).
    fn head(&mut self, head: &response::Parts, size: SizeHint);
    /// A data frame, before it goes on: `true` when it completes the answer (the frame
    /// is then held until the record is written, and the rest is not read).
    fn data(&mut self, data: &Bytes) -> bool;
    /// The body ended, or a frame completed the answer: the outcome and the response to
    /// record if the route stores it. `Err`: the answer is missing, the outcome unknown.
    fn finish(self) -> Result<(Exchanged, Option<StoredResponse>), String>;
}

/// How an exchange with the upstream ended.
pub struct Ended {
    pub exchanged: Exchanged,
    /// Why the outcome is unknown or nothing was sent (logged; ends the caller's body).
    pub reason: String,
    /// The response to record, when the route may store it.
    pub stored: Option<StoredResponse>,
    /// The caller's side: its end (and the head, if nothing went out yet) still held.
    pub out: Outbound,
}

/// The upstream call's client span (traces on and sampled), ended in one place.
struct UpstreamSpan(Option<Box<Span>>);

impl UpstreamSpan {
    /// Start the span and pass its context on in `request`'s `traceparent`.
    fn start(trace: Option<&RequestTrace>, request: &mut Request<UpstreamBody>) -> Self {
        UpstreamSpan(trace.and_then(|t| t.upstream(request)).map(Box::new))
    }

    fn end(self, status: Option<u16>, failure: Option<&str>) {
        if let Some(span) = self.0 {
            end_upstream(*span, status, failure);
        }
    }
}

/// Forward without idempotency: the answer's head, its body left to stream, or the
/// problem to answer with (502 nothing sent, 504 outcome unknown).
pub async fn forward(
    worker: &Worker,
    trace: Option<&RequestTrace>,
    mut request: Request<UpstreamBody>,
    format: &ProblemFormat,
) -> Result<Response<ResponseBody>, Response<ProxyBody>> {
    // The span starts here, and the client's future is awaited right here, not in a
    // helper future: every nesting level keeps its own copy of the request in its state
    // (measured: ~600 bytes more in every request's future).
    let span = UpstreamSpan::start(trace, &mut request);
    let sent = worker.client.send(request, worker.upstream.timeout).await;
    match sent {
        Sent::Answered(mut response) => {
            span.end(Some(response.status().as_u16()), None);
            strip_hop_by_hop(response.headers_mut());
            Ok(response)
        }
        Sent::NotSent(e) => {
            span.end(None, Some(&e.to_string()));
            Err(format.respond(problem::upstream_unavailable()))
        }
        Sent::Ambiguous(reason) => {
            span.end(None, Some(&reason));
            Err(format.respond(problem::upstream_timeout(
                None,
                crate::config::OnUnknown::Retry,
            )))
        }
    }
}

/// Execute `request`: stream the answer to `out` as it comes (holding its end), and
/// read what `answer` extracts from it. The span covers the head and the body.
pub async fn execute<A: Answer>(
    cx: &RequestContext,
    mut request: Request<UpstreamBody>,
    answer: A,
    out: Outbound,
) -> Ended {
    let worker = &*cx.worker;
    let timeout = worker.upstream.timeout;
    let span = UpstreamSpan::start(cx.trace(), &mut request);
    let sent = worker.client.send(request, timeout).await;
    let (ended, status) = match sent {
        Sent::NotSent(e) => (
            Ended::unanswered(Exchanged::NotSent, e.to_string(), out),
            None,
        ),
        Sent::Ambiguous(reason) => (Ended::unanswered(Exchanged::Ambiguous, reason, out), None),
        Sent::Answered(response) => {
            let status = response.status().as_u16();
            (pump(response, answer, out, timeout).await, Some(status))
        }
    };
    let failure = (!ended.reason.is_empty()).then_some(ended.reason.as_str());
    span.end(status, failure);
    ended
}

/// Pass the answer's frames on as they come, until its end or the frame completing it.
async fn pump<A: Answer>(
    response: Response<ResponseBody>,
    mut answer: A,
    mut out: Outbound,
    timeout: Duration,
) -> Ended {
    let (mut parts, mut body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    answer.head(&parts, body.size_hint());
    out.set_head(Response::from_parts(parts, ()), body.size_hint());
    loop {
        match body.next_frame(timeout).await {
            Err(reason) => return Ended::unanswered(Exchanged::Ambiguous, reason, out),
            Ok(None) => break,
            Ok(Some(frame)) => {
                if frame.data_ref().is_some_and(|data| answer.data(data)) {
                    out.hold(frame);
                    break;
                }
                out.push(frame).await;
            }
        }
    }
    match answer.finish() {
        Err(reason) => Ended::unanswered(Exchanged::Ambiguous, reason, out),
        Ok((exchanged, stored)) => Ended {
            exchanged,
            reason: String::new(),
            stored,
            out,
        },
    }
}

/// What a reconciliation lookup said about an attempt whose outcome was unknown.
pub enum Lookup {
    /// It happened: this answer is the outcome.
    Found(StoredResponse),
    /// It never happened.
    Absent,
    /// No answer that says either (another status, timeout, refused).
    Failed(String),
}

/// Ask the upstream about an attempt (`reconcile:`): the lookup is an exchange like any
/// other, bounded by the lookup's own timeout, in its own upstream span.
pub async fn lookup(
    cx: &RequestContext,
    mut request: Request<UpstreamBody>,
    reconcile: &Reconcile,
    policy: &RoutePolicy,
) -> Lookup {
    let worker = &*cx.worker;
    let span = UpstreamSpan::start(cx.trace(), &mut request);
    let sent = worker.client.send(request, reconcile.timeout).await;
    let response = match sent {
        Sent::Answered(response) => response,
        Sent::NotSent(e) => {
            let reason = format!("the lookup was not sent: {e}");
            span.end(None, Some(&reason));
            return Lookup::Failed(reason);
        }
        Sent::Ambiguous(reason) => {
            let reason = format!("the lookup got no answer: {reason}");
            span.end(None, Some(&reason));
            return Lookup::Failed(reason);
        }
    };
    let status = response.status().as_u16();
    let absent = reconcile.absent.contains(&status);
    if !reconcile.found.contains(&status) {
        span.end(Some(status), None);
        return match absent {
            true => Lookup::Absent,
            false => Lookup::Failed(format!("the lookup answered {status}")),
        };
    }
    let answer = StatusAnswer::keeping(policy);
    let ended = pump(response, answer, Outbound::detached(), reconcile.timeout).await;
    let failure = (!ended.reason.is_empty()).then_some(ended.reason.as_str());
    span.end(Some(status), failure);
    let stored = match ended.stored {
        Some(stored) if failure.is_none() => stored,
        _ => return Lookup::Failed(format!("the lookup's answer broke off: {}", ended.reason)),
    };
    // A search's empty 200 is not "found" (`found_json`): absent if its status says so.
    match reconcile.read_found(stored.body.as_deref()) {
        Found::Yes => Lookup::Found(stored),
        Found::Empty if absent => Lookup::Absent,
        Found::Empty => Lookup::Failed(format!(
            "the lookup answered {status} without the attempt at found_json"
        )),
        Found::Unreadable(why) => Lookup::Failed(format!("found_json: {why}")),
    }
}

impl Ended {
    fn unanswered(exchanged: Exchanged, reason: String, out: Outbound) -> Ended {
        Ended {
            exchanged,
            reason,
            stored: None,
            out,
        }
    }
}
