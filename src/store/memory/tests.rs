//! Memory-only behaviour that needs paused time or the store's internals; the shared
//! contract (reserve, fencing, watch, eviction) is in `tests/stores/store_contract.rs`.

use std::sync::Arc;

use super::*;

const KEY: StoreKey = StoreKey([42; 32]);

fn record(lease: Duration) -> Record {
    Record::in_progress("r", "", "k", [0; 32], [0; 32], lease)
}

#[tokio::test(start_paused = true)]
async fn expired_records_are_invisible_before_the_purge() {
    let _panics = crate::panic_watch::watched();
    let store = MemoryStore::new(10, usize::MAX);
    let lease = Duration::from_secs(30);
    let first = record(lease);
    assert!(matches!(
        store.reserve(&KEY, &first, lease).await,
        Ok(Reserve::Won)
    ));
    tokio::time::advance(lease - Duration::from_millis(1)).await;
    assert!(store.get(&KEY).await.unwrap().is_some());
    tokio::time::advance(Duration::from_millis(1)).await;
    // Invisible at once to every operation, though still held until purged.
    assert_eq!(store.get(&KEY).await.unwrap(), None);
    assert!(!store
        .replace_if_owner(&KEY, &first.token, &first, lease, false)
        .await
        .unwrap());
    assert!(!store.release_if_owner(&KEY, &first.token).await.unwrap());
    let second = record(lease);
    assert!(matches!(
        store.reserve(&KEY, &second, lease).await,
        Ok(Reserve::Won)
    ));
    assert_eq!(store.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn purge_task_frees_expired_records() {
    let _panics = crate::panic_watch::watched();
    let store = MemoryStore::new(100, usize::MAX);
    for i in 0..20u8 {
        let ttl = Duration::from_secs(u64::from(i % 2) * 100 + 5);
        store
            .reserve(&StoreKey([i; 32]), &record(ttl), ttl)
            .await
            .unwrap();
    }
    assert_eq!(store.len(), 20);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        store.len(),
        10,
        "the 5 s records were purged, the 105 s ones kept"
    );
}

#[tokio::test(start_paused = true)]
async fn purge_task_stops_with_the_last_clone() {
    let _panics = crate::panic_watch::watched();
    let store = MemoryStore::new(10, usize::MAX);
    let clone = store.clone();
    let shared = Arc::downgrade(&store.shared);
    drop(store);
    tokio::time::sleep(PURGE_INTERVAL * 2).await;
    assert!(shared.upgrade().is_some(), "a clone is still alive");
    drop(clone);
    tokio::time::sleep(PURGE_INTERVAL * 2).await;
    assert!(
        shared.upgrade().is_none(),
        "the purge task let go of the store"
    );
}

#[tokio::test]
async fn huge_ttl_does_not_overflow() {
    let _panics = crate::panic_watch::watched();
    let store = MemoryStore::new(1, usize::MAX);
    let r = record(Duration::MAX);
    assert!(matches!(
        store.reserve(&KEY, &r, Duration::MAX).await,
        Ok(Reserve::Won)
    ));
    assert!(store.get(&KEY).await.unwrap().is_some());
}

/// The watch itself: on a runtime without timers the purge task panics at its first
/// tick. Tokio catches it and the store still answers, yet the test fails.
#[test]
fn a_panic_in_the_purge_task_fails_the_test() {
    let watch = crate::panic_watch::watched();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = MemoryStore::new(1, usize::MAX);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(store.is_empty(), "the store itself still answers");
    });
    drop(runtime);
    let failed = std::panic::catch_unwind(move || drop(watch))
        .expect_err("the watch fails the test when the purge task panicked");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("timers are disabled"), "{message}");
}

/// `store.memory.max_bytes` bounds what the records hold, stored responses included:
/// completing with a 10 KiB answer makes room by evicting the completed records that
/// expire soonest, never one in progress; every completion is stored (its call ran);
/// once only records in progress are left, a new reservation is refused (`Full`).
#[tokio::test]
async fn max_bytes_bounds_stored_responses() {
    let _panics = crate::panic_watch::watched();
    const BODY: usize = 10 * 1024;
    let max_bytes = 4 * BODY;
    let store = MemoryStore::new(1000, max_bytes);
    let retention = Duration::from_secs(3600);
    let answer = crate::store::StoredResponse {
        status: 200,
        headers: vec![],
        body: Some(Bytes::from(vec![b'x'; BODY])),
    };
    // One call stays in progress throughout: never evicted.
    let running = record(retention);
    let running_key = StoreKey([200; 32]);
    store
        .reserve(&running_key, &running, retention)
        .await
        .unwrap();
    for i in 0..12u8 {
        let key = StoreKey([i; 32]);
        let mine = record(retention);
        assert!(matches!(
            store.reserve(&key, &mine, retention).await,
            Ok(Reserve::Won)
        ));
        let done = mine.completed(answer.clone(), retention);
        let stored = store.replace_if_owner(&key, &mine.token, &done, retention, false);
        assert!(stored.await.unwrap(), "a completion is always stored");
        let held = store.bytes();
        assert!(
            held <= max_bytes,
            "{i}: {held} bytes held, {max_bytes} allowed"
        );
        let back = store.get(&key).await.unwrap().expect("the newest is kept");
        assert_eq!(
            back.response.and_then(|r| r.body).map(|b| b.len()),
            Some(BODY)
        );
    }
    assert!(store.len() < 13, "older completed records were evicted");
    assert!(store.get(&running_key).await.unwrap().is_some());
    // Records in progress only, past the bound: a reservation is refused.
    let small = MemoryStore::new(1000, 1000);
    let mut refused = false;
    for i in 0..10u8 {
        let r = record(retention);
        if let Err(StoreError::Full(_)) = small.reserve(&StoreKey([i; 32]), &r, retention).await {
            refused = true;
            break;
        }
    }
    assert!(
        refused,
        "in-progress records are never evicted to make room"
    );
    assert!(small.bytes() <= 1000);
}
