//! The admin listener, the console, bulk resolution, lookups, metrics and traces.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod admin_guard;
mod bulk_resolve;
mod console;
mod observability;
mod reconcile_lookup;
mod traces;
