//! Which MCP messages a route protects.
//!
//! The body decides, for every POST: a header is never taken at its word, because a
//! `Mcp-Name` naming an unprotected tool over a body that calls a protected one would
//! otherwise pass unprotected (issue 46 §7). A `Mcp-Method` / `Mcp-Name` header that
//! disagrees with the body is refused here with JSON-RPC error `-32020` (the 2026-07-28
//! rule), never forwarded; a JSON-RPC batch holding a protected `tools/call` is refused
//! (send the call alone); a body with a duplicate member is refused (the server could
//! read another message than idem did), and so is a body idem cannot read as JSON
//! (`NaN`, nesting past 128 levels: a lenient server behind could still run it). Only
//! GET (the server's stream) and DELETE (end of session) pass on the method alone.

use http::{HeaderMap, HeaderName, Method};
use serde_json::Value;

use super::McpRoute;
use crate::body::BodyView;
use crate::canonical;

pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// The first revision of the stateless era, whose results carry `resultType`.
const MODERN: &str = "2026-07-28";
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

const TOOLS_CALL: &str = "tools/call";
const TOOLS_LIST: &str = "tools/list";

/// What the request line alone tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderHint {
    /// Not a message (GET, DELETE): stream it through.
    Pass,
    /// Only the body can tell.
    NeedBody,
}

/// JSON-RPC error code of a header that disagrees with the body (MCP 2026-07-28,
/// `HeaderMismatch`; answered with HTTP 400).
pub const HEADER_MISMATCH: i64 = -32020;

/// JSON-RPC's parse error: a body idem cannot read (answered with HTTP 400, id `null`).
pub const PARSE_ERROR: i64 = -32700;

/// What one message is, read from its body.
#[derive(Debug)]
pub enum Message {
    /// A `tools/call` for a tool the route protects.
    ToolCall(ToolCall),
    /// A `tools/list` request whose answer is amended.
    ToolsList,
    /// Anything else (initialize, notifications, responses, batches of unprotected
    /// messages, other tools, JSON that is not a JSON-RPC message).
    Other,
    /// Refused by idem itself, never forwarded.
    Refused(Refusal),
}

/// Why a message is answered by idem without being forwarded.
#[derive(Debug)]
pub enum Refusal {
    /// A `Mcp-Method` / `Mcp-Name` header disagrees with the body: `-32020` for `id`
    /// (`null` when the message has none).
    HeaderMismatch { id: Value, detail: String },
    /// A batch holding a protected `tools/call`: each request of it, by id, with the
    /// protected tool it calls (`None`: another request of the batch).
    Batch {
        requests: Vec<(Value, Option<String>)>,
        modern: bool,
    },
    /// The body has a duplicate member: `id` and whether it is a `tools/call`, when a
    /// last-wins reading finds them.
    Duplicate {
        id: Option<Value>,
        tool_call: bool,
        modern: bool,
    },
    /// The body is not JSON idem can read (empty, malformed, `NaN`, nested past 128
    /// levels). Some servers parse more leniently, so it could be a protected call.
    Unreadable,
}

/// A protected `tools/call`: what identifies it, without its id and `params._meta`.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The request's JSON-RPC id, as sent (string or number).
    pub id: Value,
    pub tool: String,
    /// `{mcp.args_hash}`: SHA-256 (hex) of the tool name and the canonical arguments.
    pub args_hash: String,
    /// Whether every number of the arguments survived parsing exactly; when not, two
    /// different amounts could share a hash and the call is refused.
    pub exact: bool,
    /// Whether the caller speaks the 2026-07-28 era (or later): a replay or a tool error
    /// then carries `resultType`, which that era's schema requires and older ones lack.
    pub modern: bool,
}

/// Read the request line: a POST is a message, which only its body tells.
pub fn hint(method: &Method, _headers: &HeaderMap, _route: &McpRoute) -> HeaderHint {
    if method != Method::POST {
        // GET (the server's stream), DELETE (end of session): never a call.
        return HeaderHint::Pass;
    }
    HeaderHint::NeedBody
}

