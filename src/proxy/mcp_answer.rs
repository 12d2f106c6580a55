//! The winner's exchange on an MCP route (SPEC §8): the answer streams through as it
//! comes, and what is stored is the call's **final JSON-RPC response** — from a JSON
//! answer, or picked out of an event stream (never a notification, a server request or a
//! non-final `input_required` result). The frame completing that response is held until
//! the record is written: a client acts on the response event, not on the stream's end.
//!
//! Outcome rules: a result (also `isError: true`, also a task's `CreateTaskResult`) is
//! stored as 200; a JSON-RPC error follows the rules of a 4xx (stored as 400, replayed as
//! HTTP 200); an HTTP error status, an `input_required` result, or an answer without a
//! response for the call's id releases the reservation; a stream that ends or stalls
//! before the response leaves the outcome unknown (ambiguous).

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::capture::Capture;
use super::decide::Exchanged;
use super::execute::Ended;
use super::headers::{strip_hop_by_hop, APPLICATION_JSON};
use super::outbound::Outbound;
use crate::config::RoutePolicy;
use crate::mcp::answer::{self, Final};
use crate::mcp::message::MCP_SESSION_ID;
use crate::mcp::sse::Events;
use crate::mcp::ToolCall;
use crate::store::StoredResponse;
use crate::upstream::ResponseBody;

/// What the pump found.
enum Found {
    /// The final message for the call, its bytes, and whether it is a JSON-RPC error.
    Final(Final, Option<Bytes>),
    /// The answer ended without the call's final message.
    Nothing,
}

pub(super) async fn exchange(
    response: Response<ResponseBody>,
    call: &ToolCall,
    policy: &RoutePolicy,
    timeout: Duration,
    mut out: Outbound,
) -> Ended {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let success = parts.status.is_success();
    let event_stream = is_event_stream(&parts.headers);
    let stored_headers = stored_headers(&parts.headers);
    out.set_head(Response::from_parts(parts, ()), body.size_hint());
    let limit = policy.max_response_bytes;
    let pumped = match (success, event_stream) {
        // The transport's own error (unknown session, bad request): passed on, not stored.
        (false, _) => pump_json(body, timeout, None, &mut out)
            .await
            .map(|_| Found::Nothing),
        (true, true) => pump_events(body, timeout, call, limit, &mut out).await,
        (true, false) => {
            let capture = Some(Capture::new(limit, body.size_hint().exact()));
            match pump_json(body, timeout, capture, &mut out).await {
                Ok(Some(Some(message))) => {
                    let found = answer::classify(&message, &call.id);
                    Ok(Found::Final(found, Some(message)))
                }
                // Too large to keep: completed, recorded without its body.
                Ok(Some(None)) => Ok(Found::Final(Final::Response { error: false }, None)),
                Ok(None) => Ok(Found::Nothing),
                Err(reason) => Err(reason),
            }
        }
    };
    let (exchanged, stored) = match pumped {
        Err(reason) => {
            return Ended {
                exchanged: Exchanged::Ambiguous,
                reason,
                stored: None,
                out,
            }
        }
        Ok(Found::Final(Final::Response { error }, body)) => {
            // A JSON-RPC error follows the rules of a 4xx; its replay is HTTP 200 too.
            let status = if error { 400 } else { 200 };
            let stored = StoredResponse {
                status,
                headers: stored_headers,
                body,
            };
            let storable = policy.store_statuses.contains(status);
            let exchanged = if storable {
                Exchanged::Answered(status)
            } else {
                Exchanged::NotFinal
            };
            (exchanged, storable.then_some(stored))
        }
        Ok(Found::Final(_, _) | Found::Nothing) => (Exchanged::NotFinal, None),
    };
    Ended {
        exchanged,
        reason: String::new(),
        stored,
        out,
    }
}

/// Copy a (JSON) answer through, keeping a capture when given: `Ok(Some(body))` with the
/// captured body (`None` past the limit), `Ok(None)` without a capture.
async fn pump_json(
    mut body: ResponseBody,
    timeout: Duration,
    mut capture: Option<Capture>,
    out: &mut Outbound,
) -> Result<Option<Option<Bytes>>, String> {
    loop {
        match next_frame(&mut body, timeout).await? {
            None => return Ok(capture.map(Capture::finish)),
            Some(frame) => {
                if let (Some(c), Some(data)) = (capture.as_mut(), frame.data_ref()) {
                    c.push(data);
                }
                out.push(frame).await;
            }
        }
    }
}

/// Pass events through as they come, until the call's final message: the frame that
/// completes it is held, and the rest of the stream is not read (the server closes it
/// after the response; idem has what it records).
async fn pump_events(
    mut body: ResponseBody,
    timeout: Duration,
    call: &ToolCall,
    limit: usize,
    out: &mut Outbound,
) -> Result<Found, String> {
    let mut events = Events::new(limit);
    loop {
        let Some(frame) = next_frame(&mut body, timeout).await? else {
            if events.overflowed() {
                // The response may have been the event too large to keep.
                return Ok(Found::Final(Final::Response { error: false }, None));
            }
            return Err("the event stream ended before the response to the call".to_owned());
        };
        let found = frame.data_ref().and_then(|data| {
            events.push(data).into_iter().find_map(|event| {
                match answer::classify(event.data.as_bytes(), &call.id) {
                    Final::NotOurs => None,
                    found => Some((found, Bytes::from(event.data))),
                }
            })
        });
        match found {
            None => out.push(frame).await,
            Some((found, message)) => {
                out.hold(frame);
                return Ok(Found::Final(found, Some(message)));
            }
        }
    }
}

async fn next_frame(
    body: &mut ResponseBody,
    timeout: Duration,
) -> Result<Option<Frame<Bytes>>, String> {
    match tokio::time::timeout(timeout, body.frame()).await {
        Err(_) => Err(format!("response body stalled for {timeout:?}")),
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) => Err(format!("response body failed: {e}")),
        Ok(Some(Ok(frame))) => Ok(Some(frame)),
    }
}

pub(super) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The headers a replay carries: the upstream's, without the session id (a replay goes
/// to other sessions, and clients adopt any session id they see) and with the one
/// `application/json` message's type instead of the stream's.
fn stored_headers(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    let mut stored: Vec<_> = headers
        .iter()
        .filter(|(name, _)| {
            *name != MCP_SESSION_ID
                && *name != header::CONTENT_TYPE
                && *name != header::CONTENT_LENGTH
        })
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    stored.push((header::CONTENT_TYPE, APPLICATION_JSON));
    stored
}
