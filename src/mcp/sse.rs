//! Server-sent events as their bytes arrive: the `data` of each complete event, so a
//! protected call can find its final response in an event stream while every byte is
//! passed on untouched. Lines end in `\n` or `\r\n` (what MCP servers send); an event
//! ends at a blank line (WHATWG HTML, "event stream interpretation").

use bytes::{Buf, BytesMut};
use http::{header, HeaderMap};

/// Whether a response is an event stream (`Content-Type: text/event-stream`).
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// One complete event: its raw bytes (up to and including the blank line) and its
/// `data` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub raw: Vec<u8>,
    pub data: String,
}

/// Splits a byte stream into events; bytes of an unfinished event wait in `pending`.
#[derive(Debug)]
pub struct EventSplitter {
    pending: BytesMut,
    /// Where to resume the search for an event's end.
    scanned: usize,
    /// The most an unfinished event may hold; past it the event is dropped whole.
    limit: usize,
    overflowed: bool,
}

impl EventSplitter {
    pub fn new(limit: usize) -> EventSplitter {
        EventSplitter {
            pending: BytesMut::new(),
            scanned: 0,
            limit,
            overflowed: false,
        }
    }

    /// Bytes of the unfinished event.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Give up splitting: the unfinished event's bytes.
    pub fn into_pending(self) -> BytesMut {
        self.pending
    }

    /// Whether an event larger than the limit was dropped.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Feed bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.event_end() {
            let raw = self.pending.split_to(end).to_vec();
            self.scanned = 0;
            events.push(Event {
                data: data_of(&raw),
                raw,
            });
        }
        if self.pending.len() > self.limit {
            // Skip to the end of this event without keeping it.
            self.overflowed = true;
            let keep = self.pending.len().min(3);
            self.pending.advance(self.pending.len() - keep);
            self.scanned = 0;
        }
        events
    }

    /// The bytes left over when the stream ended (an unterminated last event).
    pub fn finish(&mut self) -> Option<Event> {
        let raw = std::mem::take(&mut self.pending).to_vec();
        let data = data_of(&raw);
        (!data.is_empty()).then_some(Event { raw, data })
    }

    /// Offset just past the blank line ending the first complete event. A `\n` is only
    /// ever looked at once: whether it ends a blank line depends on the bytes before it.
    fn event_end(&mut self) -> Option<usize> {
        let buf = &self.pending[..];
        while let Some(n) = memchr::memchr(b'\n', &buf[self.scanned..]) {
            let nl = self.scanned + n;
            self.scanned = nl + 1;
            let line = &buf[..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.ends_with(b"\n") {
                return Some(nl + 1);
            }
        }
        None
    }
}

/// The `data` field values of one event's raw lines, joined with `\n`.
fn data_of(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut data = String::new();
    let mut first = true;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let value = match line.strip_prefix("data") {
            Some("") => "",
            Some(rest) => match rest.strip_prefix(':') {
                Some(v) => v.strip_prefix(' ').unwrap_or(v),
                None => continue,
            },
            None => continue,
        };
        if !first {
            data.push('\n');
        }
        data.push_str(value);
        first = false;
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_arbitrary_chunks() {
        let stream =
            b"event: message\ndata: {\"a\":1}\n\nid: 2\r\ndata: x\r\ndata:y\r\n\r\n: comment\n\n";
        for cut in 0..stream.len() {
            let mut events = EventSplitter::new(1024);
            let mut got = events.push(&stream[..cut]);
            got.extend(events.push(&stream[cut..]));
            let data: Vec<_> = got.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["{\"a\":1}", "x\ny", ""], "cut at {cut}");
            let raw: Vec<u8> = got.iter().flat_map(|e| e.raw.clone()).collect();
            assert_eq!(raw, stream);
        }
    }

    #[test]
    fn an_oversized_event_is_dropped_and_flagged() {
        let mut events = EventSplitter::new(8);
        assert!(events.push(b"data: 0123456789abcdef").is_empty());
        assert!(events.overflowed());
    }
}
