//! The panic watch itself (`support::panics`): a panic in a task that idem's own code
//! (`src/`) spawned fails the test, though tokio catches it and the test never sees it;
//! a panic raised by test code on another thread is recorded and left to the test.
//!
//! A binary of its own: the idem panic it provokes is recorded process-wide, so every
//! other test of the same binary would (rightly) fail on it.

mod support;

use idem::store::MemoryStore;
use support::panics;

/// The memory store spawns its purge task (`src/store/memory`), which asks tokio for a
/// timer. On a runtime built without timers that task panics in idem's code, where tokio
/// catches it: the store keeps answering and the test body sees nothing. The watch must
/// still fail the test, with tokio's message (raised inside tokio, on the purge task's
/// call from `src/`).
#[test]
fn a_panic_in_a_task_spawned_by_idem_fails_the_test() {
    let watch = panics::watched();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = MemoryStore::new(1, usize::MAX);
        // The purge task runs (and panics) once this task yields.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(store.len(), 0, "the store itself still answers");
    });
    drop(runtime);

    let failed = std::panic::catch_unwind(move || drop(watch))
        .expect_err("the watch fails the test when idem panicked in a spawned task");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("idem panicked") && message.contains("timers are disabled"),
        "the failure names idem's panic: {message}"
    );
}

/// The watch sees a panic on any thread, such as idem's data-plane threads
/// (`idem-worker-N`), which it once missed by counting only tokio's. (Not a `Watch`: the
/// other test's idem panic, recorded process-wide, would fail it.)
#[test]
fn the_panic_watch_sees_every_thread() {
    panics::watch();
    let panicked = std::thread::Builder::new()
        .name("idem-worker-self-test".into())
        .spawn(|| panic!("{}", panics::SELF_TEST))
        .unwrap()
        .join();
    assert!(panicked.is_err());
    let recorded = panics::recorded();
    assert!(
        recorded
            .iter()
            .any(|p| p.thread == "idem-worker-self-test" && p.message.contains(panics::SELF_TEST)),
        "{recorded:?}"
    );
}
