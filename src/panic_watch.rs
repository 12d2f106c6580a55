//! Unit tests only: a panic in a task idem spawned fails the test that spawned it.
//!
//! Tokio catches a panicking task, so a unit test that runs idem's own tasks (the memory
//! store's purge task) would pass with that task dead. The hook records every panic with
//! its thread; [`Watch`] fails the test when dropped if one was recorded on the test's
//! own thread since the watch began. A `#[tokio::test]` runtime runs the test's spawned
//! tasks on that thread, and the other tests' panics, on threads of their own, are
//! theirs. (Integration tests have their own, process-wide recorder:
//! `tests/support/panics.rs`.)

use std::sync::{Mutex, Once};

/// (thread name, message) of every panic since the hook was installed.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Checks, when dropped, that nothing panicked on this test's thread meanwhile.
#[must_use = "the check runs when the Watch is dropped: bind it for the test's body"]
pub(crate) struct Watch {
    thread: String,
    since: usize,
}

/// Installs the hook (once per process; the default hook still prints) and starts
/// watching this thread.
pub(crate) fn watched() -> Watch {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            let message = info.to_string();
            PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((thread, message));
            default(info);
        }));
    });
    Watch {
        thread: std::thread::current().name().unwrap_or("").to_owned(),
        since: PANICS.lock().unwrap_or_else(|e| e.into_inner()).len(),
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A test already failing keeps its own message; a second panic would abort.
        if std::thread::panicking() {
            return;
        }
        // Read, then let go before failing: the hook takes the same lock.
        let here: Vec<String> = PANICS.lock().unwrap_or_else(|e| e.into_inner())[self.since..]
            .iter()
            .filter(|(thread, _)| *thread == self.thread)
            .map(|(_, message)| message.clone())
            .collect();
        assert!(here.is_empty(), "a task of this test panicked: {here:#?}");
    }
}
