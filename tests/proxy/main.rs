//! The request path: keys, forwarding, streaming, hostile input, edges, TLS, workers, the process.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod caller_gone;
mod config_files;
mod edges;
mod edges_http2;
mod edges_memory;
mod flow;
mod hostile;
mod keys;
mod loadtest;
mod log_colour;
mod process;
mod streaming;
mod tls;
mod upstream_client;
mod workers;
