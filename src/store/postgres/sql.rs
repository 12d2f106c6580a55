//! The SQL of the PostgreSQL store, written for one table name.
//!
//! One row per key. Columns that the statements read or condition on are real columns
//! (`state`, `token`, `attempt`, `fingerprint`, `credentials`, `expires_at`), so an
//! operator can query them; `record` holds the whole encoded record (`store::record`),
//! stored response included, so a read is one column decoded by the same code as Redis.
//! `expires_at` is the row's end (the retention's, in progress as completed: an attempt
//! is remembered after its lease, SPEC §1 "Unknown outcomes"); `lease_until` is an
//! in-progress record's lease end, and `sent_at` its attempt's first send (the upstream
//! key's age, for `upstream_key_window`). All are computed with the *database's* clock
//! (`now()` + a duration), so several idem processes with skewed clocks agree on when a
//! lease ends (SPEC §1 "One clock for every lease"). Reads return them beside the
//! record, in unix ms, with the database's `now()`: the record's own `expires_at_ms` and
//! `sent_at_ms` are only the writer's estimates, replaced by these (`mod.rs`).
//!
//! Every statement treats a row whose `expires_at` has passed as absent — it is never
//! returned, never completed, and a reservation takes it over — so an expired record
//! is never replayed even before the background purge deletes it.

use idem_fence::{Condition, Write};

/// `lease_until` from `$8` (milliseconds from now) for an in-progress record; none once
/// completed. `sent_at` is now when `$9` says this is a first send, else kept.
const LEASE_UNTIL_8: &str = "lease_until = CASE WHEN $3 = 'in_progress' \
     THEN now() + $8::int8 * interval '1 millisecond' END, \
     sent_at = CASE WHEN $9::bool THEN now() ELSE sent_at END";

/// A timestamp column as unix ms (NULL stays NULL).
fn ms(column: &str) -> String {
    format!("(extract(epoch from {column}) * 1000)::int8")
}

/// What every read returns after the record: its lease's end, its first send and the
/// database's clock, in unix ms.
fn clocks() -> String {
    format!("{}, {}, {}", ms("lease_until"), ms("sent_at"), ms("now()"))
}

/// `update` with watchers notified once the change is committed.
fn notifying(update: &str) -> String {
    format!(
        "WITH changed AS (
{update}
RETURNING key
)
SELECT pg_notify($10, encode(key, 'hex')) FROM changed"
    )
}

/// A fenced write's `WHERE` clause: the key, then one [`guard`] per condition of the
/// write's row in `idem_fence::FENCES`.
fn fence(write: Write) -> String {
    let mut clause = String::from("key = $1");
    for condition in write.requires() {
        clause.push_str(" AND ");
        clause.push_str(guard(*condition));
    }
    clause
}

/// How a statement checks one fence condition on the row, on the database's clock.
/// `$2` is the token the writer holds (or read); `$11`, bound by `take_over` only, its
/// key window in ms or NULL. Rows of versions before `lease_until` (NULL) keep their
/// lease in `expires_at`, so neither lease condition holds for them: they are never
/// taken over or renewed here; they expire, and a reservation takes them over.
fn guard(condition: Condition) -> &'static str {
    match condition {
        // A row past its retention is absent for every statement.
        Condition::Owner => "token = $2 AND expires_at > now()",
        Condition::InProgress => "state = 'in_progress'",
        Condition::LeaseEnded => "lease_until <= now()",
        Condition::LeaseLive => "lease_until > now()",
        Condition::WithinKeyWindow => {
            "($11::int8 IS NULL OR sent_at > now() - $11::int8 * interval '1 millisecond')"
        }
    }
}

/// Rows deleted per purge statement: short transactions, short row locks.
pub(super) const PURGE_BATCH: i64 = 500;

/// Statement texts for one table. Built once per store.
#[derive(Debug)]
pub(super) struct Sql {
    /// The table's name, as configured (checked by [`super::check_table_name`]).
    pub table: String,
    pub reserve: String,
    pub replace: String,
    pub replace_notify: String,
    pub take_over: String,
    pub renew: String,
    pub release: String,
    pub get: String,
    pub delete: String,
    pub purge: String,
    pub list_in_progress: String,
    pub clock: String,
    /// `LISTEN` target: the table name with `_events`.
    pub channel: String,
}

