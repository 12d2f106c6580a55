//! idem: a sidecar reverse proxy that makes side-effecting tool calls safe to repeat.
//!
//! # Layout
//! - [`config`]: YAML → typed, validated [`config::Config`].
//! - [`route`]: path templates and the route table (matching only).
//! - [`template`], [`key`], [`canonical`], [`body`]: pure key and fingerprint derivation.
//! - [`store`]: the idempotency store (memory, Redis) behind one narrow interface.
//! - [`proxy`]: the request pipeline — `proxy/mod.rs` reads top to bottom.
//! - [`server`]: listeners, connection limits, graceful shutdown.

pub mod body;
pub mod canonical;
pub mod config;
pub mod key;
pub mod route;
pub mod store;
pub mod template;
