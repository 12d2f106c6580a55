//! An MCP endpoint's messages (SPEC §8). A protected `tools/call` goes through the
//! idempotent flow with its JSON-RPC id as the problem format; a `tools/list` is
//! forwarded and its answer amended for the protected tools; everything else (initialize,
//! server/discover, notifications, client responses, GET streams, DELETE, tasks/*) is
//! passed through with every header, and without a body parse when the `Mcp-Method` /
//! `Mcp-Name` headers already say it is not a protected call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, Response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::body::{full, stream, ChannelBody, ProxyBody, UpstreamBody};
use super::context::RequestContext;
use super::exchange;
use super::forward::upstream_request;
use super::idempotency::{protect_read, Inbound};
use super::intent::read_body;
use super::problem::{self, ProblemFormat};
use super::{Handled, Worker};
use crate::body::BodyView;
use crate::mcp::sse::{is_event_stream, EventSplitter};
use crate::mcp::{classify, hint, tools_list, HeaderHint, McpRoute, Message};
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
        HeaderHint::Pass => return pass(worker, None, inbound, Either::Right(body)).await,
        HeaderHint::ToolsList => {
            return pass(worker, Some(route), inbound, Either::Right(body)).await
        }
        HeaderHint::NeedBody => {}
    }
    let limit = inbound.policy.max_request_bytes;
    let read = read_body(body, &inbound.parts.headers, limit, worker.upstream.timeout).await;
    let view = match read {
        Ok(raw) => BodyView::new(raw),
        Err(p) => return Handled::answered(p.into_response(), Outcome::Rejected),
    };
    let raw = Either::Left(Full::new(view.raw().clone()));
    match classify(&view, &inbound.parts.headers, route) {
        Message::ToolCall(call) => protect_read(cx, inbound, view, Some(call)).await,
        Message::ToolsList => pass(worker, Some(route), inbound, raw).await,
        Message::Other => pass(worker, None, inbound, raw).await,
    }
}

/// Forward unprotected; with `amend`, a `tools/list` whose answer is amended.
async fn pass(
    worker: &Worker,
    amend: Option<&Arc<McpRoute>>,
    inbound: Inbound,
    body: UpstreamBody,
) -> Handled {
    let started = Instant::now();
    let url = &worker.upstream.url;
    let request = upstream_request(url, inbound.parts, body, inbound.client_ip, None);
    let limit = inbound.policy.max_response_bytes;
    let format = ProblemFormat::default();
    let response = match exchange::forward(worker, None, request, &format).await {
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
/// (bounded) and amended; an event stream is amended event by event as it streams.
async fn amended(
    worker: &Worker,
    route: Arc<McpRoute>,
    response: Response<ResponseBody>,
    limit: usize,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    if is_event_stream(&parts.headers) {
        parts.headers.remove(header::CONTENT_LENGTH);
        let (tx, rx) = mpsc::channel(8);
        let timeout = worker.upstream.timeout;
        let finished = Arc::new(AtomicBool::new(false));
        let amend = amend_events(body, route, limit, timeout, tx, finished.clone());
        worker.tasks.spawn(amend);
        let hint = http_body::SizeHint::default();
        let body = ChannelBody::new(rx, hint, finished);
        return Response::from_parts(parts, ProxyBody::Channel(body));
    }
    if body.size_hint().exact().is_some_and(|n| n > limit as u64) {
        return Response::from_parts(parts, stream(body));
    }
    let read =
        crate::time_bound::bounded(worker.upstream.timeout, Limited::new(body, limit).collect());
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

type Tx = mpsc::Sender<Result<http_body::Frame<Bytes>, super::BoxError>>;

/// Copy an event stream, amending the `tools/list` result event. An event larger than
/// `limit` switches to copying the rest untouched.
async fn amend_events(
    mut body: ResponseBody,
    route: Arc<McpRoute>,
    limit: usize,
    timeout: std::time::Duration,
    tx: Tx,
    finished: Arc<AtomicBool>,
) {
    let mut events = Some(EventSplitter::new(usize::MAX));
    loop {
        let frame = match body.next_frame(timeout).await {
            Ok(Some(frame)) => frame,
            Err(reason) => {
                let _ = tx.send(Err(reason.into())).await;
                return;
            }
            Ok(None) => {
                if let Some(last) = events.as_mut().and_then(EventSplitter::finish) {
                    let _ = tx
                        .send(Ok(http_body::Frame::data(Bytes::from(last.raw))))
                        .await;
                }
                // The whole stream went out: the caller's body may end cleanly.
                finished.store(true, Ordering::Release);
                return;
            }
        };
        let out = match (events.as_mut(), frame.into_data()) {
            (Some(splitter), Ok(data)) if splitter.pending_len() + data.len() <= limit => {
                let mut out = Vec::new();
                for event in splitter.push(&data) {
                    match tools_list::amend(event.data.as_bytes(), &route) {
                        Some(amended) => out.extend(rewrite_data(&event.raw, &amended)),
                        None => out.extend(event.raw),
                    }
                }
                out
            }
            (Some(_), Ok(data)) => {
                let mut splitter = events
                    .take()
                    .map(EventSplitter::into_pending)
                    .unwrap_or_default();
                splitter.extend_from_slice(&data);
                splitter.to_vec()
            }
            (None, Ok(data)) => data.to_vec(),
            (_, Err(_trailers)) => continue,
        };
        if !out.is_empty()
            && tx
                .send(Ok(http_body::Frame::data(Bytes::from(out))))
                .await
                .is_err()
        {
            return;
        }
    }
}

/// The event with its `data` lines replaced by one line of `data` (other fields kept).
fn rewrite_data(raw: &[u8], data: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(raw);
    let mut out = Vec::with_capacity(raw.len() + data.len());
    let mut wrote = false;
    for line in text.split('\n') {
        let bare = line.strip_suffix('\r').unwrap_or(line);
        if bare.is_empty() {
            continue;
        }
        if bare == "data" || bare.starts_with("data:") {
            if !wrote {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(data);
                out.push(b'\n');
                wrote = true;
            }
            continue;
        }
        out.extend_from_slice(bare.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::rewrite_data;

    #[test]
    fn rewriting_an_event_keeps_its_other_fields() {
        let raw = b"event: message\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n";
        let out = rewrite_data(raw, br#"{"a":2}"#);
        assert_eq!(out, b"event: message\nid: 7\ndata: {\"a\":2}\n\n");
    }
}
