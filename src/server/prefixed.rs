//! The first bytes of a connection, read with a deadline (HTTP/1 or h2c is decided on
//! them), and a stream that hands them back before reading on.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The HTTP/2 connection preface: its first bytes decide between HTTP/1 and h2c.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Read until the protocol is decided (the bytes leave the HTTP/2 preface, or the whole
/// preface arrived), within `timeout`. `None`: silence, EOF or an error — close.
pub(crate) async fn first_bytes(stream: &mut TcpStream, timeout: Duration) -> Option<Vec<u8>> {
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

/// Whether a connection's first bytes (from [`first_bytes`]) open HTTP/2 (h2c).
pub(super) fn is_h2_preface(first: &[u8]) -> bool {
    first.starts_with(H2_PREFACE)
}

/// A stream whose first reads return bytes already read from it.
pub(crate) struct Prefixed {
    prefix: Vec<u8>,
    at: usize,
    stream: TcpStream,
}

impl Prefixed {
    pub(crate) fn new(prefix: Vec<u8>, stream: TcpStream) -> Self {
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
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    pub(crate) async fn first_bytes_decides_early_and_times_out_on_silence() {
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
