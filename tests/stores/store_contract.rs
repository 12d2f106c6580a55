//! The store contract, run against every backend (`memory::*`, `redis::*`,
//! `redis_cluster::*`, `redis_sentinel::*`, `postgres::*`), then the behaviour only one
//! backend has (Redis and PostgreSQL outages, the PostgreSQL table, memory bounds).
//!
//! Redis tests start their own `redis-server` on a free port (see `support::redis`).

use crate::store_cases;
use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::key::StoreKey;
use idem::store::{Reserve, Store, StoreError, Token};
use tokio::time::{sleep, timeout};

use support::store::{assert_ended, completed, in_progress, key, unclocked, Backend, HANG};

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);

store_cases!([memory, redis, redis_cluster, redis_sentinel, postgres] [
    loser_gets_the_existing_record,
    exactly_one_winner_among_50_concurrent_reserves,
    owner_completes_and_wrong_token_is_refused,
    stale_owner_cannot_overwrite_or_release_its_successor,
    release_is_fenced_and_frees_the_key,
    lease_expiry_lets_a_new_reserve_win,
    renewal_keeps_the_lease,
    completion_wakes_a_waiter_on_another_instance,
    release_and_delete_wake_waiters,
    concurrent_takeovers_of_a_stored_failure_have_one_winner,
    waiters_do_not_starve_the_writer,
    binary_records_round_trip,
]);

fn won(r: Result<Reserve, StoreError>) -> bool {
    matches!(r.expect("reserve"), Reserve::Won)
}

async fn loser_gets_the_existing_record(backend: Backend) {
    let store = backend.instance().await;
    let first = in_progress(LEASE);
    assert!(won(store.reserve(&key(1), &first, LEASE).await));
    match store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await
        .unwrap()
    {
        Reserve::Exists(existing, _) => assert_eq!(unclocked(&existing), unclocked(&first)),
        Reserve::Won => panic!("second reserve of the same key won"),
    }
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&first))
    );
    assert_eq!(store.get(&key(2)).await.unwrap(), None);
    store.ping().await.unwrap();
}

async fn exactly_one_winner_among_50_concurrent_reserves(backend: Backend) {
    let stores = [
        backend.instance().await,
        backend.instance().await,
        backend.instance().await,
    ];
    let start = Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (store, start) = (stores[i % 3].clone(), start.clone());
            tokio::spawn(async move {
                let mine = in_progress(LEASE);
                start.wait().await;
                match store.reserve(&key(7), &mine, LEASE).await.unwrap() {
                    Reserve::Won => (true, mine.token),
                    Reserve::Exists(theirs, _) => (false, theirs.token),
                }
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let winners: Vec<Token> = results.iter().filter(|r| r.0).map(|r| r.1).collect();
    assert_eq!(winners.len(), 1, "exactly one winner");
    assert!(
        results.iter().all(|r| r.1 == winners[0]),
        "losers see the winner's record"
    );
}

async fn owner_completes_and_wrong_token_is_refused(backend: Backend) {
    let store = backend.instance().await;
    let mine = in_progress(LEASE);
    store.reserve(&key(1), &mine, LEASE).await.unwrap();
    let done = completed(&mine, RETENTION);
    let stranger = Token::random();
    assert!(!store
        .replace_if_owner(&key(1), &stranger, &done, RETENTION, true)
        .await
        .unwrap());
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&mine))
    );
    assert!(store
        .replace_if_owner(&key(1), &mine.token, &done, RETENTION, true)
        .await
        .unwrap());
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&done))
    );
    // Absent key: nobody owns it.
    assert!(!store
        .replace_if_owner(&key(2), &mine.token, &mine, LEASE, false)
        .await
        .unwrap());
    assert_eq!(store.get(&key(2)).await.unwrap(), None);
}

/// The appendix's "unchecked ownership" bug: a slow first attempt whose lease expired
/// must not overwrite or delete the record of the attempt that took over.
async fn stale_owner_cannot_overwrite_or_release_its_successor(backend: Backend) {
    let store = backend.instance().await;
    let short = Duration::from_millis(150);
    let slow = in_progress(short);
    store.reserve(&key(1), &slow, short).await.unwrap();
    sleep(short + Duration::from_millis(100)).await;
    let successor = in_progress(LEASE);
    assert!(won(store.reserve(&key(1), &successor, LEASE).await));
    let late = completed(&slow, RETENTION);
    assert!(!store
        .replace_if_owner(&key(1), &slow.token, &late, RETENTION, true)
        .await
        .unwrap());
    assert!(!store
        .replace_if_owner(&key(1), &slow.token, &slow, LEASE, false)
        .await
        .unwrap());
    assert!(!store.release_if_owner(&key(1), &slow.token).await.unwrap());
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&successor))
    );
}

