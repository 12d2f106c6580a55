//! What one protected request carries from the flow to its detached upstream call and
//! the lease that call holds: the worker it runs on and, when traces are on, its spans.
//! Every store round trip on the request path is timed here, once: its metric, its
//! exemplar and its child span.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Worker;
use crate::traces::RequestTrace;
use crate::vocabulary::StoreOp;

/// One protected request's context. Cheap to clone (the detached call takes a clone):
/// an `Arc` and, when traces are on, a boxed span context.
#[derive(Clone)]
pub struct RequestContext {
    pub worker: Arc<Worker>,
    /// The request's spans (traces on); boxed so that without traces the context, moved
    /// through every future of the flow, stays two pointers.
    trace: Option<Box<RequestTrace>>,
}

impl RequestContext {
    pub fn new(worker: Arc<Worker>, trace: Option<Box<RequestTrace>>) -> RequestContext {
        RequestContext { worker, trace }
    }

    /// The request's spans, when traces are on.
    pub fn trace(&self) -> Option<&RequestTrace> {
        self.trace.as_deref()
    }

    /// The request's sampled trace id, for a latency histogram's exemplar.
    pub fn exemplar(&self) -> Option<u128> {
        self.trace().and_then(RequestTrace::exemplar)
    }

    /// Run one store round trip, timed under `op` (metric with exemplar, and a child span
    /// when traces are on). Returns the result and the time it took.
    pub async fn store_op<T>(
        &self,
        op: StoreOp,
        round_trip: impl Future<Output = T>,
    ) -> (T, Duration) {
        let (out, _, took) = self.store_op_from(op, round_trip).await;
        (out, took)
    }

    /// As [`RequestContext::store_op`], with when the round trip was asked for: a lease
    /// the store grants is counted from then on this process's clock (`upstream/gate.rs`).
    pub async fn store_op_from<T>(
        &self,
        op: StoreOp,
        round_trip: impl Future<Output = T>,
    ) -> (T, Instant, Duration) {
        // Boxed: the span is large, and the future holding it is moved with every
        // request's future even when traces are off.
        let span = self.trace().and_then(|t| t.store_op(op)).map(Box::new);
        let started = Instant::now();
        let out = round_trip.await;
        let took = started.elapsed();
        if let Some(mut span) = span {
            opentelemetry::trace::Span::end(&mut *span);
        }
        self.worker.metrics.store_op(op, took, self.exemplar());
        (out, started, took)
    }
}
