//! Faults: crashes, store and upstream outages, shutdowns, the breaker, chaos and fuzz regressions.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod breaker;
mod faults_chaos;
mod faults_crash;
mod faults_fuzz_regressions;
mod faults_postgres;
mod faults_redis;
mod faults_shutdown;
mod faults_upstream;
