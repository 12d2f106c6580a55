//! The store's housekeeping, one task per process on a connection of its own: create
//! the table when it is missing, and delete expired rows in small batches.
//!
//! Deleting is only about space: statements already treat an expired row as absent.
//! Each batch is its own short statement (`Sql::purge`, `SKIP LOCKED`), so it never
//! holds many row locks for long and never waits on a reservation taking a row over;
//! purgers on several replicas share the work instead of queueing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, timeout};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, NoTls, Socket};

use super::sql::{Sql, PURGE_BATCH};
use super::target::Target;
use crate::store::task::AbortOnDrop;

/// Pause between purge rounds (and between reconnection attempts).
const INTERVAL: Duration = Duration::from_secs(2);
/// Bound on connecting and on each statement.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Batches per round at most, so a large backlog is worked off over several rounds
/// with pauses in between rather than in one burst.
const BATCHES_PER_ROUND: usize = 20;

pub(super) fn start(target: Target, sql: Arc<Sql>, schema_ready: Arc<AtomicBool>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let error = match target.tls.clone() {
                Some(tls) => session(&target, tls, &sql, &schema_ready).await,
                None => session(&target, NoTls, &sql, &schema_ready).await,
            };
            tracing::debug!(%error, "postgres maintenance connection ended; reconnecting");
            sleep(INTERVAL).await;
        }
    }))
}

/// Runs rounds on one connection until it fails; returns why.
async fn session<T>(target: &Target, tls: T, sql: &Sql, schema_ready: &AtomicBool) -> String
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, conn) = match timeout(STATEMENT_TIMEOUT, target.config.connect(tls)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return e.to_string(),
        Err(_) => return "connect timed out".to_string(),
    };
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    loop {
        if let Err(e) = round(&client, sql, schema_ready).await {
            return e;
        }
        sleep(INTERVAL).await;
    }
}

/// Creates the table on a connection of its own (`idem migrate`): for deployments whose
/// serving role may not create tables.
pub(super) async fn create_table(target: &Target, sql: &Sql) -> Result<(), String> {
    async fn on<T>(target: &Target, tls: T, sql: &Sql) -> Result<(), String>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
    {
        let (client, conn) = bounded(target.config.connect(tls)).await?;
        let _driver = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        bounded(client.batch_execute(&sql.schema)).await
    }
    match target.tls.clone() {
        Some(tls) => on(target, tls, sql).await,
        None => on(target, NoTls, sql).await,
    }
}

async fn round(client: &Client, sql: &Sql, schema_ready: &AtomicBool) -> Result<(), String> {
    if !schema_ready.load(Ordering::Acquire) {
        bounded(client.batch_execute(&sql.schema)).await?;
        schema_ready.store(true, Ordering::Release);
        tracing::debug!(channel = %sql.channel, "postgres table ready");
    }
    let purge = client.prepare(&sql.purge);
    let purge = bounded(purge).await?;
    for _ in 0..BATCHES_PER_ROUND {
        let deleted = bounded(client.execute(&purge, &[])).await?;
        if deleted < PURGE_BATCH as u64 {
            break;
        }
    }
    Ok(())
}

async fn bounded<T>(
    op: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, String> {
    match timeout(STATEMENT_TIMEOUT, op).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("statement timed out".to_string()),
    }
}
