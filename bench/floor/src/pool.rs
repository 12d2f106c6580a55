//! A small pool of upstream HTTP/1.1 connections (`hyper::client::conn::http1`): the
//! least a correct keep-alive proxy needs. A connection whose previous exchange has not
//! finished is not ready, and is passed over for a new one.

use std::net::SocketAddr;
use std::sync::Mutex;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{handshake, SendRequest};
use hyper_util::rt::TokioIo;

/// A connection that could not be opened, or an exchange that failed.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// At most this many idle connections are kept.
const MAX_IDLE: usize = 16;

pub struct Pool {
    upstream: SocketAddr,
    idle: Mutex<Vec<SendRequest<Incoming>>>,
}

impl Pool {
    pub fn new(upstream: SocketAddr) -> Pool {
        Pool {
            upstream,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Send `req` on an idle connection or a new one. The connection goes back to the
    /// pool once the answer's head is in: its driver task finishes the body.
    pub async fn send(&self, req: Request<Incoming>) -> Result<Response<Incoming>, Error> {
        let mut sender = match self.checkout() {
            Some(sender) => sender,
            None => self.connect().await?,
        };
        let resp = sender.send_request(req).await?;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
        Ok(resp)
    }

    fn checkout(&self) -> Option<SendRequest<Incoming>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(sender) = idle.pop() {
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Incoming>, Error> {
        let stream = tokio::net::TcpStream::connect(self.upstream).await?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(sender)
    }
}
