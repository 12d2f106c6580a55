//! PostgreSQL backend: durable reservations in one table (SPEC §6).
//!
//! - One row per key (`sql.rs` has the table and every statement). Reservation,
//!   completion, renewal and release are each one prepared statement, one round trip:
//!   2 per fresh intent, 1 per replay, as on Redis. Every write after the reservation is
//!   conditioned on the owner's fencing token, so a stale owner changes nothing.
//! - Commits are as durable as the server makes them: with a synchronous standby
//!   (`synchronous_commit = on`, `synchronous_standby_names`), an acknowledged
//!   reservation or completion survives a failover to that standby.
//! - Each worker thread has its own connection pool (deadpool-postgres, `pool.rs`),
//!   driven by its own runtime; wake-ups for `on_concurrent: wait` come from one
//!   `LISTEN` connection per process (`listener.rs`), and one background task per
//!   process checks the table and deletes expired rows in small batches
//!   (`maintenance.rs`). Writes are here, reads in `reads.rs`.
//! - Serving runs no DDL: `idem migrate` creates the table and records its version,
//!   and readiness waits until the table is one this release can use with the role's
//!   grants (`schema.rs`).
//! - A multi-host URL with `target_session_attrs=read-write` makes every new connection
//!   find the current primary: after a failover the broken pooled connections are
//!   dropped and their replacements connect to the promoted standby.
//! - Every operation is bounded by `op_timeout` ([`StoreError::Timeout`]); any database
//!   or connection error is [`StoreError::Unavailable`], with PostgreSQL's reason
//!   (message, SQLSTATE, detail), and the connection it happened on is closed rather
//!   than pooled again (`pool.rs`).

mod counting;
mod db_error;
mod listener;
mod maintenance;
mod pool;
mod reads;
mod reconnect;
mod schema;
mod sql;
mod target;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;

use self::db_error::DbError;
pub use self::listener::PgNotifications;
use self::maintenance::Readiness;
use self::pool::{attempt, millis, state_name, Conn, Pool};
use self::reads::read;
pub use self::schema::{Migrated, SCHEMA_VERSION};
pub use self::sql::check_table_name;
use self::sql::Sql;
pub use self::target::Target;
use super::listing::Soonest;
use super::record::encode;
use super::task::AbortOnDrop;
use super::{Record, Reserve, StoreError, Token, Watch};
use crate::store::config::PostgresConfig;
use crate::store_key::StoreKey;

/// Reservation statements run when one comes back empty (see `Sql::reserve`) before
/// giving up; each retry sees the rows committed before it started.
const RESERVE_ATTEMPTS: usize = 4;

/// The process-wide part: the `LISTEN` connection, the maintenance task, and what each
/// worker needs to build its pool. Handles hold it behind an `Arc`.
pub struct Shared {
    target: Target,
    sql: Arc<Sql>,
    op_timeout: Duration,
    pool_per_worker: usize,
    /// Connection attempts after a failure, one at a time for all workers' pools.
    pacing: Arc<reconnect::Pacing>,
    events: PgNotifications,
    /// Whether the table passed the schema check, and why not (the maintenance task
    /// checks it; a statement refused for a missing table or grant clears it).
    readiness: Arc<Readiness>,
    _maintenance: Arc<AbortOnDrop>,
}

/// Handle to the PostgreSQL store; clones share the pool, the listener and watchers.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    shared: Arc<Shared>,
}

impl Shared {
    /// Starts listening and maintenance on the current runtime. Fails only on a bad
    /// configuration; an unreachable database is retried in the background.
    pub fn start(cfg: &PostgresConfig, workers: usize) -> Result<Arc<Shared>, StoreError> {
        let target = Target::parse(&cfg.url).map_err(StoreError::Unavailable)?;
        check_table_name(&cfg.table).map_err(StoreError::Unavailable)?;
        let sql = Arc::new(Sql::new(&cfg.table));
        let events = PgNotifications::start(target.clone(), sql.channel.clone(), cfg.op_timeout);
        let readiness = Arc::new(Readiness::new(&cfg.table));
        let maintenance = maintenance::start(target.clone(), sql.clone(), readiness.clone());
        Ok(Arc::new(Shared {
            target,
            sql,
            op_timeout: cfg.op_timeout,
            pool_per_worker: cfg.pool_size.div_ceil(workers.max(1)).max(1),
            pacing: Arc::default(),
            events,
            readiness,
            _maintenance: Arc::new(maintenance),
        }))
    }
}