async fn release_is_fenced_and_frees_the_key(backend: Backend) {
    let store = backend.instance().await;
    let mine = in_progress(LEASE);
    store.reserve(&key(1), &mine, LEASE).await.unwrap();
    assert!(!store
        .release_if_owner(&key(1), &Token::random())
        .await
        .unwrap());
    assert!(store.get(&key(1)).await.unwrap().is_some());
    assert!(store.release_if_owner(&key(1), &mine.token).await.unwrap());
    assert_eq!(store.get(&key(1)).await.unwrap(), None);
    assert!(!store.release_if_owner(&key(1), &mine.token).await.unwrap());
    assert!(won(store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await));
}

async fn lease_expiry_lets_a_new_reserve_win(backend: Backend) {
    let store = backend.instance().await;
    let lease = Duration::from_millis(200);
    store
        .reserve(&key(1), &in_progress(lease), lease)
        .await
        .unwrap();
    assert!(!won(store
        .reserve(&key(1), &in_progress(lease), lease)
        .await));
    sleep(lease + Duration::from_millis(150)).await;
    assert_eq!(store.get(&key(1)).await.unwrap(), None);
    assert!(won(store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await));
}

async fn renewal_keeps_the_lease(backend: Backend) {
    let store = backend.instance().await;
    let lease = Duration::from_millis(300);
    let mine = in_progress(lease);
    store.reserve(&key(1), &mine, lease).await.unwrap();
    for _ in 0..3 {
        sleep(lease / 3).await;
        let renewed = mine.renewed(lease);
        assert!(store
            .replace_if_owner(&key(1), &mine.token, &renewed, lease, false)
            .await
            .unwrap());
    }
    // 400 ms after reserving with a 300 ms lease: alive only thanks to the renewals.
    assert!(store.get(&key(1)).await.unwrap().is_some());
}

async fn completion_wakes_a_waiter_on_another_instance(backend: Backend) {
    let (winner, duplicate) = (backend.instance().await, backend.instance().await);
    let mine = in_progress(LEASE);
    winner.reserve(&key(1), &mine, LEASE).await.unwrap();
    // Register before reading, as the proxy does.
    let mut watch = duplicate.watch(&key(1));
    let seen = duplicate.get(&key(1)).await.unwrap().expect("in progress");
    assert!(!seen.is_completed());
    // A silent write (lease renewal) wakes nobody: wake-ups are events, not polling.
    let renewed = mine.renewed(LEASE);
    assert!(winner
        .replace_if_owner(&key(1), &mine.token, &renewed, LEASE, false)
        .await
        .unwrap());
    assert!(timeout(Duration::from_millis(200), watch.changed())
        .await
        .is_err());

    let done = completed(&mine, RETENTION);
    let waiter = tokio::spawn(async move {
        watch.changed().await;
        Instant::now()
    });
    let completed_at = Instant::now();
    assert!(winner
        .replace_if_owner(&key(1), &mine.token, &done, RETENTION, true)
        .await
        .unwrap());
    let woken_at = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .unwrap();
    eprintln!("woken {:?} after completion", woken_at - completed_at);
    assert_eq!(
        duplicate
            .get(&key(1))
            .await
            .unwrap()
            .as_ref()
            .map(unclocked),
        Some(unclocked(&done))
    );
}

async fn release_and_delete_wake_waiters(backend: Backend) {
    let (a, b) = (backend.instance().await, backend.instance().await);
    let mine = in_progress(LEASE);
    a.reserve(&key(1), &mine, LEASE).await.unwrap();
    let mut watch = b.watch(&key(1));
    assert!(a.release_if_owner(&key(1), &mine.token).await.unwrap());
    assert!(
        timeout(HANG, watch.changed()).await.is_ok(),
        "release wakes"
    );

    a.reserve(&key(1), &in_progress(LEASE), LEASE)
        .await
        .unwrap();
    assert!(b.delete(&key(1)).await.unwrap());
    assert!(timeout(HANG, watch.changed()).await.is_ok(), "delete wakes");
    assert!(!b.delete(&key(1)).await.unwrap());
    assert_eq!(a.get(&key(1)).await.unwrap(), None);
}

