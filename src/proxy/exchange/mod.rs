//! The one exchange with the upstream: every call idem makes (an unprotected forward, a
//! protected execution, an MCP `tools/call`, a reconciliation lookup) goes through
//! here. Sending and classifying what happened ([`Sent`]), the upstream span, the frame
//! loop with its timeout, and the capture of what is recorded live in this module; what
//! the call's *answer* is comes from an [`Answer`] extractor:
//! - [`StatusAnswer`] (plain HTTP): the response's status is the outcome;
//! - [`McpAnswer`]: the final JSON-RPC message for the call's id, from a JSON answer or
//!   picked out of an event stream;
//! - [`ToolsListAnswer`]: an MCP `tools/list` event stream, amended as it passes.
//!
//! What becomes of the reservation afterwards is not decided here: the caller passes
//! the [`Exchanged`] outcome to [`super::decide::settle`].

mod mcp;
mod plain;
mod tools_list;

pub use mcp::McpAnswer;
pub use plain::StatusAnswer;
pub use tools_list::ToolsListAnswer;

use std::time::Duration;

use bytes::Bytes;
use http::{response, Request, Response};
use http_body::{Body, Frame, SizeHint};
use opentelemetry_sdk::trace::Span;

use super::body::{ProxyBody, UpstreamBody};
use super::context::RequestContext;
use super::decide::{lookup_read, lookup_status, Exchanged, Lookup};
use super::headers::strip_hop_by_hop;
use super::outbound::Outbound;
use super::problem::{self, ProblemFormat};
use crate::policy::{Reconcile, RoutePolicy};
use crate::store::StoredResponse;
use crate::traces::request::end_upstream;
use crate::traces::RequestTrace;
use crate::upstream::{ResponseBody, SendGate, Sent};

/// What a call's answer is, read off the response as it streams to the caller.
pub trait Answer {
    /// Whether it passes frames on other than as they came ([`Answer::relay`]): then the
    /// caller's body has no known length. A constant, so the plain answers' frame loop
    /// does not carry the rewriting.
    const RELAYS: bool = false;
    /// The response head arrived (hop-by-hop headers already stripped).
    fn head(&mut self, head: &response::Parts, size: SizeHint);
    /// A data frame, before it goes on: `true` when it completes the answer (the frame
    /// is then held until the record is written, and the rest is not read).
    fn data(&mut self, data: &Bytes) -> bool;
    /// What a data frame passes on as (only with `RELAYS`).
    fn relay(&mut self, data: Bytes) -> Bytes {
        data
    }
    /// What is still held back when the body ends (only with `RELAYS`).
    fn rest(&mut self) -> Option<Bytes> {
        None
    }
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
    /// Start the span and pass its context on in `request`'s `traceparent`: the first
    /// half of the send step (see [`answered`]).
    fn start(trace: Option<&RequestTrace>, request: &mut Request<UpstreamBody>) -> Self {
        UpstreamSpan(trace.and_then(|t| t.upstream(request)).map(Box::new))
    }

    fn end(self, status: Option<u16>, failure: Option<&str>) {
        if let Some(span) = self.0 {
            end_upstream(*span, status, failure);
        }
    }
}

/// No answer came: nothing was sent ([`Exchanged::NotSent`]) or the outcome is unknown
/// ([`Exchanged::Ambiguous`]), and why.
struct Unanswered {
    exchanged: Exchanged,
    reason: String,
}

/// **The one send step** of every exchange, in three lines: [`UpstreamSpan::start`],
/// the client's `send` awaited right there, then [`answered`], which classifies what it
/// did. Not one `async fn`: a helper future would be built and then moved into its
/// caller's state, and would keep its own copy of the request (measured: ~600 bytes more
/// in every request's future, and ~650 instructions more per passthrough request).
///
/// What a send did: the answer's head with the span still open for its body, or the
/// span ended with why nothing answered. Always inlined: the answered arm moves the
/// response head, which a call would copy out and back (measured: ~30 instructions).
#[inline(always)]
fn answered(
    span: UpstreamSpan,
    sent: Sent,
) -> Result<(Response<ResponseBody>, UpstreamSpan), Unanswered> {
    let (exchanged, reason) = match sent {
        Sent::Answered(response) => return Ok((response, span)),
        Sent::NotSent(e) => (Exchanged::NotSent, e.to_string()),
        Sent::Withheld(closed) => (Exchanged::Withheld, closed.to_string()),
        Sent::Ambiguous(reason) => (Exchanged::Ambiguous, reason),
    };
    span.end(None, Some(&reason));
    Err(Unanswered { exchanged, reason })
}

