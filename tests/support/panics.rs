//! Panics in idem fail the test that started it, whether idem runs in-process or as a
//! child process.
//!
//! In-process: a process-wide panic recorder. Tokio catches a panicking task, and idem's
//! data plane runs on threads of its own (`idem-worker-N`), so a panic inside idem would
//! otherwise show only as a dropped connection, a closed channel or a store that stopped
//! listening. Wherever idem code runs in-process the recorder is on and checked
//! ([`assert_none`]) before the test ends:
//! - `harness::start*` install it and the in-process idem ([`harness::Idem`]) checks it
//!   when dropped;
//! - a test that runs idem's stores, clients or tasks itself (`store_cases!`, the store
//!   model, the upstream client, the load generator, the demo…) holds a [`Watch`] from
//!   [`watched`] for its whole body.
//!
//! Panics raised by the test code itself (`tests/…`: failed assertions, the self-test)
//! are the test's own failures and are not counted; a panic in idem from another test of
//! the same binary is (the message names its thread and place). `tests/panic_watch.rs`
//! shows both halves: a panic in a task spawned by `src/` fails the test, one in `tests/`
//! is left to the test.
//!
//! [`harness::Idem`]: super::harness::Idem
//!
//! Child processes: the default hook writes `thread '…' panicked at …` to stderr;
//! [`assert_no_panic_in_log`] fails on it when the process is stopped.

use std::sync::{Mutex, Once};

/// One recorded panic.
#[derive(Debug, Clone)]
pub struct Panic {
    pub thread: String,
    /// `file:line:column`; the file relative to the crate for our own code.
    pub place: String,
    pub message: String,
}

impl Panic {
    /// Raised by test code (a failed assertion, the self-test), not by idem.
    fn by_the_test(&self) -> bool {
        self.place.starts_with("tests/")
    }
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "thread '{}' at {}: {}",
            self.thread, self.place, self.message
        )
    }
}

static PANICS: Mutex<Vec<Panic>> = Mutex::new(Vec::new());

/// Marks the recorder's own self-test panic.
pub const SELF_TEST: &str = "panics::self-test";

/// Installs the recording hook (once per process); the default hook still prints.
pub fn watch() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let place = info.location().map(|l| l.to_string()).unwrap_or_default();
            let panic = Panic {
                thread: thread.name().unwrap_or("<unnamed>").to_owned(),
                place,
                message,
            };
            PANICS.lock().unwrap_or_else(|e| e.into_inner()).push(panic);
            default(info);
        }));
    });
}

/// Fails the test, when dropped, if idem panicked on any thread while it was held (or
/// earlier in this process). Hold it for the whole test: `let _panics = watched();`.
#[must_use = "the check runs when the Watch is dropped: bind it for the test's body"]
pub struct Watch(());

/// Installs the hook and returns the [`Watch`] that checks it at the end of the test.
pub fn watched() -> Watch {
    watch();
    Watch(())
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A test already failing keeps its own message; a second panic would abort.
        if !std::thread::panicking() {
            assert_none();
        }
    }
}

/// Every panic recorded so far, the test code's included.
pub fn recorded() -> Vec<Panic> {
    PANICS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Fails if idem (any code but the tests') panicked on any thread since `watch()`.
#[track_caller]
pub fn assert_none() {
    let panics: Vec<String> = recorded()
        .iter()
        .filter(|p| !p.by_the_test())
        .map(Panic::to_string)
        .collect();
    assert!(panics.is_empty(), "idem panicked: {panics:#?}");
}

/// Fails if an idem process' stderr `log` shows a panic.
#[track_caller]
pub fn assert_no_panic_in_log(what: &str, log: &str) {
    assert!(
        !log.contains("panicked"),
        "{what} panicked; its log:\n{log}"
    );
}
