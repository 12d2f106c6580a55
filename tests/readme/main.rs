//! The README's examples and the demo, run as a reader would.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod demo;
mod readme_examples;
mod readme_mcp;
