//! Graceful drain of a worker's connections, at one atomic load per poll.
//!
//! hyper-util's `GracefulShutdown` wraps each connection in a future that polls a
//! `watch` receiver's `changed()` every time the connection's task wakes, about four
//! times per request: ~600 instructions per passthrough request, 2 % of it
//! (`bench/callgrind.py`, idem against the floor). Here a connection registers its
//! task's waker once and reads one flag per poll; starting the drain sets the flag, then
//! wakes every registered connection, which then tells hyper to finish the request in
//! flight and close (`graceful_shutdown`). A `TaskTracker` of the connection tasks says
//! when they have all ended.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// The drain signal shared by one worker's connections.
#[derive(Clone, Default)]
pub(super) struct Drain(Arc<Shared>);

#[derive(Default)]
struct Shared {
    draining: AtomicBool,
    next_id: AtomicU64,
    /// The task of every connection that has been polled and not yet ended.
    wakers: Mutex<HashMap<u64, Waker>>,
}

impl Drain {
    /// Tell every connection to finish what it is doing and close.
    pub(super) fn start(&self) {
        // The flag first: a connection registering now finds it set when it looks.
        self.0.draining.store(true, Ordering::SeqCst);
        let wakers: Vec<Waker> = self.wakers().drain().map(|(_, waker)| waker).collect();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// `conn`, told to shut down gracefully through `shutdown` once the drain starts.
    pub(super) fn watch<C, F>(&self, conn: C, shutdown: F) -> Drained<C, F>
    where
        C: Future + Unpin,
        F: FnMut(Pin<&mut C>) + Unpin,
    {
        Drained {
            conn,
            shutdown,
            drain: self.clone(),
            id: None,
            told: false,
        }
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waker>> {
        self.0.wakers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection that shuts down gracefully when its worker drains.
pub(super) struct Drained<C, F> {
    conn: C,
    shutdown: F,
    drain: Drain,
    /// Its slot among the registered wakers, once polled.
    id: Option<u64>,
    told: bool,
}

impl<C, F> Drained<C, F>
where
    C: Future + Unpin,
    F: FnMut(Pin<&mut C>) + Unpin,
{
    /// Tell the connection to shut down gracefully now, for another reason than the
    /// drain (an idle HTTP/2 connection); once only.
    pub(super) fn shut_down(&mut self) {
        if !self.told {
            self.told = true;
            (self.shutdown)(Pin::new(&mut self.conn));
        }
    }
}

impl<C, F> Future for Drained<C, F>
where
    C: Future + Unpin,
    F: FnMut(Pin<&mut C>) + Unpin,
{
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        if !this.told {
            if this.id.is_none() {
                // Registered once: a connection is polled by its own task only, whose
                // waker stays valid. Registered before the flag is read, so a drain
                // that starts in between still wakes it.
                let id = this.drain.0.next_id.fetch_add(1, Ordering::Relaxed);
                this.drain.wakers().insert(id, cx.waker().clone());
                this.id = Some(id);
            }
            if this.drain.0.draining.load(Ordering::SeqCst) {
                this.told = true;
                (this.shutdown)(Pin::new(&mut this.conn));
            }
        }
        Pin::new(&mut this.conn).poll(cx)
    }
}

impl<C, F> Drop for Drained<C, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.drain.wakers().remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that ends only once told to shut down.
    struct UntilTold(bool);

    impl Future for UntilTold {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    fn tell(conn: Pin<&mut UntilTold>) {
        conn.get_mut().0 = true;
    }

    #[tokio::test]
    async fn a_waiting_connection_is_woken_and_told_and_one_after_the_start_is_told_at_once() {
        let drain = Drain::default();
        let waiting = tokio::spawn(drain.watch(UntilTold(false), tell));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(drain.wakers().len(), 1, "registered once polled");
        drain.start();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken by the drain")
            .unwrap();
        assert!(
            drain.wakers().is_empty(),
            "an ended connection leaves no waker"
        );
        drain.watch(UntilTold(false), tell).await;
    }
}
