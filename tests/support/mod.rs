//! Shared helpers for integration tests: real processes on free loopback ports.
//! Each test binary uses a subset.
#![allow(dead_code)]

pub mod env;
pub mod faulty;
pub mod harness;
pub mod mcp;
pub mod otlp;
pub mod panics;
pub mod poll;
pub mod postgres;
pub mod redis;
pub mod redis_acl;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod store;
pub mod tls;
pub mod upstream;
