//! Idle HTTP/2 connections (issue 46 §3). hyper bounds the head of each HTTP/1 request
//! (`header_read_timeout`), but an HTTP/2 connection, once its preface is in, was held
//! open for ever by a client that opened no stream: 200 such sockets filled
//! `max_connections`. Here a connection counts its open streams (a request whose
//! response body has not been dropped by hyper), and once it has had none for
//! `header_read_timeout` (from its preface on, so the wait for the first request is
//! bounded too) it is told to shut down gracefully (GOAWAY), and dropped if it has not
//! closed within another `header_read_timeout`.
//!
//! Only h2c connections pay for this: a counter and a wrapper per response body.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service;
use tokio::sync::Notify;

use super::drain::Drained;

/// The open streams of one connection.
pub(super) struct Streams {
    open: AtomicUsize,
    /// Notified when the last open stream ends.
    idle: Notify,
}

impl Streams {
    pub(super) fn new() -> Arc<Streams> {
        Arc::new(Streams {
            open: AtomicUsize::new(0),
            idle: Notify::new(),
        })
    }

    fn opened(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        Open(self.clone())
    }

    /// Resolves once the connection has had no open stream for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            if self.open.load(Ordering::Acquire) > 0 {
                self.idle.notified().await;
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(timeout) => {
                    if self.open.load(Ordering::Acquire) == 0 {
                        return;
                    }
                }
                // A stream opened and ended meanwhile: idle again from now.
                _ = self.idle.notified() => {}
            }
        }
    }
}

/// One open stream; ends when dropped (with the response body, or the request's future).
pub(super) struct Open(Arc<Streams>);

impl Drop for Open {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_one();
        }
    }
}

/// `service`, counting each request as an open stream until its response body is dropped.
pub(super) fn counted<S>(streams: &Arc<Streams>, service: S) -> Counted<S> {
    Counted {
        streams: streams.clone(),
        service,
    }
}

pub(super) struct Counted<S> {
    streams: Arc<Streams>,
    service: S,
}

impl<S, B> Service<Request<Incoming>> for Counted<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<Tracked<B>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        CountedFuture {
            open: Some(self.streams.opened()),
            answer: self.service.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// The service's answer, its body then counted as the open stream (no allocation:
    /// a boxed future per request would cost every h2c request one).
    pub(super) struct CountedFuture<F> {
        open: Option<Open>,
        #[pin]
        answer: F,
    }
}

impl<F, B, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<Tracked<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.answer.poll(cx))?;
        // Polled once more only if hyper misbehaves: then the stream counts as ended.
        let open = this.open.take();
        Poll::Ready(Ok(response.map(|body| Tracked { body, _open: open })))
    }
}

/// A response body that keeps its stream counted as open until hyper drops it.
pub(super) struct Tracked<B> {
    body: B,
    _open: Option<Open>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Serve `conn` until it ends; once it has been idle for `timeout`, shut it down
/// gracefully (GOAWAY), and drop it if it is still open `timeout` later.
pub(super) async fn closing_when_idle<C, F, E>(
    mut conn: Drained<C, F>,
    streams: &Streams,
    timeout: Duration,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>> + Unpin,
    F: FnMut(Pin<&mut C>) + Unpin,
{
    tokio::select! {
        served = &mut conn => return served,
        _ = streams.idle_for(timeout) => {}
    }
    tracing::debug!(?timeout, "HTTP/2 connection idle; closing");
    conn.shut_down();
    tokio::time::timeout(timeout, conn).await.unwrap_or(Ok(()))
}
