//! Background tasks owned by a store handle.

use tokio::task::JoinHandle;

/// Aborts a background task when dropped.
///
/// A store keeps this behind an `Arc` shared by all its clones (like mini-redis's
/// `DbDropGuard`): when the last clone goes away, its purge or subscriber task stops
/// instead of running for the rest of the process.
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
