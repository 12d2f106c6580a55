//! Shared helpers for integration tests. Each test binary uses a subset.
#![allow(dead_code)]

pub mod redis;
pub mod store;
