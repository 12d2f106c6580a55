//! The buffered request body of a protected route, parsed as JSON at most once.

use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::Value;

/// A request body read up to the route's `max_request_bytes`.
#[derive(Debug, Default)]
pub struct BodyView {
    raw: Bytes,
    json: OnceLock<Option<Value>>,
}

impl BodyView {
    pub fn new(raw: Bytes) -> Self {
        BodyView {
            raw,
            json: OnceLock::new(),
        }
    }

    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The body as JSON, or `None` if it is empty or not valid JSON.
    pub fn json(&self) -> Option<&Value> {
        self.json
            .get_or_init(|| {
                if self.raw.is_empty() {
                    None
                } else {
                    serde_json::from_slice(&self.raw).ok()
                }
            })
            .as_ref()
    }
}
