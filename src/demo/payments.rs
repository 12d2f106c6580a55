//! The demo's mock payments API: `POST /invoices/{id}/charge` charges every time it is
//! called — like most real tool APIs that nobody made idempotent.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// A running mock payments API.
#[derive(Clone)]
pub struct Payments {
    pub addr: SocketAddr,
    charges: Arc<AtomicU64>,
}

impl Payments {
    /// Start on a free loopback port. Each charge takes `latency`.
    pub async fn start(latency: Duration) -> std::io::Result<Payments> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let charges = Arc::new(AtomicU64::new(0));
        let counter = charges.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| charge(counter.clone(), latency, req));
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Payments { addr, charges })
    }

    /// Charges executed so far.
    pub fn charges(&self) -> u64 {
        self.charges.load(Ordering::SeqCst)
    }
}

async fn charge(
    counter: Arc<AtomicU64>,
    latency: Duration,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let _ = req.into_body().collect().await;
    // The side effect happens at once; the answer takes a while (a slow card network).
    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(latency).await;
    let invoice = path.split('/').nth(2).unwrap_or("?");
    let body = format!(
        "{{\"charge_id\":\"ch_{n:04}\",\"invoice\":\"{invoice}\",\"status\":\"succeeded\"}}"
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::CREATED;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
