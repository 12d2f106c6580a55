//! `server.max_buffered_bytes` (issue 46 §5): one budget for every request and response
//! body idem holds in memory at once, across workers. Each body was already capped by
//! its route (`max_request_bytes`, `max_response_bytes`); their sum was not, and 150
//! stalled 1 MiB bodies took a pod past its memory limit.
//!
//! The budget is a semaphore of bytes, taken without waiting (`try_acquire`: a CAS on
//! one shared word) as a body's chunks arrive, and given back when the buffer is
//! dropped: a read body is a [`Bytes`] that owns its permits ([`Bytes::from_owner`]),
//! so they follow it into the upstream request and out with its last clone.
//!
//! - A request body that does not fit is refused: 503 `overloaded` with `Retry-After`,
//!   before anything is reserved or sent.
//! - A response's copy for the record that does not fit is dropped, as one over
//!   `max_response_bytes` is: the caller still gets the whole response, the record says
//!   "completed, body not stored", and a repeat gets 409 `response_not_stored` — never a
//!   second execution. The process stays within its limit instead of being OOM-killed.
//!   A complete copy gives its share back at once: the memory store keeps a record's
//!   body for `retention`, bounded by `store.memory.max_records`, not by this budget.
//! - A frame of a protected call's answer on its way to the caller holds its share
//!   until hyper has written it out (`outbound.rs`); one that does not fit cuts that
//!   caller's answer short.
//!
//! Bodies idem only streams (passthrough, unprotected forwards) are not buffered and
//! take nothing from it.

use std::sync::Arc;

use std::sync::LazyLock;

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The shared budget and what it refused; a clone is one reference count (each
/// protected call's copy and outbound frames hold one).
#[derive(Clone, Debug)]
pub struct Buffers(Arc<Shared>);

#[derive(Debug)]
pub struct Shared {
    budget: Arc<Semaphore>,
    /// `idem_overloaded_requests_total`.
    pub refused: Counter,
    /// `idem_overloaded_responses_total`.
    pub dropped: Counter,
}

impl std::ops::Deref for Buffers {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// No budget: [`Buffers::unbounded`], shared.
static UNBOUNDED: LazyLock<Buffers> = LazyLock::new(|| Buffers::new(Semaphore::MAX_PERMITS));

/// Bytes taken from the budget by one body; given back when dropped.
#[derive(Debug, Default)]
pub struct Held {
    permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl Buffers {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Buffers {
        Buffers::with_counters(max, Counter::default(), Counter::default())
    }

    /// A budget of `max` bytes counting into `metrics`.
    pub fn counted(max: usize, metrics: &crate::metrics::Metrics) -> Buffers {
        let refused = metrics.overloaded_requests.clone();
        Buffers::with_counters(max, refused, metrics.overloaded_responses.clone())
    }

    fn with_counters(max: usize, refused: Counter, dropped: Counter) -> Buffers {
        Buffers(Arc::new(Shared {
            budget: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            refused,
            dropped,
        }))
    }

    /// No budget (a reconciliation lookup's answer, tests).
    pub fn unbounded() -> &'static Buffers {
        &UNBOUNDED
    }

    /// Make `held` cover `bytes` in all, taking what it lacks; `false` when the budget
    /// does not have it (then `held` is unchanged).
    pub fn cover(&self, held: &mut Held, bytes: usize) -> bool {
        let Some(more) = bytes.checked_sub(held.bytes).filter(|n| *n > 0) else {
            return true;
        };
        let Ok(more32) = u32::try_from(more) else {
            return false;
        };
        let Ok(permit) = self.budget.clone().try_acquire_many_owned(more32) else {
            return false;
        };
        match &mut held.permit {
            Some(p) => p.merge(permit),
            None => held.permit = Some(permit),
        }
        held.bytes = bytes;
        true
    }
}

impl Held {
    /// `bytes`, owning these permits: they are given back with its last clone.
    pub fn attach(self, bytes: Bytes) -> Bytes {
        if self.permit.is_none() {
            return bytes;
        }
        Bytes::from_owner(Owned { bytes, _held: self })
    }
}

/// A buffer and the budget it holds.
struct Owned {
    bytes: Bytes,
    _held: Held,
}

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_take_from_one_budget_and_give_back_when_dropped() {
        let buffers = Buffers::new(100);
        let mut a = Held::default();
        assert!(buffers.cover(&mut a, 60));
        assert!(buffers.cover(&mut a, 60), "already covered");
        let mut b = Held::default();
        assert!(!buffers.cover(&mut b, 41), "60 + 41 > 100");
        assert!(buffers.cover(&mut b, 40));
        assert!(!buffers.cover(&mut a, 61));
        let body = a.attach(Bytes::from(vec![1u8; 60]));
        let clone = body.clone();
        drop(body);
        let mut c = Held::default();
        assert!(!buffers.cover(&mut c, 1), "the clone still holds it");
        drop(clone);
        assert!(buffers.cover(&mut c, 60));
        drop(b);
        assert!(buffers.cover(&mut c, 100));
    }
}
