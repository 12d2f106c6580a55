//! Body types: what the proxy sends upstream and what it answers with.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tokio::sync::mpsc;

pub use crate::upstream::{BoxError, UpstreamBody};

/// The response body the proxy answers with: streamed upstream bodies, channel bodies
/// fed by a detached upstream call, and in-memory replays/problems. An enum rather than
/// a boxed trait object: no allocation per response, no dynamic dispatch per frame.
pub enum ProxyBody {
    /// Replays and problems.
    Full(Full<Bytes>),
    /// An upstream body streamed straight through (passthrough).
    Stream(crate::upstream::ResponseBody),
    /// Frames from the detached call that owns the upstream exchange.
    Channel(ChannelBody),
}

impl std::fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProxyBody::Full(_) => "ProxyBody::Full",
            ProxyBody::Stream(_) => "ProxyBody::Stream",
            ProxyBody::Channel(_) => "ProxyBody::Channel",
        })
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Full(b) => Pin::new(b).poll_frame(cx).map_err(|never| match never {}),
            ProxyBody::Stream(b) => Pin::new(b).poll_frame(cx).map_err(BoxError::from),
            ProxyBody::Channel(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(b) => b.is_end_stream(),
            ProxyBody::Stream(b) => b.is_end_stream(),
            ProxyBody::Channel(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(b) => b.size_hint(),
            ProxyBody::Stream(b) => b.size_hint(),
            ProxyBody::Channel(b) => b.size_hint(),
        }
    }
}

pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    ProxyBody::Full(Full::new(bytes.into()))
}

/// Stream an upstream body straight through (passthrough).
pub fn stream(body: crate::upstream::ResponseBody) -> ProxyBody {
    ProxyBody::Stream(body)
}

/// A body fed frame by frame by the detached task that owns the upstream call. When the
/// caller goes away this body is dropped, the task's sends fail, and the task carries on
/// recording the outcome. The body ends cleanly only if the task says it sent the
/// whole response (`finished`): a task that stopped feeding a caller who stopped
/// reading ends it with an error, so the caller cannot take a short body for a whole one
/// (a chunked response would otherwise get its terminating chunk).
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    hint: SizeHint,
    finished: Arc<AtomicBool>,
}

impl ChannelBody {
    pub fn new(
        rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
        hint: SizeHint,
        finished: Arc<AtomicBool>,
    ) -> Self {
        ChannelBody { rx, hint, finished }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(match ready!(self.rx.poll_recv(cx)) {
            None if !self.finished.load(Ordering::Acquire) => Some(Err(
                "the response was cut short: the caller stopped reading (or the frames \
                 waiting for it reached server.max_buffered_bytes)"
                    .into(),
            )),
            frame => frame,
        })
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}
