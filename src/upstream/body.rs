//! The upstream response body. It owns the connection it arrives on and drives it while
//! being read; once the body has ended the connection goes back to the pool, and a body
//! dropped half-read closes its connection (the rest of the response would otherwise be
//! read as the next response).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::conn::Conn;
use super::pool::Pool;

/// The error type of bodies and connectors along the way.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The upstream's response body.
pub struct ResponseBody {
    body: Incoming,
    conn: Option<Conn>,
    pool: Arc<Pool>,
}

impl ResponseBody {
    pub(super) fn new(body: Incoming, conn: Conn, pool: Arc<Pool>) -> Self {
        ResponseBody {
            body,
            conn: Some(conn),
            pool,
        }
    }

    /// The next frame, waiting at most `timeout` for it: the one read loop of every
    /// exchange (a stalled or broken body is a reason the outcome is unknown).
    pub async fn next_frame(&mut self, timeout: Duration) -> Result<Option<Frame<Bytes>>, String> {
        use http_body_util::BodyExt;
        match crate::time_bound::bounded(timeout, self.frame()).await {
            Err(_) => Err(format!("response body stalled for {timeout:?}")),
            Ok(None) => Ok(None),
            Ok(Some(Err(e))) => Err(format!("response body failed: {e}")),
            Ok(Some(Ok(frame))) => Ok(Some(frame)),
        }
    }

    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put(conn);
        }
    }
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("end_stream", &self.body.is_end_stream())
            .field("owns_connection", &self.conn.is_some())
            .finish()
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        // Poll the body (which tells the connection it wants data), drive the
        // connection (which reads and hands the data over), then poll the body again.
        for _ in 0..2 {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if this.body.is_end_stream() {
                        this.release();
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(None) => {
                    this.release();
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Pending => {}
            }
            match this.conn.as_mut() {
                Some(conn) => {
                    conn.drive(cx);
                }
                None => return Poll::Pending,
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // An empty body (204, `Content-Length: 0`) may never be polled.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}
