//! `Store::list_in_progress` against every backend (`memory::*`, `redis::*`,
//! `redis_cluster::*`, `redis_sentinel::*`, `postgres::*`): the operators' view of
//! unknown outcomes and calls in flight (SPEC §1 "Unknown outcomes"), read from the store
//! so it is the same on every replica.

use crate::store_cases;
use crate::support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use idem::key::StoreKey;
use idem::store::{Record, Reserve, Store, StoredResponse};

use support::store::{unclocked, Backend};

const RETENTION: Duration = Duration::from_secs(3600);
const LONG_LEASE: Duration = Duration::from_secs(30);
/// A lease that has ended by the time the test lists.
const SHORT_LEASE: Duration = Duration::from_millis(30);

store_cases!([memory, redis, redis_cluster, redis_sentinel, postgres] [
    lists_unknown_and_in_flight_never_completed,
    limit_keeps_the_leases_that_ended_first,
    finds_every_record_among_many_completed_ones,
]);

fn record(key: &str, lease: Duration) -> (StoreKey, Record) {
    let r = Record::in_progress("charge", "acme", key, [1; 32], [2; 32], lease);
    (StoreKey::new("charge", "acme", key), r)
}

fn completed(r: &Record) -> Record {
    let response = StoredResponse {
        status: 201,
        headers: vec![],
        body: Some(Bytes::from_static(b"{\"id\":\"ch_1\"}")),
    };
    r.completed(response, RETENTION)
}

async fn reserve(store: &Store, key: &StoreKey, record: &Record) {
    let won = store
        .reserve(key, record, RETENTION)
        .await
        .expect("reserve");
    assert!(matches!(won, Reserve::Won), "{key} was taken");
}

fn keys(listed: &[(StoreKey, Record)]) -> Vec<String> {
    listed.iter().map(|(_, r)| r.key.clone()).collect()
}

async fn lists_unknown_and_in_flight_never_completed(backend: Backend) {
    let store = backend.instance().await;
    let (unknown_key, unknown) = record("unknown", SHORT_LEASE);
    let (flying_key, flying) = record("flying", LONG_LEASE);
    let (done_key, done) = record("done", LONG_LEASE);
    reserve(&store, &unknown_key, &unknown).await;
    reserve(&store, &flying_key, &flying).await;
    reserve(&store, &done_key, &done).await;
    let finished = completed(&done);
    assert!(store
        .replace_if_owner(&done_key, &done.token, &finished, RETENTION, true)
        .await
        .unwrap());
    tokio::time::sleep(SHORT_LEASE * 2).await;

    // Another instance: the listing comes from the store, not from this process.
    let listed = backend
        .instance()
        .await
        .list_in_progress(100)
        .await
        .unwrap();
    assert_eq!(
        keys(&listed),
        ["unknown", "flying"],
        "lease ended first, first"
    );
    assert_eq!(listed[0].0, unknown_key);
    assert_eq!(listed[1].0, flying_key);
    assert_eq!(unclocked(&listed[0].1), unclocked(&unknown));
    assert_eq!(unclocked(&listed[1].1), unclocked(&flying));
    // Judged on the store's clock.
    let now = store.clock_ms().await.unwrap();
    assert!(listed[0].1.lease_ended(now) && !listed[1].1.lease_ended(now));

    // Settled as not executed it is still in progress (the next repeat forwards it).
    let marked = unknown.not_executed();
    assert!(store
        .take_over(&unknown_key, &unknown.token, &marked, RETENTION, None)
        .await
        .unwrap());
    let listed = store.list_in_progress(100).await.unwrap();
    assert_eq!(listed[0].1.settled, marked.settled);
}

async fn limit_keeps_the_leases_that_ended_first(backend: Backend) {
    let store = backend.instance().await;
    for (name, lease_ms) in [("c", 40_000), ("a", 20), ("d", 50_000), ("b", 30_000)] {
        let (key, r) = record(name, Duration::from_millis(lease_ms));
        reserve(&store, &key, &r).await;
    }
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(keys(&store.list_in_progress(2).await.unwrap()), ["a", "b"]);
    assert_eq!(store.list_in_progress(0).await.unwrap(), vec![]);
}

/// More records than one `SCAN` step returns, spread over every Cluster master.
async fn finds_every_record_among_many_completed_ones(backend: Backend) {
    let store = backend.instance().await;
    let write = |i: usize| {
        let store = store.clone();
        async move {
            let (key, r) = record(&format!("k{i}"), LONG_LEASE);
            reserve(&store, &key, &r).await;
            if i % 100 != 7 {
                let done = completed(&r);
                assert!(store
                    .replace_if_owner(&key, &r.token, &done, RETENTION, false)
                    .await
                    .unwrap());
            }
        }
    };
    for chunk in 0..12 {
        join_all((chunk * 100..(chunk + 1) * 100).map(write)).await;
    }
    let mut listed = keys(&store.list_in_progress(1000).await.unwrap());
    listed.sort();
    let mut want: Vec<String> = (0..1200)
        .filter(|i| i % 100 == 7)
        .map(|i| format!("k{i}"))
        .collect();
    want.sort();
    assert_eq!(listed, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_skips_other_names_under_the_prefix() {
    let _panics = support::panics::watched();
    let backend = Backend::redis();
    let store = backend.instance().await;
    let (key, r) = record("mine", LONG_LEASE);
    reserve(&store, &key, &r).await;
    let server = backend.redis_server();
    server.command(&["HSET", "idem:a-hash", "f", "v"]);
    server.command(&["SET", "idem:not-a-record-key", "P"]);
    // A record key's shape holding garbage: skipped with a warning, not an error.
    let garbage = format!("idem:{}", "ab".repeat(32));
    server.command(&["SET", &garbage, "Pgarbage"]);
    assert_eq!(keys(&store.list_in_progress(10).await.unwrap()), ["mine"]);
}