impl Sql {
    /// `table` must have passed [`super::check_table_name`]: it is written into the
    /// statements as it is.
    pub(super) fn new(table: &str) -> Sql {
        let t = table;
        let clocks = clocks();
        // The write every fenced update shares; its `WHERE` is the write's [`fence`].
        let update = |write: Write| {
            format!(
                "UPDATE {t} SET state = $3, token = $4, attempt = $5,
  expires_at = now() + $6::int8 * interval '1 millisecond', record = $7, {LEASE_UNTIL_8}
WHERE {}",
                fence(write)
            )
        };
        Sql {
            table: t.to_owned(),
            // One statement, one winner: the unique key lets exactly one INSERT through;
            // an expired row is taken over by the conflict branch, whose row lock makes
            // concurrent takeovers queue and re-check the (then fresh) expiry. A live
            // row already visible is returned without attempting the INSERT at all, so a
            // duplicate or replay is a plain read: no row lock, no transaction id, no
            // WAL flush. Zero rows back means the row that beat us was committed after
            // this statement's snapshot: the caller runs it again (see
            // `PostgresStore::reserve`).
            reserve: format!(
                "WITH live AS (
  SELECT record, {clocks} FROM {t} WHERE key = $1 AND expires_at > now()
), taken AS (
  INSERT INTO {t} AS r (key, state, token, attempt, fingerprint, credentials, expires_at, record, lease_until, sent_at)
  SELECT $1, $2, $3, $4, $5, $6, now() + $7::int8 * interval '1 millisecond', $8,
    now() + $9::int8 * interval '1 millisecond', now()
  WHERE NOT EXISTS (SELECT 1 FROM live)
  ON CONFLICT (key) DO UPDATE SET
    state = excluded.state, token = excluded.token, attempt = excluded.attempt,
    fingerprint = excluded.fingerprint, credentials = excluded.credentials,
    expires_at = excluded.expires_at, record = excluded.record,
    lease_until = excluded.lease_until, sent_at = excluded.sent_at
  WHERE r.expires_at <= now()
  RETURNING 1
)
SELECT NULL::bytea, NULL::int8, NULL::int8, NULL::int8 FROM taken
UNION ALL
SELECT * FROM live"
            ),
            replace: update(Write::ReplaceIfOwner),
            // NOTIFY is transactional: watchers hear of the change once it is committed.
            replace_notify: notifying(&update(Write::ReplaceIfOwner)),
            // Taking over an unknown outcome, or settling it: a renewal that committed
            // first moved `lease_until` and refuses this.
            take_over: notifying(&update(Write::TakeOver)),
            // A renewal: only while the lease has not ended (never revived after it).
            renew: update(Write::Renew),
            release: format!(
                "WITH gone AS (
  DELETE FROM {t} WHERE {} RETURNING key
)
SELECT pg_notify($3, encode(key, 'hex')) FROM gone",
                fence(Write::ReleaseIfOwner)
            ),
            // The row's own end last (read only by the admin's `get_with_life`).
            get: format!(
                "SELECT record, {clocks}, {} FROM {t} WHERE key = $1 AND expires_at > now()",
                ms("expires_at")
            ),
            delete: format!(
                "WITH gone AS (DELETE FROM {t} WHERE key = $1 RETURNING key, expires_at > now() AS live)
SELECT live, pg_notify($2, encode(key, 'hex')) FROM gone"
            ),
            // SKIP LOCKED: a row a reservation is taking over right now is left alone,
            // and purgers on several replicas never wait for one another. The outer
            // condition re-checks expiry on the row as locked.
            purge: format!(
                "DELETE FROM {t} WHERE key IN (
  SELECT key FROM {t} WHERE expires_at <= now()
  ORDER BY expires_at LIMIT {PURGE_BATCH} FOR UPDATE SKIP LOCKED
) AND expires_at <= now()"
            ),
            // Operators' listing (SPEC §1 "Unknown outcomes"): the partial index
            // `{t}_in_progress` holds exactly these rows. Leases that ended first come
            // first (unknown outcomes before calls in flight); rows of versions before
            // `lease_until` sort first, their lease is in `expires_at`.
            list_in_progress: format!(
                "SELECT key, record, {clocks} FROM {t} WHERE state = 'in_progress' AND expires_at > now()
ORDER BY lease_until NULLS FIRST, key LIMIT $1"
            ),
            clock: format!("SELECT {}", ms("now()")),
            channel: format!("{t}_events"),
        }
    }
}

/// Whether `name` can be written into SQL as it is: a lowercase unquoted identifier
/// (letters, digits, `_`; not starting with a digit), short enough that the derived
/// index and channel names stay under PostgreSQL's 63-byte limit.
pub fn check_table_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 48 {
        Ok(())
    } else {
        Err(format!(
            "invalid table name {name:?}: use 1-48 lowercase letters, digits and _, not starting with a digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(check_table_name("idem_records").is_ok());
        assert!(check_table_name("_t2").is_ok());
        for bad in [
            "",
            "2t",
            "Idem",
            "a-b",
            "a;drop table x",
            "\"q\"",
            &"a".repeat(49),
        ] {
            assert!(check_table_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
