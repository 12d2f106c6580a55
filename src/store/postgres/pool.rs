//! What every statement of the PostgreSQL store shares: the per-worker connection pool
//! (deadpool-postgres), the mapping of driver errors, and the parameter encodings.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

use super::target::Target;
use crate::store::{Record, RecordState, StoreError};

/// A connection pool of `size` for the current runtime (connections are created on
/// first use, each driven by this runtime).
pub(super) fn pool(target: &Target, size: usize, op_timeout: Duration) -> Result<Pool, StoreError> {
    let manager_config = ManagerConfig {
        // Broken connections are found by `is_closed` without a round trip; a
        // connection that dies under a statement fails that statement, is dropped, and
        // its replacement connects to whichever host is the primary now.
        recycling_method: RecyclingMethod::Fast,
    };
    let config = target.config.clone();
    let manager = match target.tls.clone() {
        Some(tls) => Manager::from_config(config, tls, manager_config),
        None => Manager::from_config(config, NoTls, manager_config),
    };
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(op_timeout))
        .create_timeout(Some(op_timeout))
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot build postgres pool: {e}")))
}

/// Any failure talking to the database, as text for [`StoreError::Unavailable`].
pub(super) struct DbError {
    pub(super) text: String,
    /// The table does not exist (the database was re-created under us).
    pub(super) missing_table: bool,
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> DbError {
        DbError {
            missing_table: e.code() == Some(&SqlState::UNDEFINED_TABLE),
            text: e.to_string(),
        }
    }
}

pub(super) fn state_name(state: RecordState) -> &'static str {
    match state {
        RecordState::InProgress => "in_progress",
        RecordState::Completed => "completed",
    }
}

pub(super) fn attempt(record: &Record) -> i32 {
    i32::try_from(record.attempt).unwrap_or(i32::MAX)
}

/// A duration in whole milliseconds, at least 1 (a zero TTL would store an already
/// expired row).
pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}
