//! A time bound whose timer exists only if it is needed.
//!
//! `tokio::time::timeout` reads the clock and builds a timer entry (a runtime handle
//! clone, dropped again) when it is created, even when the future it bounds is ready at
//! its first poll. On the request path most bounded steps are: the body of a small
//! request arrived with its head, the caller's channel has room, the upstream's body
//! came in the same read as its head. [`bounded`] polls the future first and starts the
//! timer only when it has to wait; the bound then counts from that first wait, which is
//! the same instant for any step that waits at all.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Sleep;

/// The bounded future did not finish within its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

pin_project! {
    /// The future of [`bounded`].
    pub struct Bounded<F> {
        #[pin]
        future: F,
        #[pin]
        timer: Option<Sleep>,
        bound: Duration,
    }
}

/// `future`, failing with [`Elapsed`] if it waits longer than `bound` in all.
pub fn bounded<F: Future>(bound: Duration, future: F) -> Bounded<F> {
    Bounded {
        future,
        timer: None,
        bound,
    }
}

impl<F: Future> Future for Bounded<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep(*this.bound)));
        }
        match this.timer.as_pin_mut().map(|timer| timer.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(Elapsed)),
            _ => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_ready_future_needs_no_timer_and_a_stalled_one_times_out() {
        assert_eq!(bounded(Duration::ZERO, async { 7 }).await, Ok(7));
        let stalled = std::future::pending::<()>();
        assert_eq!(bounded(Duration::from_secs(5), stalled).await, Err(Elapsed));
        let slow = tokio::time::sleep(Duration::from_secs(1));
        assert_eq!(bounded(Duration::from_secs(5), slow).await, Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_counts_from_the_first_wait() {
        let started = tokio::time::Instant::now();
        let stalled = std::future::pending::<()>();
        assert_eq!(bounded(Duration::from_secs(3), stalled).await, Err(Elapsed));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }
}
