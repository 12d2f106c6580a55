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
    let store = MemoryStore::new(10);
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
    let store = MemoryStore::new(100);
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
    let store = MemoryStore::new(10);
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
    let store = MemoryStore::new(1);
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
        let store = MemoryStore::new(1);
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
