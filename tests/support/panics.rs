//! A process-wide panic recorder. Tokio catches a panicking task, and idem's data plane
//! runs on threads of its own (`idem-worker-N`), so a panic inside idem would otherwise
//! show only as a dropped connection. The hook records a panic on *any* thread; a test
//! asserts none happened. (A test failing elsewhere in the same test binary shows up
//! here too; the message names its thread and place.)

use std::sync::{Mutex, Once};

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Marks the recorder's own self-test panic, which `assert_none` ignores.
pub const SELF_TEST: &str = "panics::self-test";

/// Installs the recording hook (once per process); the default hook still prints.
pub fn watch() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let place = info.location().map(|l| l.to_string()).unwrap_or_default();
            let entry = format!(
                "thread '{}' at {place}: {payload}",
                thread.name().unwrap_or("<unnamed>")
            );
            PANICS.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
            default(info);
        }));
    });
}

/// Every panic recorded so far.
pub fn recorded() -> Vec<String> {
    PANICS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Fails if any thread panicked since `watch()` (the self-test's panic aside).
#[track_caller]
pub fn assert_none() {
    let panics: Vec<String> = recorded()
        .into_iter()
        .filter(|p| !p.contains(SELF_TEST))
        .collect();
    assert!(panics.is_empty(), "panicked: {panics:#?}");
}
