//! The proxy listener: one acceptor that hands connections to the workers
//! ([`accept`]), and each worker's connections: HTTP/1.1 + h2c, slow-client protection
//! ([`prefixed`], [`idle`]) and graceful drain.

mod accept;
pub mod config;
mod drain;
mod idle;
mod prefixed;

pub(crate) use accept::accept_error;
pub use accept::{accept, worker_queue, ConnectionInbox, WorkerQueue};
pub(crate) use prefixed::{first_bytes, Prefixed};

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use drain::Drain;
use prefixed::is_h2_preface;

use self::config::ServerConfig;
use crate::proxy::Proxy;

/// The HTTP/1.1 and h2c connection builders, configured from the server settings.
///
/// The protocol is already known from the first bytes (`prefixed::first_bytes`), so a
/// connection goes straight to the right one: hyper-util's auto builder would read the
/// preface a second time and put one more layer under every read.
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl Builders {
    fn new(cfg: &ServerConfig) -> Builders {
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            // Slow clients that trickle their headers are cut off.
            .header_read_timeout(cfg.header_read_timeout)
            // hyper answers 431 when the head does not fit.
            .max_buf_size(cfg.max_header_bytes.max(8192));
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(cfg.max_header_bytes).unwrap_or(u32::MAX))
            // Each stream is a request whose body may be buffered: a bound per
            // connection, under `max_buffered_bytes` for all (issue 46 §5).
            .max_concurrent_streams(cfg.http2_max_streams)
            // Pings find a peer that vanished while its streams wait (issue 46 §3); an
            // idle connection is closed by `idle` first.
            .keep_alive_interval(Some(cfg.header_read_timeout))
            .keep_alive_timeout(cfg.header_read_timeout);
        Builders { http1, http2 }
    }
}

/// Serve the connections the acceptor hands this worker until `shutdown` resolves (or
/// the acceptor is gone), then drain: let open connections finish their requests, and
/// let detached upstream calls record their outcome — all bounded by `shutdown_grace`.
/// Returns whether the drain completed.
pub async fn serve(
    mut incoming: ConnectionInbox,
    proxy: Proxy,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let builders = Arc::new(Builders::new(&cfg));
    // The connections' tasks (the drain waits for them) and their drain signal.
    let connections = TaskTracker::new();
    let drain = Drain::default();
    let (draining, _) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let mut accepted = tokio::select! {
            accepted = incoming.next() => match accepted {
                Some(accepted) => accepted,
                None => break,
            },
            _ = &mut shutdown => break,
        };
        let Ok(mut stream) = accepted.stream() else {
            continue;
        };
        let remote = accepted.remote;
        let proxy = proxy.clone();
        let service = service_fn(move |req| {
            let proxy = proxy.clone();
            async move { Ok::<_, Infallible>(proxy.handle(req, Some(remote)).await) }
        });
        let builders = builders.clone();
        let drain = drain.clone();
        let mut draining_now = draining.subscribe();
        let header_read_timeout = cfg.header_read_timeout;
        let h2c = cfg.http2;
        connections.spawn(async move {
            // The first bytes are read here, bounded by `header_read_timeout`: the
            // HTTP/1-or-2 detection of hyper-util's auto builder has no timeout of its
            // own, so a client that connects and sends nothing would hold its
            // connection (and a `max_connections` slot) forever.
            let first = tokio::select! {
                first = first_bytes(&mut stream, header_read_timeout) => first,
                _ = draining_now.wait_for(|d| *d) => None,
            };
            let Some(first) = first else {
                tracing::debug!(%remote, "no request bytes within header_read_timeout; closed");
                drop(accepted);
                return;
            };
            let h2 = is_h2_preface(&first);
            if h2 && !h2c {
                // `server.http2: false`: HTTP/1.1 only.
                tracing::debug!(%remote, "HTTP/2 preface with server.http2 off; closed");
                drop(accepted);
                return;
            }
            let io = TokioIo::new(Prefixed::new(first, stream));
            let served = if h2 {
                // Closed once it has no open stream for `header_read_timeout`, its
                // first request included (issue 46 §3).
                let streams = idle::Streams::new();
                let service = idle::counted(&streams, service);
                let conn = builders.http2.serve_connection(io, service);
                let conn = drain.watch(conn, |c| c.graceful_shutdown());
                idle::closing_when_idle(conn, &streams, header_read_timeout).await
            } else {
                let conn = builders.http1.serve_connection(io, service);
                drain.watch(conn, |c| c.graceful_shutdown()).await
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
            // Frees the `max_connections` slot and the worker's connection count.
            drop(accepted);
        });
    }
    drop(incoming);
    let _ = draining.send(true);
    drain.start();
    connections.close();
    tracing::info!(grace = ?cfg.shutdown_grace, "draining");
    let deadline = tokio::time::Instant::now() + cfg.shutdown_grace;
    let connections = tokio::time::timeout_at(deadline, connections.wait())
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
