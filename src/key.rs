//! Pure key derivation: route policy + request view → rendered key, store key,
//! fingerprint, credential hash. No I/O.
//!
//! Every hash here feeds its fields through [`Prefixed`] (u64 big-endian length, then
//! the bytes), so no two different field lists hash the same input:
//! `("a", "bc")` and `("ab", "c")` never collide.

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use percent_encoding::{utf8_percent_encode, CONTROLS};

use crate::body::BodyView;
use crate::policy::{BodyFingerprint, FingerprintSpec, KeyFormat, RoutePolicy};
use crate::store_key::Prefixed;
pub use crate::store_key::{hash_fields, KeyMap, StoreKey};
use crate::template::{self, RenderError, RequestView};

/// Why no usable key could be derived. Maps to 400 `idempotency_key_invalid` and 400
/// `body_not_json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The message says what is wrong, never the raw value.
    #[error("invalid idempotency key: {0}")]
    Invalid(String),
    #[error("the key uses the request body, but the body is not JSON")]
    BodyNotJson,
    /// The route reads the body and it has an object with a member named twice: idem
    /// and the upstream could read two different requests (issue 46 §8).
    #[error("the body has a duplicate JSON member")]
    DuplicateMember,
}

impl From<RenderError> for KeyError {
    fn from(err: RenderError) -> Self {
        match err {
            RenderError::BodyNotJson => KeyError::BodyNotJson,
            RenderError::Invalid(why) => KeyError::Invalid(why),
        }
    }
}

// === keys and scope ===

/// The route's key: alternatives in order, the first that renders wins; `Ok(None)`
/// when none resolves. The winner must be 1..=`max_key_length` bytes of printable
/// ASCII.
///
/// An error from an alternative (a body placeholder on a non-JSON body, a
/// present-but-empty `Idempotency-Key`) stops the search instead of falling through:
/// the caller sent something malformed and should hear about it (SPEC §2) rather than
/// have a later alternative — or no protection at all — silently chosen. Alternatives
/// after the winner are never evaluated.
pub fn render_key(
    policy: &RoutePolicy,
    view: &RequestView<'_>,
) -> Result<Option<String>, KeyError> {
    for alternative in &policy.key {
        if let Some(key) = alternative.render(view)? {
            validate_key(&key, policy.max_key_length)?;
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// The route's scope: `Some("")` for the empty template, `None` when it does not
/// resolve (the caller treats that like a missing key).
pub fn render_scope(
    policy: &RoutePolicy,
    view: &RequestView<'_>,
) -> Result<Option<String>, KeyError> {
    if policy.scope.is_empty() {
        return Ok(Some(String::new()));
    }
    Ok(policy.scope.render(view)?)
}

/// 1..=`max` bytes, printable ASCII (0x20..=0x7E).
fn validate_key(key: &str, max: usize) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Invalid("the key is empty".to_owned()));
    }
    if key.len() > max {
        return Err(KeyError::Invalid(format!(
            "the key is {} bytes long; the limit is {max}",
            key.len()
        )));
    }
    if let Some(at) = key.bytes().position(|b| !(0x20..=0x7E).contains(&b)) {
        return Err(KeyError::Invalid(format!(
            "the key contains a non-printable or non-ASCII character at byte {at}; \
             keys are printable ASCII"
        )));
    }
    Ok(())
}

// === fingerprint and credentials ===

/// What must be identical for a repeat to count as the same request: SHA-256 over the
/// enabled parts, each tagged and length-prefixed. `path_and_query` is the request
/// target as sent (the query is part of the request).
///
/// The body part is canonical JSON when the body is JSON (key order and whitespace do
/// not matter), raw bytes otherwise — and also for JSON with a number serde_json would
/// round (see [`BodyView::is_exact`]), so two different amounts never look alike.
pub fn fingerprint(
    spec: &FingerprintSpec,
    method: &Method,
    path_and_query: &str,
    body: &BodyView,
) -> [u8; 32] {
    fingerprint_with(spec, method, path_and_query, body, None)
}

