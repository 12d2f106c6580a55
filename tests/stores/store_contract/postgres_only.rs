//! PostgreSQL-only behaviour: the table an operator can query, expired rows invisible
//! before the purge deletes them, batched purge, the table re-created, outages (killed,
//! frozen) and recovery with the same store, LISTEN re-established after a restart.

use std::time::{Duration, Instant};

use idem::store::{Reserve, Store};
use tokio::time::{sleep, timeout};

use super::support::postgres::PgServer;
use super::support::store::{
    completed, in_progress, key, listening, migrated_postgres, postgres_config, unclocked,
    wait_listening, HANG,
};
use super::{assert_failing_fast, wait_recovered, won, LEASE, RETENTION};

/// `postgres_config`'s op_timeout plus slack: a failing operation answers within it.
const RECOVERY: Duration = Duration::from_secs(10);

/// The hex of a test key, as the `key` column holds it.
fn hex(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

async fn store(server: &PgServer) -> Store {
    Store::from(listening(&server.url()).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_rows_an_operator_can_query() {
    let _panics = crate::support::panics::watched();
    let server = migrated_postgres();
    let store = store(&server).await;
    let mine = in_progress(LEASE);
    store.reserve(&key(0xab), &mine, LEASE).await.unwrap();
    let row = server.psql(&format!(
        "SELECT state, attempt, encode(token, 'hex'), \
         round(extract(epoch FROM expires_at - now()))::int \
         FROM idem_records WHERE key = '\\x{}'",
        hex(0xab)
    ));
    assert_eq!(row, format!("in_progress|1|{}|30", mine.token));
    let done = completed(&mine, RETENTION);
    store
        .replace_if_owner(&key(0xab), &mine.token, &done, RETENTION, true)
        .await
        .unwrap();
    let row = server
        .psql("SELECT state, round(extract(epoch FROM expires_at - now()))::int FROM idem_records");
    assert_eq!(row, "completed|3600", "completion sets the retention");
}

/// An expired row is absent for every statement even while it is still in the table:
/// not returned, not replayed, taken over by the next reservation. Another session
/// holds a `KEY SHARE` lock on the row meanwhile, which the purge (`FOR UPDATE SKIP
/// LOCKED`) skips, so the row is provably still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_never_replayed_even_before_deletion() {
    let _panics = crate::support::panics::watched();
    let server = migrated_postgres();
    let store = store(&server).await;
    let mine = in_progress(LEASE);
    store.reserve(&key(1), &mine, LEASE).await.unwrap();
    let done = completed(&mine, RETENTION);
    store
        .replace_if_owner(&key(1), &mine.token, &done, RETENTION, true)
        .await
        .unwrap();
    let row = format!("key = '\\x{}'", hex(1));
    let (holder, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    // Locked first, then expired from another session (an UPDATE of a non-key column
    // is compatible with KEY SHARE): a purge round between the two cannot take it.
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM idem_records WHERE {row} FOR KEY SHARE"
        ))
        .await
        .unwrap();
    server.psql(&format!(
        "UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE {row}"
    ));
    sleep(Duration::from_secs(3)).await; // a purge round has come and gone
    let count = format!("SELECT count(*) FROM idem_records WHERE {row}");
    assert_eq!(server.psql(&count), "1", "still in the table");
    assert_eq!(store.get(&key(1)).await.unwrap(), None, "not returned");
    let fresh = in_progress(LEASE);
    assert!(
        won(store.reserve(&key(1), &fresh, LEASE).await),
        "not replayed"
    );
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&fresh))
    );
    holder.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_purged_in_the_background() {
    let _panics = crate::support::panics::watched();
    let server = migrated_postgres();
    let store = store(&server).await;
    let live = in_progress(LEASE);
    store.reserve(&key(1), &live, LEASE).await.unwrap();
    // 1 200 expired rows: more than two purge batches.
    server.psql(
        "INSERT INTO idem_records SELECT sha256(i::text::bytea), 'completed', '\\x00', 1, \
         '\\x00', '\\x00', now() - interval '1 minute', '\\x00' FROM generate_series(1, 1200) i",
    );
    let start = Instant::now();
    while server.psql("SELECT count(*) FROM idem_records") != "1" {
        assert!(start.elapsed() < RECOVERY, "expired rows not purged");
        sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&live))
    );
}

