//! Who owns the table's shape: `idem migrate` creates and upgrades it and records its
//! version; serving runs no DDL at all, and only checks that the table is one it can
//! use (SPEC §6, issue 34).
//!
//! Why serving must not create or alter: a DBA gives the serving role `SELECT, INSERT,
//! UPDATE, DELETE` on the table and nothing else, and `CREATE TABLE IF NOT EXISTS`
//! still needs `CREATE` on the schema (`ALTER … ADD COLUMN IF NOT EXISTS` needs to own
//! the table) even when there is nothing to do.
//!
//! The version is the table's comment, `idem schema version N`: `COMMENT ON TABLE` is
//! written by whoever owns the table (`idem migrate`'s role) and read from the catalog by
//! any role, so the serving role needs no grant beyond the documented four. A version
//! only ever adds (columns, indexes): a serve accepts its own version or a later one.
//! A table made by the `serve` of a release before this one carries no version; serving
//! from it is accepted when every column is there (a rolling upgrade needs no step in
//! between), and `idem migrate` records the version.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::db_error::describe;

/// The table's shape this release writes and reads. Version 1 lacked `lease_until` and
/// `sent_at`; version 2 (the first one recorded) has them.
pub const SCHEMA_VERSION: u32 = 2;

/// Columns every statement of this release reads or writes.
const COLUMNS: [&str; 10] = [
    "key",
    "state",
    "token",
    "attempt",
    "fingerprint",
    "credentials",
    "expires_at",
    "record",
    "lease_until",
    "sent_at",
];

const COMMENT_PREFIX: &str = "idem schema version ";

/// What the catalog says of the table, read without any privilege on it.
struct Found {
    user: String,
    exists: bool,
    version: Option<u32>,
    columns: Vec<String>,
}

async fn inspect(client: &Client, table: &str) -> Result<Found, String> {
    let row = client
        .query_one(
            "SELECT current_user::text, c.oid IS NOT NULL, obj_description(c.oid, 'pg_class'),
  ARRAY(SELECT attname::text FROM pg_attribute
        WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped)
FROM (SELECT to_regclass($1) AS oid) c",
            &[&table],
        )
        .await
        .map_err(|e| describe(&e))?;
    let comment: Option<String> = row.get(2);
    Ok(Found {
        user: row.get(0),
        exists: row.get(1),
        version: comment
            .as_deref()
            .and_then(|c| c.strip_prefix(COMMENT_PREFIX))
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse().ok()),
        columns: row.get(3),
    })
}

/// How serving may use the table.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// At this release's version or a later one.
    Versioned(u32),
    /// Made by an earlier release's `serve`: every column there, no version recorded.
    Unversioned,
}

/// Whether serving can use `table` as the connected role: its version (or, without
/// one, its columns), then the four privileges, exercised by one statement that
/// changes nothing. `Err` says what is wrong, with PostgreSQL's own reason when it
/// refused, and what to run.
pub(super) async fn check(client: &Client, table: &str) -> Result<Checked, String> {
    let found = inspect(client, table).await?;
    let migrate = "run `idem migrate --config FILE` with a role that may create or alter it (serving runs no DDL)";
    if !found.exists {
        return Err(format!(
            "table {table} does not exist, or role {} cannot see its schema: {migrate}",
            found.user
        ));
    }
    let checked = match found.version {
        Some(v) if v >= SCHEMA_VERSION => Checked::Versioned(v),
        Some(v) => {
            return Err(format!(
                "table {table} is at schema version {v}, this release needs {SCHEMA_VERSION}: {migrate}"
            ))
        }
        None => {
            let missing: Vec<&str> = COLUMNS
                .into_iter()
                .filter(|c| !found.columns.iter().any(|have| have == c))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "table {table} has no recorded schema version and lacks column(s) {}: {migrate}",
                    missing.join(", ")
                ));
            }
            Checked::Unversioned
        }
    };
    // WHERE false: privileges are checked when the statement starts, rows or not.
    let probe = format!(
        "WITH i AS (INSERT INTO {table} SELECT * FROM {table} WHERE false RETURNING 1),
u AS (UPDATE {table} SET state = state WHERE false RETURNING 1),
d AS (DELETE FROM {table} WHERE false RETURNING 1)
SELECT 1"
    );
    if let Err(e) = client.simple_query(&probe).await {
        let reason = describe(&e);
        return Err(match e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
            true => format!(
                "{reason}: role {user} needs SELECT, INSERT, UPDATE, DELETE on table {table} \
                 (GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {user})",
                user = found.user
            ),
            false => format!("{reason} (checking table {table})"),
        });
    }
    Ok(checked)
}

/// What `idem migrate` found and did.
#[derive(Debug, PartialEq, Eq)]
pub enum Migrated {
    Created,
    /// From a recorded version, or none (`None`: a table an earlier `serve` created).
    Upgraded(Option<u32>),
    Current,
    /// Recorded by a later release: left alone.
    Newer(u32),
}

impl std::fmt::Display for Migrated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = SCHEMA_VERSION;
        match self {
            Migrated::Created => write!(f, "created at schema version {v}"),
            Migrated::Upgraded(None) => write!(
                f,
                "schema version {v} recorded (the table had none: made by an earlier release's serve)"
            ),
            Migrated::Upgraded(Some(from)) => write!(f, "upgraded from schema version {from} to {v}"),
            Migrated::Current => write!(f, "already at schema version {v}, nothing to do"),
            Migrated::Newer(n) => write!(
                f,
                "at schema version {n}, newer than this release's {v}: left as it is"
            ),
        }
    }
}

/// Creates or upgrades `table` to [`SCHEMA_VERSION`] and records it, in one
/// transaction. An advisory lock serialises migrations started together (several
/// pods' init containers): concurrent `CREATE TABLE IF NOT EXISTS` can fail on the
/// catalog's unique index.
pub(super) async fn migrate(client: &Client, table: &str) -> Result<Migrated, String> {
    let t = table;
    let found = inspect(client, t).await?;
    let outcome = match (found.exists, found.version) {
        (false, _) => Migrated::Created,
        (true, Some(v)) if v > SCHEMA_VERSION => return Ok(Migrated::Newer(v)),
        (true, Some(SCHEMA_VERSION)) => Migrated::Current,
        (true, from) => Migrated::Upgraded(from),
    };
    let ddl = format!(
        "BEGIN;
SELECT pg_advisory_xact_lock(hashtext('idem schema {t}'));
CREATE TABLE IF NOT EXISTS {t} (
  key bytea PRIMARY KEY,
  state text NOT NULL CHECK (state IN ('in_progress', 'completed')),
  token bytea NOT NULL,
  attempt integer NOT NULL,
  fingerprint bytea NOT NULL,
  credentials bytea NOT NULL,
  expires_at timestamptz NOT NULL,
  record bytea NOT NULL
);
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS lease_until timestamptz;
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS sent_at timestamptz;
CREATE INDEX IF NOT EXISTS {t}_expires_at ON {t} (expires_at);
CREATE INDEX IF NOT EXISTS {t}_in_progress ON {t} (key) WHERE state = 'in_progress';
COMMENT ON TABLE {t} IS '{COMMENT_PREFIX}{SCHEMA_VERSION} (written by idem migrate; idem serve checks it)';
COMMIT;"
    );
    if outcome != Migrated::Current {
        client.batch_execute(&ddl).await.map_err(|e| describe(&e))?;
    }
    Ok(outcome)
}
