//! idem: a sidecar reverse proxy that makes side-effecting tool calls safe to repeat.
//!
//! # Layout
//! - [`config`]: YAML → typed, validated [`config::Config`].
//! - [`route`]: path templates and the route table (matching only).
//! - [`template`], [`key`], [`canonical`], [`body`]: pure key and fingerprint derivation.
//! - [`mcp`]: MCP messages (which `tools/call` is protected, final responses in event
//!   streams, replays under the new id, `tools/list` amendments); glue in `proxy/mcp.rs`.
//! - [`store`]: the idempotency store (memory, Redis) behind one narrow interface.
//! - [`proxy`]: the request pipeline — `proxy/mod.rs` reads top to bottom.
//! - [`server`]: the proxy listener, connection limits, graceful drain.
//! - [`admin`]: health, readiness, metrics and key admin on a separate listener.
//! - [`app`]: putting it together (start, reload, shutdown); [`cli`], [`signal`],
//!   [`telemetry`], [`metrics`]: the process around it.

pub mod admin;
pub mod admin_client;
pub mod app;
pub mod body;
pub mod canonical;
pub mod cli;
pub mod config;
pub mod demo;
pub mod key;
pub mod loadtest;
pub mod mcp;
pub mod metrics;
pub mod path;
pub mod proxy;
pub mod route;
pub mod server;
pub mod signal;
pub mod store;
pub mod telemetry;
pub mod template;
pub mod tls;
pub mod upstream;
pub mod workers;
