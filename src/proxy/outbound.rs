//! The caller's side of a detached upstream call: every frame is passed on as soon as
//! the upstream sends it, and only the **end** of the response waits for the record
//! (SPEC §1 step 6). What counts as the end:
//! - a `Content-Length` body: the frame carrying its last bytes (a caller holding all the
//!   declared bytes has the whole response, whatever the connection does next);
//! - any other body (chunked, an event stream, h2 without a length): the end of the
//!   stream itself — the terminating chunk, h2's `END_STREAM` — which goes out when the
//!   channel closes after [`Outbound::finish`];
//! - trailers, which only ever come last;
//! - the head itself when the body is empty (a `204`, `Content-Length: 0`);
//! - on an MCP route, the frame that completes the call's final JSON-RPC response in an
//!   event stream ([`Outbound::hold`]): a client acts on that event, not on the stream's
//!   close.
//!
//! Every send tolerates a caller that has gone or stopped reading: the call carries on
//! and records the outcome without it.
//!
//! Each data frame on its way to the caller holds its share of
//! `server.max_buffered_bytes` until hyper has written it out (the permits ride on the
//! frame's `Bytes` through the channel and hyper's own queues): callers that ask for
//! large answers and stop reading, many streams at a time over HTTP/2, otherwise held
//! about 1 MiB each outside the budget (1,000 such streams: 0.8–1.2 GiB). A frame past the
//! budget cuts that caller's response short, as a caller that stopped reading is; the
//! call still records its outcome, so a repeat gets the replay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body::{Frame, SizeHint};
use http_body_util::Full;
use tokio::sync::{mpsc, oneshot};

use super::body::{BoxError, ChannelBody, ProxyBody};
use super::buffers::{Buffers, Held};
use crate::time_bound::bounded;

/// Frames queued towards the caller before the detached call waits for it to read.
const CHANNEL_FRAMES: usize = 8;

pub struct Outbound {
    reply: Option<oneshot::Sender<Response<ProxyBody>>>,
    head: Option<(Response<()>, SizeHint)>,
    /// Bytes of a `Content-Length` body not yet received; `None` when the length is not
    /// known up front.
    remaining: Option<u64>,
    /// The data that completes a `Content-Length` body (or that [`Outbound::hold`]
    /// holds), held until `finish`.
    last: Option<Bytes>,
    /// Trailers, held until `finish`. Boxed, as they are rare: an `Outbound` moves with
    /// the call's futures, and a header map inline would make every move larger.
    trailers: Option<Box<HeaderMap>>,
    tx: Option<mpsc::Sender<Result<Frame<Bytes>, BoxError>>>,
    /// Set once every frame went out: only then does the caller's body end cleanly.
    finished: Arc<AtomicBool>,
    send_timeout: Duration,
    /// The budget the frames towards the caller take from.
    buffers: Buffers,
}

impl Outbound {
    pub fn new(
        reply: oneshot::Sender<Response<ProxyBody>>,
        send_timeout: Duration,
        buffers: &Buffers,
    ) -> Self {
        Outbound {
            reply: Some(reply),
            send_timeout,
            buffers: buffers.clone(),
            ..Outbound::detached()
        }
    }

    /// An exchange nobody waits on (a reconciliation lookup): frames are only held.
    pub fn detached() -> Self {
        Outbound {
            reply: None,
            head: None,
            remaining: None,
            last: None,
            trailers: None,
            tx: None,
            finished: Arc::default(),
            send_timeout: Duration::ZERO,
            // Never used: nobody waits, so nothing is sent.
            buffers: Buffers::unbounded().clone(),
        }
    }

    /// The upstream's response head; `hint` is its body's size hint (exact for a
    /// `Content-Length` body).
    pub fn set_head(&mut self, head: Response<()>, hint: SizeHint) {
        self.remaining = hint.exact();
        self.head = Some((head, hint));
    }

