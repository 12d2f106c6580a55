//! The answer of a protected MCP `tools/call` (SPEC §8): the call's **final JSON-RPC
//! response**, from a JSON answer or picked out of an event stream (never a
//! notification, a server request or a non-final `input_required` result). The frame
//! completing it in an event stream completes the answer: a client acts on that event,
//! not on the stream's end, so it is held until the record is written.
//!
//! Outcomes: a result (also `isError: true`, also a task's `CreateTaskResult`) counts as
//! status 200; a JSON-RPC error as a 4xx (400; replayed as HTTP 200 like every MCP
//! answer); an HTTP error status, an `input_required` result, or an answer without a
//! response for the call's id is not final (the reservation is released); a stream that
//! ends before the response leaves the outcome unknown.

use bytes::Bytes;
use http::{header, response, HeaderName, HeaderValue};
use http_body::SizeHint;

use super::Answer;
use crate::mcp::answer::{self, Final};
use crate::mcp::message::MCP_SESSION_ID;
use crate::mcp::sse::{is_event_stream, EventSplitter};
use crate::mcp::ToolCall;
use crate::policy::RoutePolicy;
use crate::proxy::capture::{stored_headers, Capture};
use crate::proxy::decide::Exchanged;
use crate::proxy::headers::APPLICATION_JSON;
use crate::proxy::Buffers;
use crate::store::StoredResponse;

pub struct McpAnswer<'c> {
    call: &'c ToolCall,
    policy: &'c RoutePolicy,
    /// `server.max_buffered_bytes`, which a JSON answer's copy counts against.
    buffers: &'c Buffers,
    read: Reading,
    /// The headers a replay carries.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The call's final message, once found in an event stream.
    found: Option<(Final, Bytes)>,
}

/// How the answer is read.
enum Reading {
    /// Before the head.
    Nothing,
    /// The transport's own error (unknown session, bad request): passed on, not final.
    TransportError,
    /// One JSON message, captured whole.
    Json(Capture),
    /// An event stream, split into events until the call's final message.
    Events(EventSplitter),
}

impl<'c> McpAnswer<'c> {
    pub fn new(call: &'c ToolCall, policy: &'c RoutePolicy, buffers: &'c Buffers) -> Self {
        McpAnswer {
            call,
            policy,
            buffers,
            read: Reading::Nothing,
            headers: Vec::new(),
            found: None,
        }
    }

    fn stored(&self, error: bool, body: Option<Bytes>) -> (Exchanged, Option<StoredResponse>) {
        // A JSON-RPC error follows the rules of a 4xx; `settle` decides whether it is kept.
        let status = if error { 400 } else { 200 };
        let stored = StoredResponse {
            status,
            headers: self.headers.clone(),
            body,
        };
        (Exchanged::Answered(status), Some(stored))
    }
}

impl Answer for McpAnswer<'_> {
    fn head(&mut self, head: &response::Parts, size: SizeHint) {
        let limit = self.policy.max_response_bytes;
        self.read = match (head.status.is_success(), is_event_stream(&head.headers)) {
            (false, _) => Reading::TransportError,
            (true, true) => Reading::Events(EventSplitter::new(limit)),
            (true, false) => Reading::Json(Capture::new(limit, size.exact(), self.buffers)),
        };
        // A replay goes to other sessions (clients adopt any session id they see) as one
        // `application/json` message, whatever the first answer's type was.
        let mut headers = stored_headers(&head.headers, self.policy);
        headers.retain(|(name, _)| {
            *name != MCP_SESSION_ID
                && *name != header::CONTENT_TYPE
                && *name != header::CONTENT_LENGTH
        });
        headers.push((header::CONTENT_TYPE, APPLICATION_JSON));
        self.headers = headers;
    }

    fn data(&mut self, data: &Bytes) -> bool {
        match &mut self.read {
            Reading::Json(capture) => capture.push(data),
            Reading::Events(splitter) => {
                let id = &self.call.id;
                self.found =
                    splitter.push(data).into_iter().find_map(|event| {
                        match answer::classify(event.data.as_bytes(), id) {
                            Final::NotOurs => None,
                            found => Some((found, Bytes::from(event.data))),
                        }
                    });
                return self.found.is_some();
            }
            Reading::Nothing | Reading::TransportError => {}
        }
        false
    }

    fn finish(mut self) -> Result<(Exchanged, Option<StoredResponse>), String> {
        match std::mem::replace(&mut self.read, Reading::Nothing) {
            Reading::Nothing => Err("no response head".to_owned()),
            Reading::TransportError => Ok((Exchanged::NotFinal, None)),
            Reading::Json(capture) => match capture.finish() {
                Some(message) => match answer::classify(&message, &self.call.id) {
                    Final::Response { error } => Ok(self.stored(error, Some(message))),
                    Final::NotOurs | Final::InputRequired => Ok((Exchanged::NotFinal, None)),
                },
                // Too large to keep: completed, recorded without its body.
                None => Ok(self.stored(false, None)),
            },
            Reading::Events(splitter) => match self.found.take() {
                Some((Final::Response { error }, message)) => Ok(self.stored(error, Some(message))),
                Some(_) => Ok((Exchanged::NotFinal, None)),
                // The response may have been the event too large to keep.
                None if splitter.overflowed() => Ok(self.stored(false, None)),
                None => Err("the event stream ended before the response to the call".to_owned()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use http::{HeaderName, Response};

    use super::*;

    fn call() -> ToolCall {
        ToolCall {
            id: serde_json::json!(7),
            tool: "charge".into(),
            args_hash: String::new(),
            exact: true,
            modern: false,
        }
    }

    /// The MCP path keeps the same headers as plain HTTP: credentials never, the
    /// route's `store_headers` rule, and no session id; one JSON content type.
    #[test]
    fn store_headers_apply_to_mcp_answers() {
        let mut policy =
            crate::route::tests::policy("tools", &[http::Method::POST], "/mcp", &["k"]);
        policy.store_headers.exclude = vec![HeaderName::from_static("x-trace-note")];
        let call = call();
        let head = Response::builder()
            .header("content-type", "application/json")
            .header("set-cookie", "session=secret")
            .header("mcp-session-id", "s-1")
            .header("x-trace-note", "t")
            .header("x-kept", "k")
            .body(())
            .unwrap();
        let (parts, ()) = head.into_parts();
        let mut answer = McpAnswer::new(&call, &policy, Buffers::unbounded());
        answer.head(&parts, http_body::SizeHint::default());
        let body = Bytes::from_static(br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#);
        assert!(!answer.data(&body));
        let (exchanged, stored) = answer.finish().unwrap();
        assert_eq!(exchanged, Exchanged::Answered(200));
        let names = |stored: Option<StoredResponse>| -> Vec<String> {
            let headers = stored.unwrap().headers;
            headers.iter().map(|(n, _)| n.to_string()).collect()
        };
        assert_eq!(names(stored), ["x-kept", "content-type"]);
        policy.store_headers.include = Some(vec![HeaderName::from_static("x-trace-note")]);
        let policy = Arc::new(policy);
        let mut answer = McpAnswer::new(&call, &policy, Buffers::unbounded());
        answer.head(&parts, http_body::SizeHint::default());
        answer.data(&body);
        let (_, stored) = answer.finish().unwrap();
        assert_eq!(
            names(stored),
            ["content-type"],
            "excluded wins over included; the type is set"
        );
    }
}