/// `on_failure: retry`: repeats of a stored 4xx take the record over with a new attempt
/// by swapping on the stored token; only one of them may run the next attempt.
async fn concurrent_takeovers_of_a_stored_failure_have_one_winner(backend: Backend) {
    let stores = [backend.instance().await, backend.instance().await];
    let first = in_progress(LEASE);
    stores[0].reserve(&key(1), &first, LEASE).await.unwrap();
    let failed = completed(&first, RETENTION);
    stores[0]
        .replace_if_owner(&key(1), &first.token, &failed, RETENTION, true)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (store, failed) = (stores[i % 2].clone(), failed.clone());
            tokio::spawn(async move {
                let next = failed.next_attempt(LEASE);
                let (k, owner) = (key(1), failed.token);
                let took = store.replace_if_owner(&k, &owner, &next, LEASE, false);
                took.await.unwrap().then_some(next)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        winners.extend(t.await.unwrap());
    }
    assert_eq!(winners.len(), 1, "exactly one takeover");
    let stored = stores[1].get(&key(1)).await.unwrap().expect("record");
    let winner = winners.pop().map(|w| unclocked(&w));
    assert_eq!((stored.attempt, Some(unclocked(&stored))), (2, winner));
}

/// The appendix's "waiters starve the writer" bug: 200 waiting duplicates must leave
/// the winner able to store its result, and all of them learn of it.
async fn waiters_do_not_starve_the_writer(backend: Backend) {
    let store = backend.instance().await;
    let mine = in_progress(LEASE);
    store.reserve(&key(1), &mine, LEASE).await.unwrap();
    let waiters: Vec<_> = (0..200)
        .map(|_| {
            let mut watch = store.watch(&key(1));
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    let record = store.get(&key(1)).await.unwrap().expect("record");
                    if record.is_completed() {
                        return;
                    }
                    watch.changed().await;
                }
            })
        })
        .collect();
    // The starvation bug made this completion wait for a connection the waiters held:
    // it hung, so ending at all is the check (HANG), not how fast.
    let done = completed(&mine, RETENTION);
    let k = key(1);
    let completion = store.replace_if_owner(&k, &mine.token, &done, RETENTION, true);
    let stored = timeout(HANG, completion)
        .await
        .expect("completion under 200 waiters");
    assert!(stored.unwrap());
    for w in waiters {
        timeout(Duration::from_secs(5), w)
            .await
            .expect("every waiter sees it")
            .unwrap();
    }
}

async fn binary_records_round_trip(backend: Backend) {
    let store = backend.instance().await;
    let mine = in_progress(LEASE);
    store.reserve(&key(9), &mine, LEASE).await.unwrap();
    let done = completed(&mine, RETENTION);
    store
        .replace_if_owner(&key(9), &mine.token, &done, RETENTION, true)
        .await
        .unwrap();
    assert_eq!(
        store.get(&key(9)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&done))
    );
    match store
        .reserve(&key(9), &in_progress(LEASE), LEASE)
        .await
        .unwrap()
    {
        Reserve::Exists(existing, _) => assert_eq!(unclocked(&existing), unclocked(&done)),
        Reserve::Won => panic!("completed key reserved again"),
    }
}

/// Every operation fails with `Unavailable` or `Timeout` rather than hanging, three times
/// over. `reserve_key`: a key the store has no local knowledge of (Redis answers a key
/// this process owns from memory, without asking the server).
async fn assert_failing_fast(store: &Store, reserve_key: StoreKey) {
    let r = in_progress(LEASE);
    for _ in 0..3 {
        let start = Instant::now();
        let results = [
            store.reserve(&reserve_key, &r, LEASE).await.err(),
            store.get(&key(1)).await.err(),
            store
                .replace_if_owner(&key(1), &r.token, &r, LEASE, true)
                .await
                .err(),
            store.ping().await.err(),
        ];
        for e in results {
            let e = e.expect("an operation succeeded without its server");
            assert!(
                matches!(e, StoreError::Unavailable(_) | StoreError::Timeout(_)),
                "{e:?}"
            );
        }
        let took = start.elapsed();
        eprintln!("MEASURED four failing operations took {took:?}");
        assert_ended("four failing operations", took);
    }
}

/// Polls until `ping` succeeds, at most `within`; returns how long recovery took.
async fn wait_recovered(store: &Store, within: Duration) -> Duration {
    let start = Instant::now();
    while store.ping().await.is_err() {
        assert!(start.elapsed() < within, "not recovered within {within:?}");
        sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

mod memory_only;
mod postgres_only;
mod redis_only;
