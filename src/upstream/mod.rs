//! The upstream client: HTTP/1.1 (plain, or TLS verified against the system's trust
//! store) over pooled keep-alive connections that are driven inline by the task using
//! them ([`conn`]), not by a task per connection.
//!
//! A request on a pooled connection that the upstream closed while it sat idle fails
//! *before* anything is written; hyper hands such a request back and it is sent again on
//! another connection. Anything that failed after writing began is never resent here:
//! whether that is safe is the caller's decision (the pipeline's ambiguous outcome).

mod body;
pub mod config;
mod conn;
mod gate;
mod pool;

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

pub use body::{BoxError, ResponseBody};
pub use conn::UpstreamBody;
use conn::{Conn, SendFailure};
pub use gate::{Closed, SendGate};
use pool::Pool;

use self::config::UpstreamConfig;

/// Idle keep-alive connections kept open to the upstream, at most.
const MAX_IDLE: usize = 1024;
/// An idle connection unused this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an upstream request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Nothing was sent: the connection could not be made (refused, connect timeout, TLS
    /// handshake) or closed before the request was written.
    #[error("upstream connection failed: {0}")]
    Connect(BoxError),
    /// The request was sent (or partly sent) and then the exchange failed.
    #[error("upstream error: {0}")]
    Failed(hyper::Error),
    /// The owner's lease no longer allowed the send ([`SendGate`]): nothing was written.
    #[error("{0}")]
    Withheld(Closed),
}

impl UpstreamError {
    /// Whether the upstream certainly did not receive the request.
    pub fn is_connect(&self) -> bool {
        matches!(self, UpstreamError::Connect(_))
    }
}

/// What became of a request sent upstream, as far as its response head: the outcome
/// classes of SPEC §1 that protected and unprotected forwarding both act on.
pub enum Sent {
    /// Nothing reached the upstream (refused, connect timeout, TLS handshake).
    NotSent(UpstreamError),
    /// Nothing was written: the owner's lease ended or was lost first ([`SendGate`]).
    Withheld(Closed),
    /// Sent, then no head in time or the exchange failed: the effect may have happened.
    Ambiguous(String),
    /// The response head; its body streams.
    Answered(Response<ResponseBody>),
}

#[derive(Clone)]
pub struct UpstreamClient {
    connector: HttpsConnector<HttpConnector>,
    /// Where connections go: the configured upstream, never the request's URI.
    target: Uri,
    pool: Arc<Pool>,
}

impl UpstreamClient {
    pub fn new(cfg: &UpstreamConfig) -> UpstreamClient {
        crate::tls::install_crypto_provider();
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(cfg.connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(crate::tls::client_config())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        UpstreamClient {
            connector,
            target: cfg.url.clone(),
            pool: Pool::new(MAX_IDLE, IDLE_TIMEOUT),
        }
    }

    /// Send `request` (origin-form URI, `Host` set) and return the response head; its
    /// body drives the connection and returns it to the pool when read to the end.
    ///
    /// With a `gate` (a protected call), the owner's lease is checked right before the
    /// request is written, with no await in between, and a connect is abandoned as soon
    /// as a renewal finds the lease lost: an owner never sends outside its lease.
    pub async fn request(
        &self,
        request: Request<UpstreamBody>,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        self.request_within(request, None).await
    }

    /// As [`UpstreamClient::request`], written only while `gate` allows it (below).
    async fn request_within(
        &self,
        mut request: Request<UpstreamBody>,
        gate: Option<&SendGate>,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        loop {
            let (mut conn, pooled) = match self.pool.checkout().await {
                Some(conn) => (conn, true),
                // Boxed: connecting (TLS included) is a large future, and the request
                // future — moved into every caller's future — is otherwise as large.
                None => match gate {
                    None => (Box::pin(self.connect()).await?, false),
                    Some(gate) => (Box::pin(self.connect_within(gate)).await?, false),
                },
            };
            if gate.is_some() {
                // Tests stop an owner here: connected, its request not yet written.
                crate::pause!("owner_before_send");
            }
            // Checked with no await before the write: `send` writes in its first poll.
            if let Some(closed) = gate.and_then(|g| g.check().err()) {
                self.pool.put(conn);
                return Err(UpstreamError::Withheld(closed));
            }
            match conn.send(request).await {
                Ok(response) => {
                    let pool = self.pool.clone();
                    return Ok(response.map(|body| ResponseBody::new(body, conn, pool)));
                }
                // The upstream closed an idle connection under us: try another one.
                Err(SendFailure::NotSent(again, _)) if pooled => request = *again,
                Err(SendFailure::NotSent(_, e)) => return Err(UpstreamError::Connect(e.into())),
                Err(SendFailure::Failed(e)) => return Err(UpstreamError::Failed(e)),
                Err(SendFailure::Closed) => {
                    return Err(UpstreamError::Connect("upstream connection closed".into()))
                }
            }
        }
    }

    /// Send `request`, waiting at most `timeout` for the head, and classify the result.
    /// Not an `async fn` wrapper: it hands back [`UpstreamClient::send_gated`]'s own
    /// future, so the passthrough path carries no extra layer of future state.
    pub fn send(
        &self,
        request: Request<UpstreamBody>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Sent> + '_ {
        self.send_gated(request, timeout, None)
    }

    /// As [`UpstreamClient::send`], for a protected call whose owner's lease `gate` must
    /// allow the write.
    pub async fn send_gated(
        &self,
        request: Request<UpstreamBody>,
        timeout: Duration,
        gate: Option<&SendGate>,
    ) -> Sent {
        match crate::time_bound::bounded(timeout, self.request_within(request, gate)).await {
            Ok(Ok(response)) => Sent::Answered(response),
            Ok(Err(UpstreamError::Withheld(closed))) => Sent::Withheld(closed),
            Ok(Err(e)) if e.is_connect() => Sent::NotSent(e),
            Ok(Err(e)) => Sent::Ambiguous(e.to_string()),
            Err(_) => Sent::Ambiguous(format!("no response head within {timeout:?}")),
        }
    }

    /// Idle connections in the pool (for tests and diagnostics).
    pub fn idle_connections(&self) -> usize {
        self.pool.idle_count()
    }

    /// Connect, unless the lease is lost first: then nothing will be sent anyway.
    async fn connect_within(&self, gate: &SendGate) -> Result<Conn, UpstreamError> {
        tokio::select! {
            conn = self.connect() => conn,
            () = gate.lost() => Err(UpstreamError::Withheld(Closed::Lost)),
        }
    }

    async fn connect(&self) -> Result<Conn, UpstreamError> {
        let io = self
            .connector
            .clone()
            .call(self.target.clone())
            .await
            .map_err(UpstreamError::Connect)?;
        Conn::handshake(io)
            .await
            .map_err(|e| UpstreamError::Connect(e.into()))
    }
}
