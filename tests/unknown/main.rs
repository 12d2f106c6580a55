//! Unknown outcomes: how they arise, are held, listed and resolved, on every store.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod unknown_admin;
mod unknown_failover;
mod unknown_outcomes;
mod unknown_store;
