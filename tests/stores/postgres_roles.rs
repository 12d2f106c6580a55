//! PostgreSQL as a DBA runs it (issue 34), through the real binary on a private server:
//! `idem migrate` as a role that may create, `idem serve` as a role with only `SELECT,
//! INSERT, UPDATE, DELETE` on the table; a serving role started before its grants says
//! why it is not ready (PostgreSQL's own reason) and turns ready by itself once they
//! are given; errors name their cause; a table made by an earlier release's `serve`
//! keeps serving during a rolling upgrade.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use support::harness::{post, IdemProcess};
use support::poll::eventually;
use support::postgres::PgServer;
use support::upstream::MockUpstream;

const ROUTES: &str = "routes:\n  - name: charge\n    path: /invoices/{invoice_id}/charge\n    key: \"charge:{path.invoice_id}\"\n";
const GRANT: &str = "GRANT SELECT, INSERT, UPDATE, DELETE ON idem_records TO idem_app";

/// A private server with `idem_owner` (may create in schema `public`) and `idem_app`
/// (may only log in), as a DBA sets them up.
fn server_with_roles() -> PgServer {
    let server = PgServer::start();
    server.psql("CREATE ROLE idem_owner LOGIN");
    server.psql("GRANT CREATE ON SCHEMA public TO idem_owner");
    server.psql("CREATE ROLE idem_app LOGIN");
    server
}

fn store_yaml(server: &PgServer, role: &str) -> String {
    format!(
        "store:\n  backend: postgres\n  postgres:\n    url: postgres://{role}@127.0.0.1:{}/postgres\n    op_timeout: 500ms\n    pool_size: 4\n",
        server.port()
    )
}

fn yaml(upstream: &MockUpstream, server: &PgServer, role: &str) -> String {
    format!(
        "upstream:\n  url: {}\n  timeout: 3s\n{}{ROUTES}",
        upstream.url(),
        store_yaml(server, role)
    )
}

/// `idem migrate --config` on a file holding `yaml`.
fn migrate(dir: &Path, yaml: &str) -> Output {
    let path = dir.join("migrate.yaml");
    std::fs::write(&path, yaml).unwrap();
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["migrate", "--config"])
        .arg(&path)
        .output()
        .expect("run idem migrate")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// A fresh intent is forwarded once and its repeat replayed.
async fn fresh_then_replay(idem: &IdemProcess, upstream: &MockUpstream, invoice: &str) {
    let url = idem.url(&format!("/invoices/{invoice}/charge"));
    let first = post(&url, &[], "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    let again = post(&url, &[], "{}").await;
    assert!(again.replayed(), "{} {}", again.status, again.text());
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.executions(&format!("charge:{invoice}")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_as_owner_then_serve_with_only_dml_grants() {
    let server = server_with_roles();
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let out = migrate(dir.path(), &yaml(&upstream, &server, "idem_owner"));
    assert!(out.status.success(), "{}", stderr(&out));
    server.psql(GRANT);

    let idem = IdemProcess::spawn(&yaml(&upstream, &server, "idem_app")).await;
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}\n{}", ready.text(), idem.logs());
    fresh_then_replay(&idem, &upstream, "inv_1").await;
    assert_eq!(
        stdout(&out),
        "table idem_records: created at schema version 2"
    );
}

/// Started before its grants: `/readyz` and the log carry PostgreSQL's refusal and the
/// grant to run, requests are refused, and once granted it turns ready by itself — no
/// restart — with no pooled connection left in an aborted transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_before_its_grants_says_why_then_turns_ready_by_itself() {
    let server = server_with_roles();
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let out = migrate(dir.path(), &yaml(&upstream, &server, "idem_owner"));
    assert!(out.status.success(), "{}", stderr(&out));

    let idem = IdemProcess::spawn(&yaml(&upstream, &server, "idem_app")).await;
    let unready = idem.readiness(200).await;
    assert_eq!(unready.status, 503);
    let reason = unready.text();
    assert!(
        reason.contains("permission denied for table idem_records (SQLSTATE 42501)"),
        "PostgreSQL's reason in /readyz: {reason}"
    );
    assert!(reason.contains(GRANT), "what to run: {reason}");
    let refused = post(&idem.url("/invoices/inv_early/charge"), &[], "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(upstream.executions("charge:inv_early"), 0);
    assert!(
        idem.logs()
            .contains("permission denied for table idem_records (SQLSTATE 42501)"),
        "PostgreSQL's reason in the log:\n{}",
        idem.logs()
    );

    server.psql(GRANT);
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}\n{}", ready.text(), idem.logs());
    fresh_then_replay(&idem, &upstream, "inv_1").await;
    fresh_then_replay(&idem, &upstream, "inv_early").await;
    let aborted = "SELECT count(*) FROM pg_stat_activity \
                   WHERE usename = 'idem_app' AND state = 'idle in transaction (aborted)'";
    assert_eq!(server.psql(aborted), "0");
}

/// A grant revoked under a ready idem: the refused statement turns readiness 503 with
/// PostgreSQL's reason (a `SELECT 1` alone would have stayed ready while every request
/// failed), and restoring the grant makes it ready again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_grant_turns_unready_then_ready_again_by_itself() {
    let server = server_with_roles();
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let out = migrate(dir.path(), &yaml(&upstream, &server, "idem_owner"));
    assert!(out.status.success(), "{}", stderr(&out));
    server.psql(GRANT);
    let idem = IdemProcess::spawn(&yaml(&upstream, &server, "idem_app")).await;
    assert_eq!(idem.readiness(200).await.status, 200, "{}", idem.logs());

    server.psql("REVOKE INSERT ON idem_records FROM idem_app");
    let refused = post(&idem.url("/invoices/inv_r/charge"), &[], "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let unready = idem.readiness(503).await;
    assert_eq!(unready.status, 503);
    assert!(
        unready
            .text()
            .contains("permission denied for table idem_records (SQLSTATE 42501)"),
        "{}",
        unready.text()
    );
    assert_eq!(upstream.executions("charge:inv_r"), 0);

    server.psql("GRANT INSERT ON idem_records TO idem_app");
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}\n{}", ready.text(), idem.logs());
    fresh_then_replay(&idem, &upstream, "inv_r").await;
}

