//! The proxy listener: accept loop, connection limit, HTTP/1.1 + h2c, slow-client
//! protection, and graceful drain.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::ServerConfig;
use crate::proxy::Proxy;

/// Build the connection builder from the server settings.
fn builder(cfg: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Slow clients that trickle their headers are cut off.
        .header_read_timeout(cfg.header_read_timeout)
        // hyper answers 431 when the head does not fit.
        .max_buf_size(cfg.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(cfg.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// Serve `listener` until `shutdown` resolves, then drain: stop accepting, let open
/// connections finish their requests, and let detached upstream calls record their
/// outcome — all bounded by `shutdown_grace`. Returns whether the drain completed.
pub async fn serve(
    listener: TcpListener,
    proxy: Proxy,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let builder = Arc::new(builder(&cfg));
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        // At the limit, stop accepting: new connections wait in the kernel backlog.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        let service = service_fn(move |req| {
            let proxy = proxy.clone();
            async move { Ok::<_, Infallible>(proxy.handle(req, Some(remote)).await) }
        });
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(grace = ?cfg.shutdown_grace, "draining");
    let deadline = tokio::time::Instant::now() + cfg.shutdown_grace;
    let connections = tokio::time::timeout_at(deadline, graceful.shutdown())
        .await
        .is_ok();
    proxy.tasks().close();
    let calls = tokio::time::timeout_at(deadline, proxy.tasks().wait())
        .await
        .is_ok();
    if !calls {
        tracing::warn!(
            "shutdown grace ended with upstream calls still running; their leases stay and expire"
        );
    }
    connections && calls
}

/// Connection-level accept errors are the peer's problem; anything else (EMFILE…) is
/// logged and backed off, so the loop never spins.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
