//! The store's housekeeping, one task per process on a connection of its own: check
//! that the table is one serving can use (`schema.rs`) until it is, and delete expired
//! rows in small batches.
//!
//! The check runs at start and again whenever a statement found the table or the
//! role's rights changed ([`Readiness::suspect`]); readiness reports its reason, and it
//! is logged once per distinct reason, so a role started before its grants logs
//! PostgreSQL's refusal and turns ready by itself once they are given.
//!
//! Deleting is only about space: statements already treat an expired row as absent.
//! Each batch is its own short statement (`Sql::purge`, `SKIP LOCKED`), so it never
//! holds many row locks for long and never waits on a reservation taking a row over;
//! purgers on several replicas share the work instead of queueing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{sleep, timeout};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, NoTls, Socket};

use super::db_error::describe;
use super::schema::{self, Checked};
use super::sql::{Sql, PURGE_BATCH};
use super::target::Target;
use crate::store::task::AbortOnDrop;

/// Pause between purge rounds (and between reconnection attempts).
const INTERVAL: Duration = Duration::from_secs(2);
/// Pause between schema checks while the table is not usable.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Bound on connecting and on each statement.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Batches per round at most, so a large backlog is worked off over several rounds
/// with pauses in between rather than in one burst.
const BATCHES_PER_ROUND: usize = 20;

/// Whether the table passed the schema check, and the last reason it did not (logged
/// when it changes).
pub(super) struct Readiness {
    ready: AtomicBool,
    reason: Mutex<String>,
}

impl Readiness {
    pub(super) fn new(table: &str) -> Readiness {
        Readiness {
            ready: AtomicBool::new(false),
            reason: Mutex::new(format!("table {table} not checked yet")),
        }
    }

    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// A statement failed in a way that says the table or the grants changed: not
    /// ready until the next check passes.
    pub(super) fn suspect(&self, why: &str) {
        if self.ready.swap(false, Ordering::AcqRel) {
            tracing::warn!(error = %why, "postgres refused a statement on the idem table; checking it again");
            *self.reason.lock().expect("not poisoned") = why.to_owned();
        }
    }

    /// Records a failed check; logs it when the reason is new.
    pub(super) fn failed(&self, why: String) {
        self.ready.store(false, Ordering::Release);
        let mut reason = self.reason.lock().expect("not poisoned");
        if *reason != why {
            tracing::warn!(error = %why, "postgres store not ready; checking again every {CHECK_INTERVAL:?}");
            *reason = why;
        }
    }

    pub(super) fn passed(&self, checked: &Checked, table: &str) {
        if !self.ready.swap(true, Ordering::AcqRel) {
            // A later failure logs even when its reason is the one before this.
            self.reason.lock().expect("not poisoned").clear();
            match checked {
                Checked::Versioned(v) => {
                    tracing::info!(table, schema_version = v, "postgres store ready")
                }
                Checked::Unversioned => tracing::warn!(
                    table,
                    "postgres store ready, but the table has no recorded schema version (made by an earlier release's serve): run `idem migrate` to record it"
                ),
            }
        }
    }
}

pub(super) fn start(target: Target, sql: Arc<Sql>, readiness: Arc<Readiness>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let error = match connect(&target).await {
                Ok((client, _driver)) => session(&client, &sql, &readiness).await,
                Err(e) => e,
            };
            if readiness.is_ready() {
                tracing::debug!(%error, "postgres maintenance connection ended; reconnecting");
            } else {
                readiness.failed(error);
            }
            sleep(CHECK_INTERVAL).await;
        }
    }))
}

/// One connection to `target` outside the pools, driven by a task that ends with the
/// returned guard.
pub(super) async fn connect(target: &Target) -> Result<(Client, AbortOnDrop), String> {
    async fn on<T>(target: &Target, tls: T) -> Result<(Client, AbortOnDrop), String>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
    {
        let (client, conn) = match timeout(STATEMENT_TIMEOUT, target.config.connect(tls)).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(format!("cannot connect: {}", describe(&e))),
            Err(_) => return Err("cannot connect: timed out".to_string()),
        };
        let driver = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        Ok((client, driver))
    }
    match target.tls.clone() {
        Some(tls) => on(target, tls).await,
        None => on(target, NoTls).await,
    }
}

/// Checks and purges on one connection until it fails; returns why.
async fn session(client: &Client, sql: &Sql, readiness: &Readiness) -> String {
    loop {
        if !readiness.is_ready() {
            match timeout(STATEMENT_TIMEOUT, schema::check(client, &sql.table)).await {
                Ok(Ok(checked)) => readiness.passed(&checked, &sql.table),
                Ok(Err(why)) => readiness.failed(why),
                Err(_) => readiness.failed("schema check timed out".to_string()),
            }
            if client.is_closed() {
                return "connection closed".to_string();
            }
        }
        if !readiness.is_ready() {
            sleep(CHECK_INTERVAL).await;
            continue;
        }
        if let Err(e) = purge(client, sql).await {
            // A refusal on a live connection (a grant revoked, the table dropped): the
            // table is checked again before readiness is reported.
            if !client.is_closed() {
                readiness.suspect(&e);
            }
            return e;
        }
        sleep(INTERVAL).await;
    }
}

async fn purge(client: &Client, sql: &Sql) -> Result<(), String> {
    let purge = bounded(client.prepare(&sql.purge)).await?;
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
        Ok(result) => result.map_err(|e| describe(&e)),
        Err(_) => Err("statement timed out".to_string()),
    }
}
