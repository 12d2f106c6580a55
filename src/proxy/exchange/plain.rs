//! The answer of a plain HTTP call: its status is the outcome, and the response is
//! captured for the record only when the route stores that status ([`settle`]).

use bytes::Bytes;
use http::response;
use http_body::SizeHint;

use super::Answer;
use crate::policy::RoutePolicy;
use crate::proxy::capture::{stored_headers, Capture};
use crate::proxy::decide::{settle, Exchanged, Settle};
use crate::proxy::Buffers;
use crate::store::StoredResponse;

pub struct StatusAnswer<'p> {
    policy: &'p RoutePolicy,
    /// `server.max_buffered_bytes`, which the copy for the record counts against.
    buffers: &'p Buffers,
    /// Capture whatever the status (a reconciliation lookup's found answer).
    keep_any: bool,
    /// The status and the headers to record, once the head is in (storable answers).
    head: Option<(u16, Option<StoredHead>)>,
}

struct StoredHead {
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    body: Capture,
}

impl<'p> StatusAnswer<'p> {
    pub fn new(policy: &'p RoutePolicy, buffers: &'p Buffers) -> Self {
        StatusAnswer {
            policy,
            buffers,
            keep_any: false,
            head: None,
        }
    }

    /// An answer captured whatever its status, up to `max_response_bytes`.
    /// (A lookup, not a call: bounded by its route's `max_response_bytes` only.)
    pub fn keeping(policy: &'p RoutePolicy) -> Self {
        StatusAnswer {
            policy,
            buffers: Buffers::unbounded(),
            keep_any: true,
            head: None,
        }
    }
}

impl Answer for StatusAnswer<'_> {
    fn head(&mut self, head: &response::Parts, size: SizeHint) {
        let status = head.status.as_u16();
        let storable =
            self.keep_any || settle(Exchanged::Answered(status), self.policy) == Settle::Store;
        let kept = storable.then(|| StoredHead {
            headers: stored_headers(&head.headers, self.policy),
            body: Capture::new(self.policy.max_response_bytes, size.exact(), self.buffers),
        });
        self.head = Some((status, kept));
    }

    fn data(&mut self, data: &Bytes) -> bool {
        if let Some((_, Some(kept))) = self.head.as_mut() {
            kept.body.push(data);
        }
        false
    }

    fn finish(self) -> Result<(Exchanged, Option<StoredResponse>), String> {
        let Some((status, kept)) = self.head else {
            return Err("no response head".to_owned());
        };
        let stored = kept.map(|kept| StoredResponse {
            status,
            headers: kept.headers,
            body: kept.body.finish(),
        });
        Ok((Exchanged::Answered(status), stored))
    }
}