/// Read the body (already bounded): the body decides.
pub fn classify(body: &BodyView, headers: &HeaderMap, route: &McpRoute) -> Message {
    let modern_header = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= MODERN);
    if body.has_duplicate_member() {
        return Message::Refused(duplicate(body, modern_header));
    }
    let message = match body.json() {
        Some(Value::Object(message)) => message,
        Some(Value::Array(batch)) => return classify_batch(batch, route, modern_header),
        Some(_) => return Message::Other,
        None => return Message::Refused(Refusal::Unreadable),
    };
    let id = match message.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        _ => None,
    };
    let method = message.get("method").and_then(Value::as_str);
    let params = message.get("params");
    if let Some(detail) = mismatch(headers, method, params) {
        let id = id.cloned().unwrap_or(Value::Null);
        return Message::Refused(Refusal::HeaderMismatch { id, detail });
    }
    // A notification, or a response: nothing to protect or amend.
    let Some(id) = id else {
        return Message::Other;
    };
    match method {
        Some(TOOLS_LIST) if route.describe => Message::ToolsList,
        Some(TOOLS_CALL) => {
            let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
                return Message::Other;
            };
            if !route.protects(tool) {
                return Message::Other;
            }
            let arguments = params.and_then(|p| p.get("arguments"));
            let meta_version = params
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(PROTOCOL_VERSION_META))
                .and_then(Value::as_str);
            Message::ToolCall(ToolCall {
                id: id.clone(),
                tool: tool.to_owned(),
                args_hash: args_hash(tool, arguments),
                exact: body.is_exact(),
                modern: meta_version.map_or(modern_header, |v| v >= MODERN),
            })
        }
        _ => Message::Other,
    }
}

/// What in the headers disagrees with the body, if anything: `Mcp-Method` against the
/// method, `Mcp-Name` against `params.name` (or `params.uri`, which it mirrors for
/// resources), either in plain text or in its `=?base64?…?=` form.
fn mismatch(headers: &HeaderMap, method: Option<&str>, params: Option<&Value>) -> Option<String> {
    if let Some(header) = headers.get(MCP_METHOD) {
        if Some(header.as_bytes()) != method.map(str::as_bytes) {
            return Some(format!(
                "the Mcp-Method header ({:?}) does not match the body's method ({:?})",
                String::from_utf8_lossy(header.as_bytes()),
                method.unwrap_or("none")
            ));
        }
    }
    let header = headers.get(MCP_NAME)?;
    let named = params.and_then(|p| p.get("name").or_else(|| p.get("uri")));
    let named = named.and_then(Value::as_str);
    let sent = decoded_header(header.as_bytes());
    if named.map(str::as_bytes) == Some(&sent[..]) {
        return None;
    }
    Some(format!(
        "the Mcp-Name header ({:?}) does not match the body's params.name ({:?})",
        String::from_utf8_lossy(&sent),
        named.unwrap_or("none")
    ))
}

/// A header value as sent, or decoded from the `=?base64?…?=` form MCP uses for values
/// that are not plain ASCII.
fn decoded_header(value: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use base64::Engine;
    let inner = value
        .strip_prefix(b"=?base64?")
        .and_then(|v| v.strip_suffix(b"?="));
    match inner.and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok()) {
        Some(decoded) => std::borrow::Cow::Owned(decoded),
        None => std::borrow::Cow::Borrowed(value),
    }
}

/// A batch: refused when it holds a `tools/call` for a protected tool (one reservation
/// per request: the call must come alone), else passed on.
fn classify_batch(batch: &[Value], route: &McpRoute, modern: bool) -> Message {
    let protected_tool = |message: &Value| {
        let params = message.get("params");
        let tool = params.and_then(|p| p.get("name")).and_then(Value::as_str)?;
        (message.get("method").and_then(Value::as_str) == Some(TOOLS_CALL) && route.protects(tool))
            .then(|| tool.to_owned())
    };
    if !batch.iter().any(|m| protected_tool(m).is_some()) {
        return Message::Other;
    }
    let requests = batch
        .iter()
        .filter(|m| m.get("method").is_some())
        .filter_map(|m| match m.get("id") {
            Some(id @ (Value::String(_) | Value::Number(_))) => {
                Some((id.clone(), protected_tool(m)))
            }
            _ => None,
        })
        .collect();
    Message::Refused(Refusal::Batch { requests, modern })
}

/// A body with a duplicate member, read last-wins only to find whom to answer.
fn duplicate(body: &BodyView, modern: bool) -> Refusal {
    let lenient: Option<Value> = serde_json::from_slice(body.raw()).ok();
    let message = lenient.as_ref().and_then(Value::as_object);
    let id = message
        .and_then(|m| m.get("id"))
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    let tool_call = message
        .and_then(|m| m.get("method"))
        .and_then(Value::as_str)
        == Some(TOOLS_CALL);
    Refusal::Duplicate {
        id,
        tool_call,
        modern,
    }
}

/// SHA-256 over the length-prefixed tool name and canonical arguments (absent
/// arguments are `{}`: the same call).
fn args_hash(tool: &str, arguments: Option<&Value>) -> String {
    let empty = Value::Object(serde_json::Map::new());
    let canonical = canonical::to_vec(arguments.filter(|a| !a.is_null()).unwrap_or(&empty));
    crate::fast_hex::encode(&crate::store_key::hash_fields(&[
        tool.as_bytes(),
        &canonical,
    ]))
}

#[cfg(test)]
mod tests;