/// `idem migrate`'s failures carry PostgreSQL's message and SQLSTATE: a role that may
/// not create in the schema, and one that does not own the table it would alter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_errors_name_postgres_reason() {
    let server = server_with_roles();
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let out = migrate(dir.path(), &yaml(&upstream, &server, "idem_app"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "idem: cannot migrate table idem_records: permission denied for schema public (SQLSTATE 42501)"
    );
    // A table made by an earlier release (no version) and owned by someone else.
    server.psql("CREATE TABLE idem_records (key bytea PRIMARY KEY)");
    server.psql("GRANT CREATE ON SCHEMA public TO idem_app");
    let out = migrate(dir.path(), &yaml(&upstream, &server, "idem_app"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "idem: cannot migrate table idem_records: must be owner of table idem_records (SQLSTATE 42501)"
    );
}

/// The table an earlier release's `serve` made (the same columns, no version recorded):
/// a new `serve` uses it as it is — a rolling upgrade needs no step in between — and
/// `idem migrate` then records the version. One older still (no `lease_until`,
/// `sent_at`) is refused, naming the columns and `idem migrate`, until it has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_made_by_earlier_releases() {
    let server = PgServer::start();
    let upstream = MockUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let previous = "CREATE TABLE idem_records (key bytea PRIMARY KEY, \
        state text NOT NULL CHECK (state IN ('in_progress', 'completed')), token bytea NOT NULL, \
        attempt integer NOT NULL, fingerprint bytea NOT NULL, credentials bytea NOT NULL, \
        expires_at timestamptz NOT NULL, record bytea NOT NULL)";
    server.psql(previous);
    let idem = IdemProcess::spawn(&yaml(&upstream, &server, "postgres")).await;
    let unready = idem.readiness(200).await;
    assert_eq!(unready.status, 503);
    assert!(
        unready.text().contains(
            "table idem_records has no recorded schema version and lacks column(s) lease_until, sent_at: run `idem migrate --config FILE`"
        ),
        "{}",
        unready.text()
    );
    assert_eq!(
        server.psql("SELECT count(*) FROM pg_attribute WHERE attrelid = 'idem_records'::regclass AND attname = 'lease_until'"),
        "0",
        "serving altered nothing"
    );

    // What the previous release's serve left: every column, no version.
    server.psql("ALTER TABLE idem_records ADD COLUMN lease_until timestamptz, ADD COLUMN sent_at timestamptz");
    let ready = idem.readiness(200).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    fresh_then_replay(&idem, &upstream, "inv_1").await;
    eventually(
        Duration::from_secs(5),
        "the warning to run idem migrate",
        async || idem.logs().contains("no recorded schema version"),
    )
    .await;

    let out = migrate(dir.path(), &yaml(&upstream, &server, "postgres"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "table idem_records: schema version 2 recorded (the table had none: made by an earlier release's serve)"
    );
    fresh_then_replay(&idem, &upstream, "inv_2").await;
}
