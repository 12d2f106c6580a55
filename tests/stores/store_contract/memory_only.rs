//! The memory store's bound: eviction of completed records, then `Full`.

use std::time::Duration;

use idem::store::{MemoryStore, Reserve, Store, StoreError};
use tokio::time::sleep;

use super::support::store::{completed, in_progress, key, unclocked};
use super::{won, LEASE};

fn bounded(max: usize) -> Store {
    Store::from(MemoryStore::new(max, usize::MAX))
}

#[tokio::test]
async fn full_store_evicts_the_soonest_expiring_completed_record() {
    let _panics = crate::support::panics::watched();
    let store = bounded(3);
    let mut records = Vec::new();
    for n in 1..=3 {
        let r = in_progress(LEASE);
        assert!(won(store.reserve(&key(n), &r, LEASE).await));
        records.push(r);
    }
    let (long, short) = (Duration::from_secs(600), Duration::from_secs(60));
    let done1 = completed(&records[0], long);
    let done2 = completed(&records[1], short);
    store
        .replace_if_owner(&key(1), &records[0].token, &done1, long, true)
        .await
        .unwrap();
    store
        .replace_if_owner(&key(2), &records[1].token, &done2, short, true)
        .await
        .unwrap();

    assert!(won(store
        .reserve(&key(4), &in_progress(LEASE), LEASE)
        .await));
    assert_eq!(
        store.get(&key(2)).await.unwrap(),
        None,
        "soonest-expiring completed evicted"
    );
    assert_eq!(
        store.get(&key(1)).await.unwrap().as_ref().map(unclocked),
        Some(unclocked(&done1))
    );
    assert!(
        store.get(&key(3)).await.unwrap().is_some(),
        "in progress is never evicted"
    );
}

#[tokio::test]
async fn full_of_in_progress_records_refuses_new_keys_but_not_losers() {
    let _panics = crate::support::panics::watched();
    let store = bounded(2);
    let first = in_progress(LEASE);
    store.reserve(&key(1), &first, LEASE).await.unwrap();
    store
        .reserve(&key(2), &in_progress(LEASE), LEASE)
        .await
        .unwrap();
    let refused = store.reserve(&key(3), &in_progress(LEASE), LEASE).await;
    assert!(matches!(refused, Err(StoreError::Full(2))), "{refused:?}");
    // A duplicate of a held key still learns the existing record.
    let dup = store
        .reserve(&key(1), &in_progress(LEASE), LEASE)
        .await
        .unwrap();
    assert!(matches!(dup, Reserve::Exists(r, _) if unclocked(&r) == unclocked(&first)));
    store.release_if_owner(&key(1), &first.token).await.unwrap();
    assert!(won(store
        .reserve(&key(3), &in_progress(LEASE), LEASE)
        .await));
}

#[tokio::test]
async fn expired_records_free_capacity_before_the_purge() {
    let _panics = crate::support::panics::watched();
    let store = bounded(1);
    let lease = Duration::from_millis(100);
    store
        .reserve(&key(1), &in_progress(lease), lease)
        .await
        .unwrap();
    sleep(lease + Duration::from_millis(50)).await;
    assert!(won(store
        .reserve(&key(2), &in_progress(LEASE), LEASE)
        .await));
}
