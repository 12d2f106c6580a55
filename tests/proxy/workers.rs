//! The data plane's worker threads: connections are spread evenly over them, a
//! request's duplicates on different workers still execute once (memory and Redis),
//! and the open-connections gauge follows connections as they close.

use crate::store_cases;
use crate::support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use support::env::{Backend, Env};
use support::harness::{admin_url, assert_all_got_the_one_result, post, send, url, Resp};
use support::poll::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHARGE: &str = r#"
server:
  workers: 3
routes:
  - name: charge
    path: /invoices/{invoice_id}/charge
    key: "charge:{path.invoice_id}"
"#;

async fn worker_connections(running: &idem::app::Running) -> Vec<f64> {
    let text = send("GET", &admin_url(running, "/metrics"), &[], "")
        .await
        .text();
    (0..3)
        .map(|n| {
            support::harness::metric_sum(&text, &format!("idem_connections{{worker=\"{n}\"}}"))
        })
        .collect()
}

/// A keep-alive connection that has had one passthrough request answered.
async fn open_connection(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 "), "{:?}", &buf[..n]);
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_spread_evenly_and_counted_until_they_close() {
    let env = Env::new(Backend::memory()).await;
    let idem = env.idem(CHARGE).await;
    let mut open = Vec::new();
    for _ in 0..9 {
        open.push(open_connection(idem.addr).await);
    }
    assert_eq!(worker_connections(&idem).await, [3.0, 3.0, 3.0]);
    drop(open);
    // (The metrics requests go to the admin listener, which is not counted.)
    eventually(
        Duration::from_secs(2),
        "closed connections uncounted",
        async || worker_connections(&idem).await == [0.0, 0.0, 0.0],
    )
    .await;
}

/// 30 duplicates at once, each on a connection of its own: the acceptor spreads them
/// over the three workers, so they race for the reservation through different threads.
async fn duplicates_on_every_worker_execute_once(backend: Backend) {
    let env = Env::new(backend).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_7/charge");
    let answers = join_all((0..30).map(|_| post(&u, &[], r#"{"amount":5}"#))).await;
    assert_eq!(env.upstream.executions("charge:inv_7"), 1);
    let winner: Vec<_> = answers
        .iter()
        .filter(|r| !r.replayed())
        .filter(|r| r.status == 201)
        .collect();
    assert_eq!(winner.len(), 1, "one winner");
    for r in &answers {
        match r.status {
            201 => assert_eq!(r.body, winner[0].body, "a replay of the one result"),
            409 => assert_eq!(r.code(), "request_in_progress"),
            s => panic!("{s}: {}", r.text()),
        }
    }
    // Afterwards every worker replays it.
    for _ in 0..6 {
        assert!(post(&u, &[], r#"{"amount":5}"#).await.replayed());
    }
    assert_eq!(env.upstream.executions("charge:inv_7"), 1);
}

/// 29 duplicates at once, spread over the workers, while the upstream holds the first
/// call: every one answered before the upstream answered is refused (409), none runs.
async fn duplicates_racing_a_slow_upstream_execute_once(backend: Backend) {
    const DELAY: Duration = Duration::from_millis(1500);
    let env = Env::new(backend).await;
    let idem = env.idem(CHARGE).await;
    let u = url(&idem, "/invoices/inv_8/charge");
    let slow = [("x-mock-delay-ms", "1500")];
    let first = post(&u, &slow, r#"{"amount":5}"#);
    let duplicates = async {
        eventually(
            Duration::from_secs(5),
            "the first call upstream",
            async || env.upstream.executions("charge:inv_8") == 1,
        )
        .await;
        let upstream_answers = env.upstream.received()[0].at + DELAY;
        let dup = async || (post(&u, &slow, r#"{"amount":5}"#).await, Instant::now());
        (join_all((0..29).map(|_| dup())).await, upstream_answers)
    };
    let (first, (answers, upstream_answers)) = tokio::join!(first, duplicates);
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    let mut during = 0;
    for (r, at) in &answers {
        if *at < upstream_answers {
            during += 1;
            assert_eq!(r.status, 409, "while the call ran: {}", r.text());
            assert_eq!(r.code(), "request_in_progress");
        } else if r.status != 409 {
            assert!(r.replayed(), "{} {}", r.status, r.text());
            assert_eq!(r.body, first.body);
        }
    }
    assert!(during > 0, "no duplicate was answered while the call ran");
    assert_eq!(env.upstream.executions("charge:inv_8"), 1);
    assert!(post(&u, &slow, r#"{"amount":5}"#).await.replayed());
}

store_cases!([memory, redis, postgres] [
    duplicates_on_every_worker_execute_once,
    duplicates_racing_a_slow_upstream_execute_once
]);

/// With Redis, the workers share one event subscription (a completion reaches the
/// process once, not once per worker), and a duplicate waiting on one worker is woken
/// by a completion on another: every duplicate gets the one result, and on both
/// replicas what woke the waiters was the completion's notification (counted by
/// `idem_duplicate_wakeups_total`), not their once-a-second safety re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_one_subscription_and_wake_each_other() {
    let env = Env::new(Backend::redis()).await;
    let redis = env.backend.redis_server();
    let waiting = CHARGE.replace(
        "key: \"charge:{path.invoice_id}\"",
        "key: \"charge:{path.invoice_id}\"\n    on_concurrent: wait\n    wait_timeout: 10s",
    );
    let first = env.idem(&waiting).await;
    let second = env.idem(&waiting).await;
    // Two processes of three workers each: two subscribers.
    eventually(
        Duration::from_secs(2),
        "one subscription per process",
        async || {
            let subscribers = redis.command(&["PUBSUB", "NUMSUB", "idem:events"]);
            assert!(!subscribers.ends_with(":3\r\n"), "{subscribers:?}");
            subscribers.ends_with(":2\r\n")
        },
    )
    .await;
    // Duplicates over both replicas and all their workers while the first call runs.
    let calls = (0..24).map(|i| {
        let u = url(
            if i % 2 == 0 { &first } else { &second },
            "/invoices/inv_w/charge",
        );
        async move {
            let r = post(&u, &[("x-mock-delay-ms", "300")], "{}").await;
            (r, Instant::now())
        }
    });
    let (answers, answered): (Vec<Resp>, Vec<Instant>) = join_all(calls).await.into_iter().unzip();
    assert_eq!(env.upstream.executions("charge:inv_w"), 1);
    assert_all_got_the_one_result(&answers);
    let winner = answers.iter().position(|r| !r.replayed());
    assert_eq!(answers.iter().filter(|r| !r.replayed()).count(), 1);
    // Each replica had waiters (12 duplicates each, spread over its workers): the
    // completion on one worker of one replica woke waiters on both.
    for replica in [&first, &second] {
        let metrics = send("GET", &admin_url(replica, "/metrics"), &[], "")
            .await
            .text();
        let woken = r#"idem_duplicate_wakeups_total{by="notification"}"#;
        assert!(
            support::harness::metric_sum(&metrics, woken) >= 1.0,
            "no waiter was woken by the completion: {metrics}"
        );
    }
    let completed = answered[winner.unwrap()];
    let last = answered.iter().max().unwrap();
    let lag = last.saturating_duration_since(completed);
    println!("MEASURED wake-up: last waiter answered {lag:?} after the winner");
}
