//! Unknown outcomes survive a store failover (SPEC §1 "Unknown outcomes"): attempts
//! whose owner was SIGKILLed mid-call are in the store when its master dies (Redis
//! Sentinel with `wait_replicas: 1`) or its primary dies and the synchronous standby is
//! promoted (PostgreSQL). After the switch, duplicates through three replicas at once
//! settle each one from the upstream's records (`on_unknown: reconcile`): none is
//! forgotten (that would forward it again: two executions), and none is settled twice
//! (every lookup answer is numbered, and every replica replays the same one).

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use support::harness::{try_send_within, IdemProcess};
use support::poll::eventually;
use support::postgres::PgServer;
use support::redis_sentinel::RedisSentinelSet;
use support::upstream::MockUpstream;

const INTENTS: usize = 5;
/// Every request this test sends is answered within this, or the test fails: a hung
/// idem must not hang it. (A repeat's longest path is a reconcile lookup to the mock
/// upstream, which answers at once, behind a store `op_timeout` of at most 500 ms.)
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

fn yaml(upstream: &MockUpstream, store: &str) -> String {
    format!(
        "upstream:\n  url: {}\n  timeout: 10s\nstore:\n{store}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: 1s\n    on_unknown: reconcile\n    reconcile:\n      path: \"/lookup?key={{key}}\"\n",
        upstream.url()
    )
}

async fn ready(p: &IdemProcess) {
    let url = p.admin_url("/readyz");
    eventually(Duration::from_secs(15), "idem ready", async || {
        try_send_within(ANSWER_WITHIN, "GET", &url, &[], "")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
}

/// `INTENTS` calls the upstream holds, their owner SIGKILLed, every lease ended (as the
/// store's records say); returns three other replicas.
async fn unknown_outcomes(upstream: &MockUpstream, config: &str) -> Vec<IdemProcess> {
    let mut owner = IdemProcess::spawn(config).await;
    let others = vec![
        IdemProcess::spawn(config).await,
        IdemProcess::spawn(config).await,
        IdemProcess::spawn(config).await,
    ];
    for p in others.iter().chain([&owner]) {
        ready(p).await;
    }
    for i in 0..INTENTS {
        let u = owner.url(&format!("/invoices/fo{i}/charge"));
        tokio::spawn(
            // Held by the upstream until the owner is killed: never answered.
            async move {
                let held = [("x-mock-delay-ms", "30000")];
                try_send_within(ANSWER_WITHIN, "POST", &u, &held, "{}").await
            },
        );
    }
    eventually(
        Duration::from_secs(10),
        "the calls reached the upstream",
        async || (0..INTENTS).all(|i| upstream.executions(&format!("charge:fo{i}")) == 1),
    )
    .await;
    owner.kill();
    for i in 0..INTENTS {
        let url = others[0].admin_url(&format!("/v1/keys/charge/charge:fo{i}"));
        eventually(Duration::from_secs(10), "the lease ended", async || {
            let record = try_send_within(ANSWER_WITHIN, "GET", &url, &[], "")
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"))
                .json();
            // The lease, not the record's own end (`expires_at`, its retention).
            let ends = record["lease_ends_at"]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339(t).ok());
            record["state"] == "in_progress" && ends.is_some_and(|t| t < SystemTime::now())
        })
        .await;
    }
    others
}

/// Duplicates of every intent through every replica at once, each repeated until it is
/// answered from the settled outcome (the store may refuse while it switches).
async fn settle_everywhere(replicas: &[IdemProcess], upstream: &MockUpstream) {
    let calls = (0..INTENTS).flat_map(|i| {
        replicas.iter().map(move |p| {
            let u = p.url(&format!("/invoices/fo{i}/charge"));
            async move {
                let r = eventually(Duration::from_secs(30), "settled", async || {
                    // Refused while the store switches, but always answered.
                    let r = try_send_within(ANSWER_WITHIN, "POST", &u, &[], "{}")
                        .await
                        .unwrap_or_else(|e| panic!("{u}: {e}"));
                    let transient = matches!(r.status, 503) || r.code() == "request_in_progress";
                    assert!(
                        transient || r.replayed(),
                        "{}: {} {}",
                        u,
                        r.status,
                        r.text()
                    );
                    r.replayed().then_some(r)
                })
                .await;
                (i, r)
            }
        })
    });
    let answers = join_all(calls).await;
    for i in 0..INTENTS {
        let key = format!("charge:fo{i}");
        assert_eq!(
            upstream.executions(&key),
            1,
            "{key} forwarded again: the attempt was forgotten"
        );
        let bodies: Vec<_> = answers
            .iter()
            .filter(|(j, _)| *j == i)
            .map(|(_, r)| &r.body)
            .collect();
        assert!(
            bodies.windows(2).all(|w| w[0] == w[1]),
            "{key} settled more than once: {bodies:?}"
        );
        let reconciled = answers
            .iter()
            .filter(|(j, _)| *j == i)
            .all(|(_, r)| r.header("idempotent-reconciled") == Some("true"));
        assert!(reconciled, "{key}");
    }
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    println!(
        "MEASURED {INTENTS} unknown outcomes settled once each after the failover (at {stamp})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_master_killed_forgets_no_unknown_outcome() {
    let mut set = RedisSentinelSet::start(2);
    let upstream = MockUpstream::start().await;
    let store = format!(
        "  backend: redis\n  redis:\n    mode: sentinel\n    url: redis://127.0.0.1:1/0\n    nodes: [{}]\n    sentinel_master: mymaster\n    op_timeout: 250ms\n    wait_replicas: 1\n",
        set.sentinel_urls().join(", ")
    );
    let config = yaml(&upstream, &store);
    let replicas = unknown_outcomes(&upstream, &config).await;
    let old = set.master();
    set.servers[old].stop();
    set.wait_switched(old, Duration::from_secs(20));
    settle_everywhere(&replicas, &upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_standby_promoted_forgets_no_unknown_outcome() {
    let mut primary = support::store::migrated_postgres();
    let standby = PgServer::standby_of(&primary);
    primary.psql("ALTER SYSTEM SET synchronous_standby_names = 'standby'");
    primary.psql("SELECT pg_reload_conf()");
    eventually(Duration::from_secs(10), "standby synchronous", async || {
        primary.psql("SELECT sync_state FROM pg_stat_replication") == "sync"
    })
    .await;
    let upstream = MockUpstream::start().await;
    let store = format!(
        "  backend: postgres\n  postgres:\n    url: \"postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write\"\n    op_timeout: 500ms\n    pool_size: 4\n",
        primary.port(),
        standby.port()
    );
    let config = yaml(&upstream, &store);
    let replicas = unknown_outcomes(&upstream, &config).await;
    primary.kill();
    standby.psql("SELECT pg_promote()");
    settle_everywhere(&replicas, &upstream).await;
    let u = replicas[0].url("/invoices/fo0/charge");
    let r = try_send_within(ANSWER_WITHIN, "POST", &u, &[], "{}").await;
    assert!(r.as_ref().is_ok_and(|r| r.replayed()), "{r:?}");
}
