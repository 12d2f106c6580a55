//! One upstream HTTP/1.1 connection, driven by whichever task is using it.
//!
//! hyper's client connection is two halves: a `SendRequest` handle and a `Connection`
//! future that does the I/O. hyper-util's pooled client spawns the `Connection` onto a
//! task of its own, so every request, response head and body frame hops between the
//! caller's task and that task — on a multi-threaded runtime, often between cores. Here
//! the task that sends a request also polls the `Connection` (and later the response
//! body does), so an exchange runs start to finish in one task.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The body sent upstream: the buffered body of a protected request, or the caller's
/// streamed body on passthrough. Here, with the connection that sends it, so the
/// response body (`body.rs`), which owns a connection, is the only one to import the other.
pub type UpstreamBody = http_body_util::Either<http_body_util::Full<bytes::Bytes>, Incoming>;

pub type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// An upstream connection: the request handle and the I/O driver, which is `None` once
/// the connection has ended.
pub struct Conn {
    sender: http1::SendRequest<UpstreamBody>,
    driver: Option<Pin<Box<http1::Connection<Io, UpstreamBody>>>>,
    /// When the connection last went back to the idle pool.
    pub idle_since: Instant,
}

/// Why a request did not get a response head.
pub enum SendFailure {
    /// The connection closed before the request was written: nothing reached the
    /// upstream, and the request is handed back for another connection.
    NotSent(Box<Request<UpstreamBody>>, hyper::Error),
    /// The request was (or may have been) written, then the exchange failed.
    Failed(hyper::Error),
    /// The connection ended without a word about the request.
    Closed,
}

/// The most an upstream connection reads ahead (hyper's default is 408 KiB). A body's
/// frames are slices of this buffer and keep all of it alive until the last is written
/// to the caller: with many callers that stopped reading, the default pinned about
/// 300 KiB per answer outside `server.max_buffered_bytes`. Upstream heads must fit.
const READ_BUFFER_MAX: usize = 64 * 1024;

impl Conn {
    /// Start HTTP/1.1 on a fresh transport. No I/O happens until the first poll.
    pub async fn handshake(io: Io) -> hyper::Result<Conn> {
        let (sender, driver) = http1::Builder::new()
            .max_buf_size(READ_BUFFER_MAX)
            .handshake(io)
            .await?;
        Ok(Conn {
            sender,
            driver: Some(Box::pin(driver)),
            idle_since: Instant::now(),
        })
    }

    /// Run the connection's I/O as far as it goes now. `false` once it has ended.
    pub fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(driver) = self.driver.as_mut() {
            if let Poll::Ready(result) = driver.as_mut().poll(cx) {
                if let Err(error) = result {
                    tracing::debug!(%error, "upstream connection ended with an error");
                }
                self.driver = None;
            }
        }
        self.driver.is_some()
    }

    /// Whether the connection can take a request right now (an idle pooled connection
    /// whose peer has closed it reads EOF here and is reported unusable).
    pub fn is_usable(&mut self, cx: &mut Context<'_>) -> bool {
        let alive = self.drive(cx);
        alive && matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(())))
    }

    pub fn is_alive(&self) -> bool {
        self.driver.is_some() && !self.sender.is_closed()
    }

    /// Send `request` and drive the connection until the response head arrives.
    pub async fn send(
        &mut self,
        request: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, SendFailure> {
        let mut response = std::pin::pin!(self.sender.try_send_request(request));
        poll_fn(|cx| {
            // Drive first, so the request is written in this same poll.
            let alive = self.drive(cx);
            if let Poll::Ready(result) = response.as_mut().poll(cx) {
                return Poll::Ready(result.map_err(|mut e| match e.take_message() {
                    Some(request) => SendFailure::NotSent(Box::new(request), e.into_error()),
                    None => SendFailure::Failed(e.into_error()),
                }));
            }
            if alive {
                Poll::Pending
            } else {
                // hyper answers every queued request when a connection ends; this is
                // only a guard against waiting forever on a dead one.
                Poll::Ready(Err(SendFailure::Closed))
            }
        })
        .await
    }
}