/// A dropped table is not created again behind the operator's back (serving runs no
/// DDL): the store turns unready, saying to run `idem migrate`, and ready again by
/// itself once it has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_table_asks_for_idem_migrate_then_recovers() {
    let _panics = crate::support::panics::watched();
    let server = migrated_postgres();
    let store = store(&server).await;
    wait_recovered(&store, RECOVERY).await;
    server.psql("DROP TABLE idem_records");
    let err = store.get(&key(1)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("idem_records\" does not exist (SQLSTATE 42P01)"),
        "PostgreSQL's reason: {err}"
    );
    // Unready at once with that reason, then with what to run once the table is checked.
    let start = Instant::now();
    loop {
        let reason = store.ping().await.unwrap_err().to_string();
        if reason.contains("table idem_records does not exist") {
            assert!(
                reason.contains("run `idem migrate"),
                "what to run: {reason}"
            );
            break;
        }
        assert!(start.elapsed() < RECOVERY, "not checked again: {reason}");
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        server.psql("SELECT to_regclass('idem_records') IS NULL"),
        "t",
        "serving created no table"
    );
    super::support::store::migrate(&server.url());
    wait_recovered(&store, RECOVERY).await;
    assert!(won(store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_database_fails_fast_then_recovers_with_the_same_store() {
    let _panics = crate::support::panics::watched();
    let mut server = migrated_postgres();
    let (a, b) = (
        listening(&server.url()).await,
        listening(&server.url()).await,
    );
    let (store, other) = (Store::from(a.clone()), Store::from(b.clone()));
    let mine = in_progress(LEASE);
    assert!(won(store.reserve(&key(1), &mine, LEASE).await));

    server.kill();
    assert_failing_fast(&store, key(1)).await;
    server.restart();
    let took = wait_recovered(&store, RECOVERY).await;
    eprintln!("MEASURED recovered {took:?} after restart");

    // The committed reservation survived the crash.
    match store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await
        .unwrap()
    {
        Reserve::Exists(existing, _) => assert_eq!(unclocked(&existing), unclocked(&mine)),
        Reserve::Won => panic!("a committed reservation was lost in the crash"),
    }
    // Both LISTEN connections are back: a completion on `store` wakes `other`'s waiter.
    wait_listening(&a, RECOVERY).await;
    wait_listening(&b, RECOVERY).await;
    let mut watch = other.watch(&key(1));
    let done = completed(&mine, RETENTION);
    assert!(store
        .replace_if_owner(&key(1), &mine.token, &done, RETENTION, true)
        .await
        .unwrap());
    assert!(timeout(HANG, watch.changed()).await.is_ok(), "woken");
    assert_eq!(
        other.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&done))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_database_times_out_then_recovers() {
    let _panics = crate::support::panics::watched();
    let server = migrated_postgres();
    let store = store(&server).await;
    store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await
        .unwrap();
    server.pause();
    assert_failing_fast(&store, key(1)).await;
    server.resume();
    let took = wait_recovered(&store, RECOVERY).await;
    eprintln!("MEASURED recovered {took:?} after SIGCONT");
    assert!(!won(store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_while_the_database_is_down() {
    let _panics = crate::support::panics::watched();
    let mut server = migrated_postgres();
    server.kill();
    let store = Store::from(
        idem::store::PostgresStore::connect(&postgres_config(&server.url()))
            .await
            .expect("a store starts without its database"),
    );
    assert!(store.ping().await.is_err());
    server.restart();
    wait_recovered(&store, RECOVERY).await;
    assert!(won(store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await));
}

/// `idem migrate` creates the table for a role-separated deployment and records its
/// schema version, says so, changes nothing on a second run, and says why it does
/// nothing for another backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_migrate_creates_the_table() {
    let _panics = crate::support::panics::watched();
    let server = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, store: &str| {
        let path = dir.path().join(name);
        let yaml = format!("upstream:\n  url: http://127.0.0.1:9\n{store}");
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let pg = write(
        "pg.yaml",
        &format!(
            "store:\n  backend: postgres\n  postgres:\n    url: {}\n    table: intents\n",
            server.url()
        ),
    );
    let run = |path: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["migrate", "--config"])
            .arg(path)
            .output()
            .expect("run idem migrate")
    };
    let out = run(&pg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "table intents: created at schema version 2"
    );
    assert_eq!(
        server.psql("SELECT obj_description('intents'::regclass, 'pg_class')"),
        "idem schema version 2 (written by idem migrate; idem serve checks it)"
    );
    let again = run(&pg);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        "table intents: already at schema version 2, nothing to do"
    );
    let memory = write("memory.yaml", "store:\n  backend: memory\n");
    let out = run(&memory);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to do"));
}