    /// Pass a frame on now, unless it is the end of the response.
    pub async fn push(&mut self, frame: Frame<Bytes>) {
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                self.trailers = frame.into_trailers().ok().map(Box::new);
                return;
            }
        };
        if let Some(remaining) = self.remaining.as_mut() {
            *remaining = remaining.saturating_sub(data.len() as u64);
            if *remaining == 0 {
                self.last = Some(data);
                return;
            }
        }
        if data.is_empty() {
            return;
        }
        self.send_head();
        self.send(Frame::data(data)).await;
    }

    /// Hold this frame until `finish`: it completes the answer the caller acts on (the
    /// last frame the call passes on; a body of unknown length, so `last` is free).
    pub fn hold(&mut self, frame: Frame<Bytes>) {
        self.last = frame.into_data().ok();
    }

    fn send_head(&mut self) {
        let (Some((head, hint)), Some(reply)) = (self.head.take(), self.reply.take()) else {
            return;
        };
        let (tx, rx) = mpsc::channel(CHANNEL_FRAMES);
        let (parts, ()) = head.into_parts();
        let body = ProxyBody::Channel(ChannelBody::new(rx, hint, self.finished.clone()));
        if reply.send(Response::from_parts(parts, body)).is_ok() {
            self.tx = Some(tx);
        }
    }

    async fn send(&mut self, frame: Frame<Bytes>) {
        let Some(tx) = &self.tx else { return };
        let Some(frame) = budgeted(&self.buffers, frame) else {
            // Past the budget: this caller's response is cut short (counted).
            self.tx = None;
            return;
        };
        match bounded(self.send_timeout, tx.send(Ok(frame))).await {
            Ok(Ok(())) => {}
            // The caller is gone or stopped reading: carry on recording without it.
            _ => self.tx = None,
        }
    }

    /// After the record is written (or its write failed): release the end of the
    /// response — the head if nothing went out yet, the held frames, then the close of
    /// the stream.
    pub async fn finish(&mut self) {
        if self.answer_whole() {
            return;
        }
        self.send_head();
        if let Some(data) = self.last.take() {
            self.send(Frame::data(data)).await;
        }
        if let Some(trailers) = self.trailers.take() {
            self.send(Frame::trailers(*trailers)).await;
        }
        // A send that gave up on the caller dropped `tx`: its body then ends in an error.
        if self.tx.take().is_some() {
            self.finished.store(true, Ordering::Release);
        }
    }

    /// Nothing went out yet and nothing follows but the held data frame (the usual
    /// small `Content-Length` answer, or an empty body): the caller gets the whole
    /// response at once, with no frame channel (its allocation, a send and a wake-up).
    fn answer_whole(&mut self) -> bool {
        let whole = self.tx.is_none() && self.trailers.is_none();
        if !(whole && self.head.is_some() && self.reply.is_some()) {
            return false;
        }
        let (Some((head, _)), Some(reply)) = (self.head.take(), self.reply.take()) else {
            return false;
        };
        let body = ProxyBody::Full(Full::new(self.last.take().unwrap_or_default()));
        let (parts, ()) = head.into_parts();
        let _ = reply.send(Response::from_parts(parts, body));
        true
    }

    /// The exchange failed: answer with `problem` if the head has not gone out yet,
    /// otherwise abort the caller's body so it cannot mistake it for a complete one.
    pub async fn fail(&mut self, problem: Response<ProxyBody>, reason: String) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(problem);
        } else if let Some(tx) = self.tx.take() {
            // Must arrive: a body that merely ends would look complete to the caller.
            let _ = bounded(self.send_timeout, tx.send(Err(reason.into()))).await;
        }
    }
}

/// `frame` holding its share of `buffers` until its last clone is dropped (written out
/// by hyper), or `None` when the budget does not have it (counted as a dropped response).
fn budgeted(buffers: &Buffers, frame: Frame<Bytes>) -> Option<Frame<Bytes>> {
    let data = match frame.into_data() {
        Ok(data) => data,
        Err(frame) => return Some(frame),
    };
    let mut held = Held::default();
    if !buffers.cover(&mut held, data.len()) {
        buffers.dropped.inc();
        return None;
    }
    Some(Frame::data(held.attach(data)))
}
