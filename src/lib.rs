//! idem: a sidecar reverse proxy that makes side-effecting tool calls safe to repeat.
//!
//! # Layout
//! - [`vocabulary`]: the request's vocabulary (outcome, store operation, upstream
//!   failure, wake-up cause, reconciliation and resolution results), a leaf that the
//!   pipeline, the metrics and the traces all import; metrics and traces never import
//!   the pipeline.
//! - [`config`]: YAML → typed, validated [`config::Config`]; a field's name is written
//!   once, where its section reads it (`config/walk.rs` reports the fields nobody read).
//!   The types it builds are their parts' own (e.g. `server/config.rs`); [`policy`]: a
//!   route's, read by the proxy, the key derivation and the route table; [`units`]:
//!   durations and sizes as the file writes them.
//! - [`path`]: the path-template language (`/invoices/{id}`); [`route`]: the route table
//!   built from it (matching only).
//! - [`template`], [`key`], [`canonical`], [`body`]: pure key and fingerprint derivation.
//! - [`mcp`]: MCP messages (which `tools/call` is protected, final responses in event
//!   streams, replays under the new id, `tools/list` amendments); glue in `proxy/mcp.rs`.
//! - [`store`]: the idempotency store (memory; Redis standalone, Cluster or Sentinel;
//!   PostgreSQL) behind one narrow interface; [`store::SharedStore`] is the handle every
//!   worker clones.
//! - [`proxy`]: the request pipeline — `proxy/mod.rs` reads top to bottom; the duplicate's
//!   decision (on the record's [`store::Phase`]) and the outcome classes are pure
//!   functions in `proxy/decide.rs`; the protected flow is `proxy/idempotency/` (unknown outcomes in `unknown.rs`); every
//!   upstream call is one exchange, `proxy/exchange/` (with an answer extractor for plain
//!   HTTP and MCP); `proxy/outbound.rs` streams the answer and holds only its end;
//!   `proxy/context.rs` carries a request's spans and store timings;
//!   `proxy/control.rs` is the reload side.
//! - [`upstream`]: the upstream HTTP client (pooled connections driven inline), its body
//!   with the one timed frame read, and the classifier of what happened to a call (not
//!   sent / ambiguous / answered).
//! - [`server`], [`workers`]: the proxy listener, per-worker runtimes, connection limits,
//!   graceful drain; [`workers::StartError`] sits here, below [`app`], which re-exports it.
//! - [`admin`], [`admin_client`]: health, readiness, metrics and key admin on a separate
//!   listener, and the CLI that talks to it; [`terminal`]: what it prints, with control
//!   characters made visible.
//! - [`app`]: putting it together (start, reload, shutdown); [`cli`], [`signal`],
//!   [`telemetry`], [`traces`], [`metrics`], [`tls`]: the process around it.
//! - [`time_bound`] (a time bound whose timer starts only when a step waits) and
//!   [`fast_hex`] (hex of keys, tokens and digests): two small helpers of the hot path.
//! - [`demo`], [`loadtest`]: `idem demo` and `idem loadtest`.
//!
//! Modules import downwards: no two siblings import each other, and `scripts/import_cycles.py`
//! (which CI runs) fails on any circle (`docs/pipeline.md`, "Who imports whom"). Each part
//! owns its typed configuration; only the app reads [`config`] and hands each its own.

pub mod admin;
pub mod admin_client;
pub mod app;
pub mod body;
pub mod canonical;
pub mod cli;
pub mod config;
pub mod demo;
#[cfg(debug_assertions)]
pub mod failpoints;

/// `pause!("name")`: a test pause point (`failpoints.rs`) in debug builds; nothing at all
/// in release builds. Defined here, outside the module, so it exists in both.
#[macro_export]
macro_rules! pause {
    ($name:literal) => {
        #[cfg(debug_assertions)]
        $crate::failpoints::pause_at($name).await;
    };
}
pub mod fast_hex;
pub mod key;
pub mod loadtest;
pub mod mcp;
pub mod metrics;
#[cfg(test)]
mod panic_watch;
pub mod path;
pub mod policy;
pub mod proxy;
pub mod route;
pub mod server;
pub mod signal;
pub mod store;
pub mod store_key;
pub mod telemetry;
pub mod template;
pub mod terminal;
pub mod time_bound;
pub mod tls;
pub mod traces;
pub mod units;
pub mod upstream;
pub mod vocabulary;
pub mod workers;
