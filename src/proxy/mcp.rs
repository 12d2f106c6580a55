//! An MCP endpoint's messages (SPEC §8). A protected `tools/call` goes through the
//! idempotent flow with its JSON-RPC id as the problem format; a `tools/list` is
//! forwarded and its answer amended for the protected tools; everything else (initialize,
//! server/discover, notifications, client responses, GET streams, DELETE, tasks/*) is
//! passed through with every header. Every POST is read (bounded) and its body decides;
//! a message idem refuses (headers that disagree with the body, a batch holding a
//! protected call, a duplicate member) is answered here and never forwarded.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::oneshot;

use super::body::{full, stream, ProxyBody, UpstreamBody};
use super::context::RequestContext;
use super::decide::Exchanged;
use super::exchange::{self, ToolsListAnswer};
use super::forward::upstream_request;
use super::headers::APPLICATION_JSON;
use super::idempotency::{protect_read, Inbound};
use super::intent::read_body;
use super::outbound::Outbound;
use super::problem::{self, ProblemFormat};
use super::{Handled, Worker};
use crate::body::BodyView;
use crate::mcp::sse::is_event_stream;
use crate::mcp::{answer, classify, hint, tools_list, HeaderHint, McpRoute, Message, Refusal};
use crate::mcp::{HEADER_MISMATCH, PARSE_ERROR};
use crate::upstream::ResponseBody;
use crate::vocabulary::Outcome;

pub async fn handle(
    cx: &RequestContext,
    route: &Arc<McpRoute>,
    inbound: Inbound,
    body: Incoming,
) -> Handled {
    let worker = &*cx.worker;
    match hint(&inbound.parts.method, &inbound.parts.headers, route) {
        HeaderHint::Pass => return pass(cx, None, inbound, Either::Right(body)).await,
        HeaderHint::NeedBody => {}
    }
    let limit = inbound.policy.max_request_bytes;
    let read = read_body(body, &inbound.parts.headers, limit, worker).await;
    let view = match read {
        Ok(raw) => BodyView::new(raw),
        Err(p) => return Handled::answered(p.into_response(), Outcome::Rejected),
    };
    let raw = Either::Left(Full::new(view.raw().clone()));
    match classify(&view, &inbound.parts.headers, route) {
        Message::ToolCall(call) => protect_read(cx, inbound, view, Some(call)).await,
        Message::ToolsList => pass(cx, Some(route), inbound, raw).await,
        Message::Other => pass(cx, None, inbound, raw).await,
        Message::Refused(refusal) => Handled::answered(refused(refusal), Outcome::Rejected),
    }
}

/// idem's own answer to a message it does not forward (issue 46 §7, §8).
fn refused(refusal: Refusal) -> Response<ProxyBody> {
    match refusal {
        // MCP 2026-07-28: HTTP 400 with the JSON-RPC error `-32020`.
        Refusal::HeaderMismatch { id, detail } => {
            let message = format!(
                "Header mismatch: {detail}. idem did not forward this message and nothing was \
                 executed; send the Mcp-Method and Mcp-Name headers that mirror the body."
            );
            let error = answer::jsonrpc_error(&id, HEADER_MISMATCH, &message);
            json(StatusCode::BAD_REQUEST, &error)
        }
        Refusal::Batch { requests, modern } => {
            let mut protected: Vec<&str> =
                requests.iter().filter_map(|(_, t)| t.as_deref()).collect();
            protected.sort_unstable();
            protected.dedup();
            let alone = protected.join(", ");
            let p = problem::invalid_body(&format!(
                "it is a JSON-RPC batch holding a call to {alone}, which idem makes safe to \
                 repeat one request at a time; nothing in the batch was forwarded or executed. \
                 Send each call to {alone} as a request of its own, and the rest of the batch \
                 again"
            ));
            if requests.is_empty() {
                return p.into_response();
            }
            let document: Value = serde_json::from_slice(&p.body()).unwrap_or_default();
            let answers: Vec<Value> = requests
                .iter()
                .map(|(id, tool)| match tool {
                    Some(_) => {
                        let bytes = answer::tool_error(id, &p.detail, document.clone(), modern);
                        serde_json::from_slice(&bytes).unwrap_or_default()
                    }
                    None => answer::jsonrpc_error(id, -32600, &p.detail),
                })
                .collect();
            json(StatusCode::OK, &Value::Array(answers))
        }
        // JSON-RPC's parse error, as an MCP server answers a body it cannot parse.
        Refusal::Unreadable => {
            let message = "Parse error: idem could not read this body as JSON (RFC 8259, at \
                           most 128 levels of nesting; NaN and Infinity are not JSON), so it \
                           did not forward it and nothing was executed. Send the message as \
                           valid JSON.";
            json(
                StatusCode::BAD_REQUEST,
                &answer::jsonrpc_error(&Value::Null, PARSE_ERROR, message),
            )
        }
        Refusal::Duplicate {
            id,
            tool_call,
            modern,
        } => {
            let p = problem::invalid_body(
                "a JSON object in it names the same member twice, which parsers read differently",
            );
            match id {
                Some(id) if tool_call => p.into_tool_error(&id, modern),
                _ => p.into_response(),
            }
        }
    }
}

