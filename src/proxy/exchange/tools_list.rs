//! The answer of a `tools/list` sent as an event stream: each event that carries the
//! list is amended for the protected tools as it streams ([`crate::mcp::tools_list`]),
//! through the same frame loop as every other exchange ([`super::pump`]). Its outcome
//! is not recorded: the call is not protected.

use bytes::Bytes;
use http::response;
use http_body::SizeHint;

use super::Answer;
use crate::mcp::sse::EventSplitter;
use crate::mcp::{tools_list, McpRoute};
use crate::proxy::decide::Exchanged;
use crate::store::StoredResponse;

pub struct ToolsListAnswer<'r> {
    route: &'r McpRoute,
    /// Splits the stream into events; `None` once an event grew past `limit`, after
    /// which the rest is copied untouched.
    events: Option<EventSplitter>,
    limit: usize,
}

impl<'r> ToolsListAnswer<'r> {
    pub fn new(route: &'r McpRoute, limit: usize) -> Self {
        ToolsListAnswer {
            route,
            events: Some(EventSplitter::new(usize::MAX)),
            limit,
        }
    }
}

impl Answer for ToolsListAnswer<'_> {
    const RELAYS: bool = true;

    fn head(&mut self, _head: &response::Parts, _size: SizeHint) {}

    fn data(&mut self, _data: &Bytes) -> bool {
        false
    }

    fn relay(&mut self, data: Bytes) -> Bytes {
        let Some(splitter) = self.events.as_mut() else {
            return data;
        };
        if splitter.pending_len() + data.len() > self.limit {
            // An event too large to amend: what was held of it, then the rest, untouched.
            let pending = self.events.take().map(EventSplitter::into_pending);
            let mut out = pending.unwrap_or_default();
            out.extend_from_slice(&data);
            return out.freeze();
        }
        let mut out = Vec::new();
        for event in splitter.push(&data) {
            match tools_list::amend(event.data.as_bytes(), self.route) {
                Some(amended) => out.extend(rewrite_data(&event.raw, &amended)),
                None => out.extend(event.raw),
            }
        }
        Bytes::from(out)
    }

    fn rest(&mut self) -> Option<Bytes> {
        let last = self.events.as_mut().and_then(EventSplitter::finish)?;
        Some(Bytes::from(last.raw))
    }

    fn finish(self) -> Result<(Exchanged, Option<StoredResponse>), String> {
        Ok((Exchanged::NotFinal, None))
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
