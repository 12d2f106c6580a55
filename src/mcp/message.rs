//! Which MCP messages a route protects.
//!
//! The headers come first: a message whose `Mcp-Method` / `Mcp-Name` already say it is
//! not a protected call is passed on without reading its body. Only the body can make a
//! message protected: a header that disagrees with the body is passed on for the server
//! to reject (`-32020`), never protected on the header's word.

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

/// What the headers alone tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderHint {
    /// Not a protected call and not a `tools/list` to amend: stream it through.
    Pass,
    /// A `tools/list` (by its `Mcp-Method`): forward it, amend its answer.
    ToolsList,
    /// Only the body can tell.
    NeedBody,
}

/// What one message is, read from its body.
#[derive(Debug)]
pub enum Message {
    /// A `tools/call` for a tool the route protects.
    ToolCall(ToolCall),
    /// A `tools/list` request whose answer is amended.
    ToolsList,
    /// Anything else (initialize, notifications, responses, batches, other tools, a
    /// header that disagrees with the body, a body that is not JSON-RPC).
    Other,
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

/// Read the headers: pass, amend a `tools/list`, or read the body.
pub fn hint(method: &Method, headers: &HeaderMap, route: &McpRoute) -> HeaderHint {
    if method != Method::POST {
        // GET (the server's stream), DELETE (end of session): never a call.
        return HeaderHint::Pass;
    }
    let Some(mcp_method) = headers.get(MCP_METHOD) else {
        return HeaderHint::NeedBody;
    };
    match mcp_method.as_bytes() {
        b"tools/call" => match headers.get(MCP_NAME).map(|n| n.to_str()) {
            Some(Ok(name)) if !route.protects(name) => HeaderHint::Pass,
            _ => HeaderHint::NeedBody,
        },
        b"tools/list" if route.describe => HeaderHint::ToolsList,
        _ => HeaderHint::Pass,
    }
}

/// Read the body (already bounded): the body decides.
pub fn classify(body: &BodyView, headers: &HeaderMap, route: &McpRoute) -> Message {
    let Some(Value::Object(message)) = body.json() else {
        return Message::Other;
    };
    let id = match message.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        // A notification, or a response: nothing to protect or amend.
        _ => return Message::Other,
    };
    let header = |name| headers.get(name).map(|v: &http::HeaderValue| v.as_bytes());
    let method = message.get("method").and_then(Value::as_str);
    if header(MCP_METHOD).is_some_and(|h| Some(h) != method.map(str::as_bytes)) {
        return Message::Other;
    }
    match method {
        Some(TOOLS_LIST) if route.describe => Message::ToolsList,
        Some(TOOLS_CALL) => {
            let params = message.get("params");
            let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
                return Message::Other;
            };
            if !route.protects(tool) || header(MCP_NAME).is_some_and(|h| h != tool.as_bytes()) {
                return Message::Other;
            }
            let arguments = params.and_then(|p| p.get("arguments"));
            let meta_version = params
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(PROTOCOL_VERSION_META))
                .and_then(Value::as_str);
            let header_version = headers
                .get(MCP_PROTOCOL_VERSION)
                .and_then(|v| v.to_str().ok());
            Message::ToolCall(ToolCall {
                id: id.clone(),
                tool: tool.to_owned(),
                args_hash: args_hash(tool, arguments),
                exact: body.is_exact(),
                modern: meta_version.or(header_version).is_some_and(|v| v >= MODERN),
            })
        }
        _ => Message::Other,
    }
}

/// SHA-256 over the length-prefixed tool name and canonical arguments (absent
/// arguments are `{}`: the same call).
fn args_hash(tool: &str, arguments: Option<&Value>) -> String {
    let empty = Value::Object(serde_json::Map::new());
    let canonical = canonical::to_vec(arguments.filter(|a| !a.is_null()).unwrap_or(&empty));
    crate::fast_hex::encode(&crate::key::hash_fields(&[tool.as_bytes(), &canonical]))
}

#[cfg(test)]
mod tests;