fn json(status: StatusCode, value: &Value) -> Response<ProxyBody> {
    let mut response = Response::new(full(serde_json::to_vec(value).unwrap_or_default()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, APPLICATION_JSON);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Forward unprotected; with `amend`, a `tools/list` whose answer is amended.
async fn pass(
    cx: &RequestContext,
    amend: Option<&Arc<McpRoute>>,
    inbound: Inbound,
    body: UpstreamBody,
) -> Handled {
    let started = Instant::now();
    let worker = &*cx.worker;
    let url = &worker.upstream.url;
    let request = upstream_request(url, inbound.parts, body, inbound.client_ip, None);
    let limit = inbound.policy.max_response_bytes;
    let format = ProblemFormat::default();
    let response = match exchange::forward(cx, request, &format).await {
        Ok(response) => match amend {
            Some(route) if response.status().is_success() => {
                amended(worker, route.clone(), response, limit).await
            }
            _ => response.map(stream),
        },
        Err(problem) => problem,
    };
    Handled::answered(response, Outcome::Passthrough).upstream_since(started)
}

/// A `tools/list` answer with the protected tools marked: a JSON answer is read whole
/// (bounded) and amended; an event stream is amended event by event as it streams, by
/// the exchange's frame loop in a task of its own ([`ToolsListAnswer`]).
async fn amended(
    worker: &Worker,
    route: Arc<McpRoute>,
    response: Response<ResponseBody>,
    limit: usize,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    let timeout = worker.upstream.timeout;
    if is_event_stream(&parts.headers) {
        parts.headers.remove(header::CONTENT_LENGTH);
        let response = Response::from_parts(parts, body);
        let (reply, head) = oneshot::channel();
        let out = Outbound::new(reply, timeout, &worker.buffers);
        worker.tasks.spawn(async move {
            let answer = ToolsListAnswer::new(&route, limit);
            let mut ended = exchange::pump(response, answer, out, timeout).await;
            match ended.exchanged {
                Exchanged::Ambiguous => {
                    let p = problem::upstream_unavailable().into_response();
                    ended.out.fail(p, ended.reason).await;
                }
                _ => ended.out.finish().await,
            }
        });
        return head
            .await
            .unwrap_or_else(|_| problem::upstream_unavailable().into_response());
    }
    if body.size_hint().exact().is_some_and(|n| n > limit as u64) {
        return Response::from_parts(parts, stream(body));
    }
    let read = crate::time_bound::bounded(timeout, Limited::new(body, limit).collect());
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => return problem::upstream_unavailable().into_response(),
    };
    let bytes = match tools_list::amend(&bytes, &route) {
        Some(amended) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Bytes::from(amended)
        }
        None => bytes,
    };
    Response::from_parts(parts, full(bytes))
}
