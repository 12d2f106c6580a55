//! MCP with the official SDKs, MCP routing, and the agent runtimes' crash-and-resume.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod agents;
mod mcp;
mod mcp_routing;