/// [`fingerprint`], where `identity` (when given) stands for the whole body: on an MCP
/// route the tool and its arguments (`{mcp.args_hash}`), so the JSON-RPC id and
/// `params._meta` never make a repeat look like another request (SPEC §8).
pub fn fingerprint_with(
    spec: &FingerprintSpec,
    method: &Method,
    path_and_query: &str,
    body: &BodyView,
    identity: Option<&[u8]>,
) -> [u8; 32] {
    let mut h = Prefixed::new();
    if spec.method {
        h.tag(b'm');
        h.field(method.as_str().as_bytes());
    }
    if spec.path {
        h.tag(b'p');
        h.field(path_and_query.as_bytes());
    }
    match &spec.body {
        BodyFingerprint::Ignore => {}
        BodyFingerprint::Whole => match identity {
            Some(identity) => {
                h.tag(b'c');
                h.field(identity);
            }
            None => body_whole(&mut h, body),
        },
        BodyFingerprint::Fields(paths) => body_fields(&mut h, body, paths),
    }
    h.finish()
}

fn body_whole(h: &mut Prefixed, body: &BodyView) {
    let (canonical, bytes) = body.identity_bytes();
    h.tag(if canonical { b'j' } else { b'r' });
    h.field(bytes);
}

/// Canonical JSON of each listed field (missing → `null`); raw bytes when the body is
/// not JSON or not exact, so nothing about it is ignored that could differ.
fn body_fields(h: &mut Prefixed, body: &BodyView, paths: &[template::FieldPath]) {
    let json = body.json().filter(|_| body.is_exact());
    let Some(json) = json else {
        h.tag(b'r');
        h.field(body.raw());
        return;
    };
    h.tag(b'f');
    for path in paths {
        let value = template::lookup(json, path).unwrap_or(&serde_json::Value::Null);
        h.field(&crate::canonical::to_vec(value));
    }
}

/// Binds a record to its caller: each header name, then how many values it has, then
/// each value. An absent header (0 values) differs from an empty one (1 empty value).
pub fn credential_hash(names: &[HeaderName], headers: &HeaderMap) -> [u8; 32] {
    let mut h = Prefixed::new();
    for name in names {
        h.field(name.as_str().as_bytes());
        let values = headers.get_all(name);
        h.count(values.iter().count());
        for value in values {
            h.field(value.as_bytes());
        }
    }
    h.finish()
}

// === what goes upstream ===

/// The key sent upstream: `key` for the first attempt, `<key>:attempt-<n>` from the
/// second on (providers answer a reused key with the stored error; SPEC §1).
pub fn upstream_key(key: &str, attempt: u32) -> String {
    if attempt <= 1 {
        key.to_owned()
    } else {
        format!("{key}:attempt-{attempt}")
    }
}

/// The forwarded header value, plain or as an RFC 8941 sf-string (`"` and `\` escaped).
///
/// Keys are validated printable ASCII before they get here. Should a control or non-ASCII
/// character slip through anyway, it is percent-encoded rather than panicking.
pub fn forward_key_value(key: &str, format: KeyFormat) -> HeaderValue {
    if format == KeyFormat::Plain && key.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        // The usual case, in one copy: nothing to encode or quote.
        if let Ok(value) = HeaderValue::from_str(key) {
            return value;
        }
    }
    let safe = utf8_percent_encode(key, CONTROLS).to_string();
    let text = match format {
        KeyFormat::Plain => safe,
        KeyFormat::SfString => {
            let mut quoted = String::with_capacity(safe.len() + 2);
            quoted.push('"');
            for c in safe.chars() {
                if matches!(c, '"' | '\\') {
                    quoted.push('\\');
                }
                quoted.push(c);
            }
            quoted.push('"');
            quoted
        }
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests;
