//! The proxy listener: accept loop, connection limit, HTTP/1.1 + h2c, slow-client
//! protection, and graceful drain.

use std::convert::Infallible;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

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
/// `permits` bounds the open connections (shared by every worker: `max_connections`).
pub async fn serve(
    listener: TcpListener,
    proxy: Proxy,
    cfg: ServerConfig,
    permits: Arc<Semaphore>,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let builder = Arc::new(builder(&cfg));
    let graceful = GracefulShutdown::new();
    let (draining, _) = watch::channel(false);
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
        let (mut stream, remote) = tokio::select! {
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
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let mut drain = draining.subscribe();
        let header_read_timeout = cfg.header_read_timeout;
        tokio::spawn(async move {
            // The first bytes are read here, bounded by `header_read_timeout`: the
            // HTTP/1-or-2 detection of hyper-util's auto builder has no timeout of its
            // own, so a client that connects and sends nothing would hold its
            // connection (and a `max_connections` slot) forever.
            let first = tokio::select! {
                first = first_bytes(&mut stream, header_read_timeout) => first,
                _ = drain.wait_for(|d| *d) => None,
            };
            let Some(first) = first else {
                tracing::debug!(%remote, "no request bytes within header_read_timeout; closed");
                drop(permit);
                return;
            };
            let io = TokioIo::new(Prefixed::new(first, stream));
            let conn = builder.serve_connection(io, service).into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = draining.send(true);
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

/// The HTTP/2 connection preface: its first bytes decide between HTTP/1 and h2c.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Read until the protocol is decided (the bytes leave the HTTP/2 preface, or the whole
/// preface arrived), within `timeout`. `None`: silence, EOF or an error — close.
async fn first_bytes(stream: &mut TcpStream, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf[len..])).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        len += n;
        let seen = &buf[..len.min(H2_PREFACE.len())];
        if len >= H2_PREFACE.len() || !H2_PREFACE.starts_with(seen) {
            buf.truncate(len);
            return Some(buf);
        }
    }
}

/// A stream whose first reads return bytes already read from it.
struct Prefixed {
    prefix: Vec<u8>,
    at: usize,
    stream: TcpStream,
}

impl Prefixed {
    fn new(prefix: Vec<u8>, stream: TcpStream) -> Self {
        Prefixed {
            prefix,
            at: 0,
            stream,
        }
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn first_bytes_decides_early_and_times_out_on_silence() {
        let (mut client, mut server) = pair().await;
        client.write_all(b"POST / HTTP/1.1\r\n").await.unwrap();
        let got = first_bytes(&mut server, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(got.starts_with(b"PO"));
        // A client trickling the h2 preface is still bounded.
        let (mut client, mut server) = pair().await;
        client.write_all(b"PRI * HTTP/2").await.unwrap();
        let started = std::time::Instant::now();
        assert!(first_bytes(&mut server, Duration::from_millis(200))
            .await
            .is_none());
        assert!(started.elapsed() < Duration::from_secs(1));
        let (mut client, mut server) = pair().await;
        client.write_all(H2_PREFACE).await.unwrap();
        assert_eq!(
            first_bytes(&mut server, Duration::from_secs(1))
                .await
                .unwrap(),
            H2_PREFACE
        );
        let (_client, mut server) = pair().await;
        assert!(first_bytes(&mut server, Duration::from_millis(100))
            .await
            .is_none());
    }

    #[tokio::test]
    async fn prefixed_replays_then_reads_the_stream() {
        let (mut client, server) = pair().await;
        client.write_all(b"world").await.unwrap();
        drop(client);
        let mut io = Prefixed::new(b"hello ".to_vec(), server);
        let mut out = Vec::new();
        io.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"hello world");
    }
}
