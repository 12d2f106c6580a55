//! Never twice: lease fences, clock skew, the send guard and the nemesis run.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod clock_skew;
mod lease_fences;
mod nemesis;
mod never_twice;
