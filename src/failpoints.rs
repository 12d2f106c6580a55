//! Pause points for the tests, compiled into debug builds only (the tests' binary; a
//! release build has none: [`pause!`] expands to nothing). A test stops one process at
//! an exact step of the protocol — an owner between reserving and writing its request,
//! a duplicate between reading an unknown outcome and taking it over, an owner during a
//! renewal — then lets it go, so a schedule the model checker found is replayed on the
//! real binary deterministically, without sleeps.
//!
//! Driven through files, so a test controls a child process without a channel into it:
//! with `IDEM_FAILPOINTS_DIR=<dir>`, a point `name` is armed by creating `<dir>/<name>`;
//! the first request to reach it removes the file, creates `<dir>/<name>.hit` and waits
//! until `<dir>/<name>.go` exists (then removes it). Without the variable a point
//! returns at once.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The directory of armed points, if the process was started with one.
fn dir() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os("IDEM_FAILPOINTS_DIR").map(PathBuf::from))
        .as_ref()
}

/// Stop here if the test armed `name` (one request, once per arming).
pub async fn pause_at(name: &str) {
    let Some(dir) = dir() else { return };
    let armed = dir.join(name);
    // Removing the arming file is the claim: of concurrent requests, one stops.
    if std::fs::remove_file(&armed).is_err() {
        return;
    }
    tracing::warn!(failpoint = name, "paused at a test failpoint");
    let _ = std::fs::write(dir.join(format!("{name}.hit")), b"");
    let go = dir.join(format!("{name}.go"));
    while std::fs::remove_file(&go).is_err() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tracing::warn!(failpoint = name, "released from a test failpoint");
}
