//! What every statement of the PostgreSQL store shares: the per-worker connection pool
//! (deadpool-postgres, its connection attempts paced by `reconnect.rs`), a pooled
//! connection that is discarded once it failed, and the parameter encodings.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, SimpleQueryMessage, Statement};

use super::db_error::DbError;
use super::reconnect::{PacedManager, Pacing};
use super::schema::{self, Checked};
use super::target::Target;
use crate::store::{Record, RecordState, StoreError};

/// A worker's pool: deadpool's, with connection attempts paced process-wide.
pub(super) type Pool = deadpool::managed::Pool<PacedManager>;
type Object = deadpool::managed::Object<PacedManager>;

/// A connection pool of `size` for the current runtime (connections are created on
/// first use, each driven by this runtime; after a failed attempt, the next waits for
/// `pacing`, which every worker's pool shares).
pub(super) fn pool(
    target: &Target,
    size: usize,
    op_timeout: Duration,
    pacing: &Arc<Pacing>,
) -> Result<Pool, StoreError> {
    let manager_config = ManagerConfig {
        // Broken connections are found by `is_closed` without a round trip. A
        // connection whose statement failed or was abandoned never comes back at all
        // ([`Conn`] detaches it), so `Fast` never hands out one in an unknown state —
        // `Verified` would add a round trip to every request instead.
        recycling_method: RecyclingMethod::Fast,
    };
    let config = target.config.clone();
    let manager = match target.tls.clone() {
        Some(tls) => Manager::from_config(config, tls, manager_config),
        None => Manager::from_config(config, NoTls, manager_config),
    };
    Pool::builder(PacedManager::new(manager, pacing.clone()))
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(op_timeout))
        .create_timeout(Some(op_timeout))
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot build postgres pool: {e}")))
}

/// A pooled connection that goes back to the pool only after its last statement
/// succeeded. One that failed, or whose statement was abandoned mid-way (the operation
/// timed out and this was dropped), is detached and closed: it may be inside an aborted
/// transaction, or still owe the answer to a statement nobody reads, and a later
/// request must never inherit either (issue 34: 17 connections stuck `idle in
/// transaction (aborted)` kept the store unready until a restart).
pub(super) struct Conn {
    object: Option<Object>,
    /// False from the start of a statement until it succeeded.
    clean: bool,
}

impl Conn {
    pub(super) async fn get(pool: &Pool) -> Result<Conn, DbError> {
        let object = pool.get().await.map_err(|e| DbError {
            text: match &e {
                deadpool::managed::PoolError::Backend(e) => e.to_string(),
                other => other.to_string(),
            },
            code: None,
        })?;
        Ok(Conn {
            object: Some(object),
            clean: true,
        })
    }

    fn client(&mut self) -> &Object {
        self.clean = false;
        self.object.as_ref().expect("present until dropped")
    }

    fn done<T>(&mut self, result: Result<T, tokio_postgres::Error>) -> Result<T, DbError> {
        self.clean = result.is_ok();
        result.map_err(DbError::from)
    }

    pub(super) async fn prepare_cached(&mut self, sql: &str) -> Result<Statement, DbError> {
        let result = self.client().prepare_cached(sql).await;
        self.done(result)
    }

    pub(super) async fn query(
        &mut self,
        stmt: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, DbError> {
        let result = self.client().query(stmt, params).await;
        self.done(result)
    }

    pub(super) async fn query_opt(
        &mut self,
        stmt: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, DbError> {
        let result = self.client().query_opt(stmt, params).await;
        self.done(result)
    }

    pub(super) async fn query_one(
        &mut self,
        stmt: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, DbError> {
        let result = self.client().query_one(stmt, params).await;
        self.done(result)
    }

    pub(super) async fn execute(
        &mut self,
        stmt: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, DbError> {
        let result = self.client().execute(stmt, params).await;
        self.done(result)
    }

    /// The schema check (`schema.rs`) on this connection.
    pub(super) async fn check_schema(&mut self, table: &str) -> Result<Checked, String> {
        let result = schema::check(self.client(), table).await;
        self.clean = result.is_ok();
        result
    }

    pub(super) async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<SimpleQueryMessage>, DbError> {
        let result = self.client().simple_query(sql).await;
        self.done(result)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let (false, Some(object)) = (self.clean, self.object.take()) {
            // Detached from the pool and dropped: the connection closes, and the pool
            // opens a fresh one when it needs it.
            drop(Object::take(object));
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
