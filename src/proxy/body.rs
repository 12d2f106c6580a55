//! Body types: what the proxy sends upstream and what it answers with.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use tokio::sync::mpsc;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body the proxy answers with: streamed upstream bodies, channel bodies
/// fed by a detached upstream call, and in-memory replays/problems.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// The body sent upstream: the buffered body of a protected request, or the caller's
/// streamed body on passthrough.
pub type UpstreamBody = http_body_util::Either<Full<Bytes>, hyper::body::Incoming>;

pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Stream an upstream body straight through (passthrough).
pub fn stream(body: hyper::body::Incoming) -> ProxyBody {
    body.map_err(BoxError::from).boxed_unsync()
}

/// A body fed frame by frame by the detached task that owns the upstream call. When the
/// caller goes away this body is dropped, the task's sends fail, and the task carries on
/// recording the outcome.
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    hint: SizeHint,
}

impl ChannelBody {
    pub fn new(rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>, hint: SizeHint) -> Self {
        ChannelBody { rx, hint }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx.poll_recv(cx)
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}