/// Forward without idempotency: the answer's head, its body left to stream, or the
/// problem to answer with (502 nothing sent, 504 outcome unknown).
pub async fn forward(
    cx: &RequestContext,
    mut request: Request<UpstreamBody>,
    format: &ProblemFormat,
) -> Result<Response<ResponseBody>, Response<ProxyBody>> {
    let worker = &*cx.worker;
    let span = UpstreamSpan::start(cx.trace(), &mut request);
    let sent = worker.client.send(request, worker.upstream.timeout).await;
    match answered(span, sent) {
        Ok((mut response, span)) => {
            span.end(Some(response.status().as_u16()), None);
            strip_hop_by_hop(response.headers_mut());
            Ok(response)
        }
        Err(Unanswered {
            exchanged: Exchanged::NotSent | Exchanged::Withheld,
            ..
        }) => Err(format.respond(problem::upstream_unavailable())),
        Err(_) => Err(format.respond(problem::upstream_timeout(
            None,
            crate::policy::OnUnknown::Retry,
        ))),
    }
}

/// Execute `request`: stream the answer to `out` as it comes (holding its end), and
/// read what `answer` extracts from it. The span covers the head and the body. The
/// request is written only while the owner's lease holds (`gate`).
pub async fn execute<A: Answer>(
    cx: &RequestContext,
    mut request: Request<UpstreamBody>,
    answer: A,
    out: Outbound,
    gate: SendGate,
) -> Ended {
    let worker = &*cx.worker;
    let timeout = worker.upstream.timeout;
    let span = UpstreamSpan::start(cx.trace(), &mut request);
    let sent = worker
        .client
        .send_gated(request, timeout, Some(&gate))
        .await;
    let (response, span) = match answered(span, sent) {
        Ok(answered) => answered,
        Err(Unanswered { exchanged, reason }) => return Ended::unanswered(exchanged, reason, out),
    };
    let status = response.status().as_u16();
    let ended = pump(response, answer, out, timeout).await;
    let failure = (!ended.reason.is_empty()).then_some(ended.reason.as_str());
    span.end(Some(status), failure);
    ended
}

/// The frame loop of every exchange: pass the answer's frames on as they come (as the
/// answer relays them), until its end or the frame completing it.
pub async fn pump<A: Answer>(
    response: Response<ResponseBody>,
    mut answer: A,
    mut out: Outbound,
    timeout: Duration,
) -> Ended {
    let (mut parts, mut body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    answer.head(&parts, body.size_hint());
    let hint = match A::RELAYS {
        true => SizeHint::default(),
        false => body.size_hint(),
    };
    out.set_head(Response::from_parts(parts, ()), hint);
    loop {
        match body.next_frame(timeout).await {
            Err(reason) => return Ended::unanswered(Exchanged::Ambiguous, reason, out),
            Ok(None) => break,
            Ok(Some(frame)) => {
                if frame.data_ref().is_some_and(|data| answer.data(data)) {
                    out.hold(frame);
                    break;
                }
                let frame = match A::RELAYS {
                    true => match frame.into_data() {
                        // Nothing to pass on yet (an event still being gathered).
                        Ok(data) => match answer.relay(data) {
                            relayed if relayed.is_empty() => continue,
                            relayed => Frame::data(relayed),
                        },
                        Err(trailers) => trailers,
                    },
                    false => frame,
                };
                out.push(frame).await;
            }
        }
    }
    if let Some(rest) = A::RELAYS.then(|| answer.rest()).flatten() {
        out.push(Frame::data(rest)).await;
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

/// Ask the upstream about an attempt (`reconcile:`): the lookup is an exchange like any
/// other, bounded by the lookup's own timeout, in its own upstream span. What its answer
/// says is the pure rule of [`super::decide::lookup_status`] and [`lookup_read`].
pub async fn lookup(
    cx: &RequestContext,
    mut request: Request<UpstreamBody>,
    reconcile: &Reconcile,
    policy: &RoutePolicy,
) -> Lookup {
    let span = UpstreamSpan::start(cx.trace(), &mut request);
    let sent = cx.worker.client.send(request, reconcile.timeout).await;
    let (response, span) = match answered(span, sent) {
        Ok(answered) => answered,
        Err(Unanswered { exchanged, reason }) => {
            return Lookup::Failed(match exchanged {
                Exchanged::NotSent | Exchanged::Withheld => {
                    format!("the lookup was not sent: {reason}")
                }
                _ => format!("the lookup got no answer: {reason}"),
            })
        }
    };
    let status = response.status().as_u16();
    if let Some(verdict) = lookup_status(reconcile, status) {
        span.end(Some(status), None);
        return verdict;
    }
    let answer = StatusAnswer::keeping(policy);
    let ended = pump(response, answer, Outbound::detached(), reconcile.timeout).await;
    let failure = (!ended.reason.is_empty()).then_some(ended.reason.as_str());
    span.end(Some(status), failure);
    let read = match ended.stored {
        Some(stored) if failure.is_none() => Ok(stored),
        _ => Err(ended.reason),
    };
    lookup_read(reconcile, status, read)
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