/// `idem migrate`: create the table and its indexes, or upgrade them, and record the
/// schema version, on a connection of its own (`schema.rs`). Serving never does this:
/// run it with a role that may create the table (or owns it) before serving.
pub async fn migrate(cfg: &PostgresConfig) -> Result<Migrated, String> {
    let target = Target::parse(&cfg.url)?;
    check_table_name(&cfg.table)?;
    let (client, _driver) = maintenance::connect(&target).await?;
    schema::migrate(&client, &cfg.table).await
}

/// Which fenced `UPDATE` a write is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fenced {
    Replace,
    ReplaceNotify,
    /// Only an attempt whose lease ended; with a key window in ms, sent within it.
    TakeOver(Option<i64>),
    /// Only an attempt whose lease has not ended (silent).
    Renew,
}

/// The lease an in-progress record is written with, in ms (the database adds it to its
/// own clock), and whether it is a first send (`sent_at` stamped); 0 for a completed
/// record.
fn lease_millis(record: &Record) -> (i64, bool) {
    match record.stamp {
        Some(s) => (
            i64::try_from(s.lease.as_millis()).unwrap_or(i64::MAX),
            s.sent,
        ),
        None => (0, false),
    }
}

impl PostgresStore {
    /// A store with its own listener and maintenance (one process, one worker).
    pub async fn connect(cfg: &PostgresConfig) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_sharing(&Shared::start(cfg, 1)?).await
    }

    /// A store with its own pool on the current runtime, sharing `shared`. Connects
    /// lazily: an unreachable database or an unusable table is reported by readiness
    /// and logged by the maintenance task, never fatal.
    pub async fn connect_sharing(shared: &Arc<Shared>) -> Result<PostgresStore, StoreError> {
        let pool = pool::pool(
            &shared.target,
            shared.pool_per_worker,
            shared.op_timeout,
            &shared.pacing,
        )?;
        Ok(PostgresStore {
            pool,
            shared: shared.clone(),
        })
    }

    /// Whether the `LISTEN` connection is up (wake-ups from other replicas only arrive
    /// while it is).
    pub fn is_listening(&self) -> bool {
        self.shared.events.listening.load(Ordering::Acquire)
    }

    /// One statement that inserts the caller's record if the key is absent or expired,
    /// or returns the live record there (module doc of `sql.rs`).
    pub async fn reserve(
        &self,
        key: &StoreKey,
        record: &Record,
        ttl: Duration,
    ) -> Result<Reserve, StoreError> {
        let encoded = encode(record);
        let state = state_name(record.state);
        let attempt = attempt(record);
        let ttl = millis(ttl);
        let (lease, _) = lease_millis(record);
        self.bounded(async {
            let mut client = self.client().await?;
            let stmt = client.prepare_cached(&self.shared.sql.reserve).await?;
            for _ in 0..RESERVE_ATTEMPTS {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
                    &&key.0[..],
                    &state,
                    &&record.token.0[..],
                    &attempt,
                    &&record.fingerprint[..],
                    &&record.credentials[..],
                    &ttl,
                    &encoded,
                    &lease,
                ];
                let rows = client.query(&stmt, &params).await?;
                if let Some(row) = rows.first() {
                    return Ok(match row.get::<_, Option<&[u8]>>(0) {
                        None => Ok(Reserve::Won),
                        Some(_) => read(row, 0).map(|(r, now)| Reserve::Exists(r, now)),
                    });
                }
            }
            Ok(Err(StoreError::Unavailable(
                "reservation kept racing with concurrent writers".to_string(),
            )))
        })
        .await?
    }

    pub async fn replace_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
    ) -> Result<bool, StoreError> {
        let statement = match notify {
            true => Fenced::ReplaceNotify,
            false => Fenced::Replace,
        };
        self.fenced_write(key, owner, record, ttl, statement).await
    }

    /// As [`PostgresStore::replace_if_owner`] (notifying), only while the row is an
    /// attempt whose lease has ended by the database's clock (and, with `window`, whose
    /// first send is younger than it).
    pub async fn take_over(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        window: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let window = window.map(millis);
        self.fenced_write(key, owner, record, ttl, Fenced::TakeOver(window))
            .await
    }

    /// As [`PostgresStore::replace_if_owner`] (silent), only while the owner's lease
    /// has not ended by the database's clock.
    pub async fn renew(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.fenced_write(key, owner, record, ttl, Fenced::Renew)
            .await
    }

    async fn fenced_write(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        statement: Fenced,
    ) -> Result<bool, StoreError> {
        let encoded = encode(record);
        let state = state_name(record.state);
        let attempt = attempt(record);
        let ttl = millis(ttl);
        let (lease, sent) = lease_millis(record);
        let sql = &self.shared.sql;
        let notify = !matches!(statement, Fenced::Replace | Fenced::Renew);
        let replaced = self
            .bounded(async {
                let mut client = self.client().await?;
                let (key, owner, token) = (&key.0[..], &owner.0[..], &record.token.0[..]);
                let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
                    &key, &owner, &state, &token, &attempt, &ttl, &encoded, &lease, &sent,
                ];
                let text = match &statement {
                    Fenced::Replace => &sql.replace,
                    Fenced::Renew => &sql.renew,
                    Fenced::ReplaceNotify => &sql.replace_notify,
                    Fenced::TakeOver(window) => {
                        params.push(&sql.channel);
                        params.push(window);
                        &sql.take_over
                    }
                };
                if statement == Fenced::ReplaceNotify {
                    params.push(&sql.channel);
                }
                let stmt = client.prepare_cached(text).await?;
                if notify {
                    Ok(client.query(&stmt, &params).await?.len() == 1)
                } else {
                    Ok(client.execute(&stmt, &params).await? == 1)
                }
            })
            .await?;
        if replaced && notify {
            // Local waiters need not wait for the notification's round trip.
            self.shared.events.watchers.notify(key);
        }
        Ok(replaced)
    }

    pub async fn release_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
    ) -> Result<bool, StoreError> {
        let released = self
            .bounded(async {
                let mut client = self.client().await?;
                let stmt = client.prepare_cached(&self.shared.sql.release).await?;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                    [&&key.0[..], &&owner.0[..], &self.shared.sql.channel];
                Ok(client.query(&stmt, &params).await?.len() == 1)
            })
            .await?;
        if released {
            self.shared.events.watchers.notify(key);
        }
        Ok(released)
    }

    pub async fn delete(&self, key: &StoreKey) -> Result<bool, StoreError> {
        let deleted = self
            .bounded(async {
                let mut client = self.client().await?;
                let stmt = client.prepare_cached(&self.shared.sql.delete).await?;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                    [&&key.0[..], &self.shared.sql.channel];
                let row = client.query_opt(&stmt, &params).await?;
                Ok(row.is_some_and(|row| row.get::<_, bool>(0)))
            })
            .await?;
        // Even an expired row's deletion wakes waiters: they re-read and find it absent.
        self.shared.events.watchers.notify(key);
        Ok(deleted)
    }

    pub fn watch(&self, key: &StoreKey) -> Watch {
        self.shared.events.watchers.watch(key)
    }

    /// Ready when the table passed the schema check (else its reason, e.g. the
    /// `idem migrate` to run or the grant PostgreSQL refused) and a pooled connection
    /// answers. Until it has passed, each ping runs the check itself (the maintenance
    /// task does too, every second), so a probe sees a fix at once.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let readiness = &self.shared.readiness;
        if !readiness.is_ready() {
            let table = &self.shared.sql.table;
            let checked = self
                .bounded(async {
                    let mut client = self.client().await?;
                    Ok(client.check_schema(table).await)
                })
                .await?;
            match checked {
                Ok(checked) => readiness.passed(&checked, table),
                Err(why) => {
                    readiness.failed(why.clone());
                    return Err(StoreError::Unavailable(why));
                }
            }
        }
        self.bounded(async {
            let mut client = self.client().await?;
            client.simple_query("SELECT 1").await?;
            Ok(())
        })
        .await
    }

    async fn client(&self) -> Result<Conn, DbError> {
        Conn::get(&self.pool).await
    }

    /// Bounds an operation by `op_timeout` and maps its errors.
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, StoreError> {
        match timeout(self.shared.op_timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.schema_suspect() {
                    self.shared.readiness.suspect(&e.text);
                }
                Err(StoreError::Unavailable(e.text))
            }
            Err(_) => Err(StoreError::Timeout(self.shared.op_timeout)),
        }
    }
}
