//! From request to intent: read the body (bounded) and derive key, scope, store key,
//! fingerprint and credential hash. Pure apart from reading the body.

use bytes::{Bytes, BytesMut};
use http::{header, request};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::buffers::Held;
use super::problem::{self, Problem};
use super::{Buffers, Worker};
use crate::body::BodyView;
use crate::key::{self, KeyError, StoreKey};
use crate::mcp::ToolCall;
use crate::path::Captures;
use crate::policy::RoutePolicy;
use crate::store::{Record, Sealing};
use crate::template::RequestView;

/// The identity of one intent, derived from the request.
pub struct Intent {
    pub key: String,
    pub scope: String,
    pub store_key: StoreKey,
    pub fingerprint: [u8; 32],
    /// The credential hash a record made now carries: keyed when the store's sealing
    /// layer has a credential key (`store.encryption.credential_key_file`), else the plain digest.
    pub credentials: [u8; 32],
    /// The plain digest when `credentials` is keyed: records stored before the key was
    /// set carry it, and still match the same caller.
    pub credentials_plain: Option<[u8; 32]>,
}

impl Intent {
    /// Derive the intent; `Ok(None)` when no key alternative (or the scope) resolves.
    /// `mcp`: the protected MCP call on an MCP route (its tool and arguments stand for
    /// the body in the fingerprint).
    pub fn derive(
        policy: &RoutePolicy,
        parts: &request::Parts,
        captures: &Captures,
        body: &BodyView,
        mcp: Option<&ToolCall>,
        sealing: &Sealing,
    ) -> Result<Option<Intent>, KeyError> {
        // Before anything is derived or reserved; on a route that reads the body, the
        // parse the key or the fingerprint makes anyway, so no extra cost.
        if mcp.is_none() && policy.needs_body() && body.has_duplicate_member() {
            return Err(KeyError::DuplicateMember);
        }
        let view = RequestView {
            method: &parts.method,
            route: &policy.name,
            captures,
            query: parts.uri.query(),
            headers: &parts.headers,
            body,
            mcp,
        };
        let Some(key) = key::render_key(policy, &view)? else {
            return Ok(None);
        };
        let Some(scope) = key::render_scope(policy, &view)? else {
            return Ok(None);
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        // As matching reads it (issue 46 §6): `/x/` repeating `/x` is a replay. Borrowed
        // (one scan) for a path already in that form.
        let path = match policy.fingerprint.path {
            true => crate::path::normalised(path, policy.path.is_case_insensitive()),
            false => std::borrow::Cow::Borrowed(path),
        };
        let plain = credentials(policy, &parts.headers);
        let keyed = sealing.credential_hash(&plain);
        Ok(Some(Intent {
            store_key: StoreKey::new(&policy.name, &scope, &key),
            fingerprint: key::fingerprint_with(
                &policy.fingerprint,
                &parts.method,
                &path,
                body,
                mcp.map(|call| call.args_hash.as_bytes()),
            ),
            credentials: keyed.unwrap_or(plain),
            credentials_plain: keyed.map(|_| plain),
            key,
            scope,
        }))
    }

    /// Whether a record's credential hash is this caller's (keyed, or plain from before
    /// the credential key).
    pub fn same_caller(&self, credentials: &[u8; 32]) -> bool {
        *credentials == self.credentials || Some(*credentials) == self.credentials_plain
    }

    /// A fresh in-progress reservation for this intent.
    pub fn reservation(&self, policy: &RoutePolicy) -> Record {
        Record::in_progress(
            &policy.name,
            &self.scope,
            &self.key,
            self.fingerprint,
            self.credentials,
            policy.lease,
        )
    }
}

/// The request's credential hash; the route's precomputed one when it carries none of
/// the bound headers (the same digest: absent headers hash as zero values).
fn credentials(policy: &RoutePolicy, headers: &http::HeaderMap) -> [u8; 32] {
    let names = &policy.bind_credentials;
    if names.iter().any(|name| headers.contains_key(name)) {
        return key::credential_hash(names, headers);
    }
    *policy
        .credentials_absent
        .get_or_init(|| key::credential_hash(names, &http::HeaderMap::new()))
}

/// The problem for a key that could not be derived.
pub fn key_problem(error: KeyError) -> Problem {
    match error {
        KeyError::BodyNotJson => problem::body_not_json(),
        KeyError::Invalid(reason) => problem::key_invalid(&reason),
        KeyError::DuplicateMember => problem::invalid_body(
            "a JSON object in it names the same member twice, which parsers read differently",
        ),
    }
}

/// Read the whole body, refusing more than `limit` bytes (at once when the declared
/// `Content-Length` is already over it). Never a silent bypass: too large is a 413.
/// Within the worker's `body_read_timeout`, and within `server.max_buffered_bytes`
/// (503 `overloaded`; a declared length is taken up front); the body returned holds
/// its share of that budget until its last clone is dropped.
pub async fn read_body(
    body: Incoming,
    headers: &http::HeaderMap,
    limit: usize,
    worker: &Worker,
) -> Result<Bytes, Problem> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(problem::body_too_large(limit));
    }
    let buffers = &worker.buffers;
    let mut held = Held::default();
    let declared = declared.map_or(0, |n| n as usize);
    if !buffers.cover(&mut held, declared) {
        return Err(overloaded(buffers));
    }
    let read = collect(body, limit, buffers, held, declared);
    match crate::time_bound::bounded(worker.body_read_timeout, read).await {
        Err(_) => Err(problem::body_invalid("it was not received in time")),
        Ok(read) => read,
    }
}

fn overloaded(buffers: &Buffers) -> Problem {
    buffers.refused.inc();
    problem::overloaded(1)
}

/// The body's frames, each covered by the budget before it is kept.
async fn collect(
    body: Incoming,
    limit: usize,
    buffers: &Buffers,
    mut held: Held,
    declared: usize,
) -> Result<Bytes, Problem> {
    let mut body = Limited::new(body, limit);
    // One chunk (the usual case) is kept as it came; more are joined.
    let mut first: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(problem::body_too_large(limit));
            }
            Err(e) => return Err(problem::body_invalid(&e.to_string())),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len += data.len();
        // A second chunk is copied into a buffer of the whole length: both count.
        let need = if first.is_some() { len * 2 } else { len };
        if !buffers.cover(&mut held, need.max(declared)) {
            return Err(overloaded(buffers));
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            None => joined.extend_from_slice(&data),
            Some(head) => {
                joined.reserve(declared.max(len));
                joined.extend_from_slice(&head);
                joined.extend_from_slice(&data);
            }
        }
    }
    let bytes = match first {
        Some(bytes) => bytes,
        None => joined.freeze(),
    };
    Ok(held.attach(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::tests::policy;

    /// The precomputed hash of a caller without credentials is the digest the full
    /// computation gives, and a caller with one gets its own.
    #[test]
    fn credentials_absent_is_the_computed_digest() {
        let policy = policy("r", &[http::Method::POST], "/x", &["k"]);
        let mut headers = http::HeaderMap::new();
        headers.insert("x-other", http::HeaderValue::from_static("1"));
        let computed = key::credential_hash(&policy.bind_credentials, &headers);
        assert_eq!(credentials(&policy, &headers), computed);
        assert_eq!(credentials(&policy, &headers), computed, "from the cache");
        headers.insert("authorization", http::HeaderValue::from_static("Bearer a"));
        let with = credentials(&policy, &headers);
        assert_ne!(with, computed);
        assert_eq!(
            with,
            key::credential_hash(&policy.bind_credentials, &headers)
        );
    }
}
