//! The store's own fences on a lease, judged on its clock, on every backend (the
//! model's findings, `crates/idem-model/tests/findings.rs`):
//! - a renewal is refused once the lease has ended: an owner back from a pause longer
//!   than its lease does not revive an attempt others may have read as an unknown
//!   outcome (SPEC §1 "One clock for every lease": never kept past its end);
//! - a takeover under `upstream_key_window` is refused once the attempt's first send is
//!   older than the window, however late the duplicate decided;
//! - an owner that took over and could not send ends its lease and keeps the first send;
//! - a renewal, an ended lease or a completion keeps the first send the store stamped,
//!   not the writer's estimate of it (a proxy whose clock is skewed would otherwise
//!   move the key window; found by `tests/stores/store_model.rs`).

use crate::store_cases;
use crate::support;

use std::time::Duration;

use idem::key::StoreKey;
use idem::store::{Record, Reserve, Store};
use support::store::Backend;

const RETENTION: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_millis(200);
/// Long enough past [`LEASE`] for every store's clock to agree it has ended.
const PAST_THE_LEASE: Duration = Duration::from_millis(400);

store_cases!([memory, redis, redis_cluster, postgres] [
    a_lease_that_ended_is_not_renewed,
    a_takeover_past_the_key_window_is_refused,
    ending_a_lease_keeps_the_first_send,
    a_skewed_owner_keeps_the_stores_first_send,
]);

/// Reserves `id` with [`LEASE`] and returns its key and the owner's record.
async fn reserved(store: &Store, id: &str) -> (StoreKey, Record) {
    let key = StoreKey::new("charge", "", id);
    let record = Record::in_progress("charge", "", id, [1; 32], [2; 32], LEASE);
    let won = store.reserve(&key, &record, RETENTION).await.unwrap();
    assert!(matches!(won, Reserve::Won), "{id} was free");
    (key, record)
}

/// The stored record and the store's clock.
async fn stored(store: &Store, key: &StoreKey) -> (Record, u64) {
    let record = store.get(key).await.unwrap().expect("a record");
    (record, store.clock_ms().await.unwrap())
}

async fn a_lease_that_ended_is_not_renewed(backend: Backend) {
    let store = backend.instance().await;
    let (key, mine) = reserved(&store, "renew").await;
    let renewed = mine.renewed(LEASE);
    assert!(store
        .renew(&key, &mine.token, &renewed, RETENTION)
        .await
        .unwrap());
    tokio::time::sleep(PAST_THE_LEASE).await;
    assert!(
        !store
            .renew(&key, &mine.token, &renewed, RETENTION)
            .await
            .unwrap(),
        "renewed after its lease ended"
    );
    let (record, now) = stored(&store, &key).await;
    assert!(record.lease_ended(now), "still an unknown outcome");
    // Its owner's outcome still lands while no one took the attempt over.
    let done = support::store::completed(&mine, RETENTION);
    let completed = store.replace_if_owner(&key, &mine.token, &done, RETENTION, true);
    assert!(completed.await.unwrap());
}

async fn a_takeover_past_the_key_window_is_refused(backend: Backend) {
    let store = backend.instance().await;
    let (key, mine) = reserved(&store, "window").await;
    tokio::time::sleep(PAST_THE_LEASE).await;
    let (first, _) = stored(&store, &key).await;
    let next = first.retried(LEASE);
    let take = |window| store.take_over(&key, &mine.token, &next, RETENTION, window);
    assert!(
        !take(Some(Duration::from_millis(300))).await.unwrap(),
        "taken over {PAST_THE_LEASE:?} after the first send, past a window of 300ms"
    );
    assert!(take(Some(Duration::from_secs(60))).await.unwrap());
    let (record, _) = stored(&store, &key).await;
    assert_eq!(record.token, next.token);
    assert_eq!(
        record.sent_at_ms, first.sent_at_ms,
        "the same attempt, same key"
    );
}

async fn ending_a_lease_keeps_the_first_send(backend: Backend) {
    let store = backend.instance().await;
    let (key, mine) = reserved(&store, "ended").await;
    tokio::time::sleep(PAST_THE_LEASE).await;
    let (first, _) = stored(&store, &key).await;
    let next = first.retried(Duration::from_secs(30));
    assert!(store
        .take_over(&key, &mine.token, &next, RETENTION, None)
        .await
        .unwrap());
    let (live, now) = stored(&store, &key).await;
    assert!(!live.lease_ended(now), "a new lease");
    let ended = next.lease_ended_now();
    let write = store.replace_if_owner(&key, &next.token, &ended, RETENTION, true);
    assert!(write.await.unwrap());
    let (record, now) = stored(&store, &key).await;
    assert!(record.lease_ended(now), "an unknown outcome again");
    assert_eq!(record.sent_at_ms, first.sent_at_ms, "its first send kept");
    assert_eq!(record.token, next.token);
}

/// An owner whose clock is an hour behind: its copy's `sent_at_ms` is an hour before the
/// store's, and none of its later writes may bring that estimate into the record.
async fn a_skewed_owner_keeps_the_stores_first_send(backend: Backend) {
    let store = backend.instance().await;
    let key = StoreKey::new("charge", "", "skewed");
    let mut mine = Record::in_progress("charge", "", "skewed", [1; 32], [2; 32], LEASE);
    mine.sent_at_ms -= 3_600_000;
    mine.expires_at_ms -= 3_600_000;
    let won = store.reserve(&key, &mine, RETENTION).await.unwrap();
    assert!(matches!(won, Reserve::Won));
    let (first, _) = stored(&store, &key).await;
    assert!(
        first.sent_at_ms > mine.sent_at_ms + 3_000_000,
        "stamped by the store"
    );

    let renewed = mine.renewed(LEASE);
    assert!(store
        .renew(&key, &mine.token, &renewed, RETENTION)
        .await
        .unwrap());
    let (record, _) = stored(&store, &key).await;
    assert_eq!(record.sent_at_ms, first.sent_at_ms, "a renewal keeps it");

    let ended = renewed.lease_ended_now();
    let write = store.replace_if_owner(&key, &mine.token, &ended, RETENTION, true);
    assert!(write.await.unwrap());
    let (record, now) = stored(&store, &key).await;
    assert!(record.lease_ended(now));
    assert_eq!(
        record.sent_at_ms, first.sent_at_ms,
        "ending the lease keeps it"
    );

    let done = support::store::completed(&ended, RETENTION);
    let write = store.replace_if_owner(&key, &mine.token, &done, RETENTION, true);
    assert!(write.await.unwrap());
    let (record, _) = stored(&store, &key).await;
    assert_eq!(record.sent_at_ms, first.sent_at_ms, "a completion keeps it");
}
