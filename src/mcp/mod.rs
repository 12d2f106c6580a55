//! MCP (JSON-RPC 2.0 over streamable HTTP, SPEC §8): the protocol side of making a
//! `tools/call` idempotent, in both eras — the session era (≤ 2025-11-25, `initialize`
//! and `Mcp-Session-Id`) and the stateless 2026-07-28 era (`server/discover`,
//! `params._meta`, the `Mcp-Method` / `Mcp-Name` headers).
//!
//! Pure pieces only; the pipeline glue is `proxy/mcp.rs`.
//! - [`message`]: which messages a route protects (headers first, the body decides).
//! - [`answer`]: the final response for a request id, the replay with the new id, and
//!   the tool error every proxy-made error becomes.
//! - [`sse`]: splitting a `text/event-stream` into events as its bytes arrive.
//! - [`tools_list`]: telling the model that a protected tool is safe to repeat.
//! - [`raw`]: JSON objects edited member by member, other bytes kept.

pub mod answer;
pub mod message;
pub mod raw;
pub mod sse;
pub mod tools_list;

pub use message::{
    classify, hint, HeaderHint, Message, Refusal, ToolCall, HEADER_MISMATCH, PARSE_ERROR,
};

/// A route's `mcp:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpRoute {
    /// Tools whose calls are made idempotent; the route's list alone decides, never
    /// the server's own annotations.
    pub tools: Vec<String>,
    /// Amend `tools/list` answers for the protected tools (`describe: false` turns it off).
    pub describe: bool,
}

impl McpRoute {
    pub fn protects(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}
