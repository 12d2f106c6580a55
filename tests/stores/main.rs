//! The stores' contract and formats: memory, Redis (standalone, Cluster, Sentinel), PostgreSQL.
//!
//! One integration-test binary per area (issue 49): each module was a binary of
//! its own; together they compile the support and link idem once.

#[path = "../support/mod.rs"]
mod support;

mod open_index;
mod postgres_roles;
mod record_formats;
mod redis_scale_out;
mod replicas;
mod sealed_metadata;
mod store_contract;
mod store_full;
mod store_model;
mod stored_responses;
