//! One acceptor for every worker. Each accepted connection goes to the worker with the
//! fewest open connections (Envoy calls this exact balance): with a handful of long-lived
//! keep-alive connections, as a sidecar sees from its own pod, letting every worker
//! accept for itself or the kernel hash them (`SO_REUSEPORT`) leaves one core saturated
//! while the other idles. The handoff costs one channel send per connection, never per
//! request.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// A connection handed to a worker. Dropping it frees its `max_connections` slot and
/// takes it off its worker's count.
pub struct Accepted {
    stream: Option<std::net::TcpStream>,
    pub remote: SocketAddr,
    _permit: OwnedSemaphorePermit,
    /// The open-connections gauge of the worker it is counted against.
    open: Gauge,
}

impl Accepted {
    /// The socket, registered with the calling (worker's) runtime.
    pub fn stream(&mut self) -> std::io::Result<TcpStream> {
        let stream = self
            .stream
            .take()
            .ok_or_else(|| std::io::Error::other("stream already taken"))?;
        TcpStream::from_std(stream)
    }
}

impl Accepted {
    /// Count this connection against `open` (and no longer against the previous one).
    fn assign(&mut self, open: &Gauge) {
        open.inc();
        let previous = std::mem::replace(&mut self.open, open.clone());
        previous.dec();
    }
}

impl Drop for Accepted {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// The acceptor's end of a worker's queue.
pub struct WorkerQueue {
    tx: mpsc::UnboundedSender<Accepted>,
    open: Gauge,
}

/// The worker's end: connections to serve; `None` once the acceptor has stopped.
pub struct ConnectionInbox {
    rx: mpsc::UnboundedReceiver<Accepted>,
}

impl ConnectionInbox {
    pub async fn next(&mut self) -> Option<Accepted> {
        self.rx.recv().await
    }
}

/// A worker's queue; `open` counts its open connections (`idem_connections{worker}`).
pub fn worker_queue(open: Gauge) -> (WorkerQueue, ConnectionInbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    (WorkerQueue { tx, open }, ConnectionInbox { rx })
}

/// Accept until `shutdown` resolves, at most `permits` connections open at once (at the
/// limit, new connections wait in the kernel's backlog).
pub async fn accept(
    listener: TcpListener,
    mut workers: Vec<WorkerQueue>,
    permits: Arc<Semaphore>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut turn = 0usize;
    while !workers.is_empty() {
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
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        // Fewest open connections first; ties go round the workers in turn.
        turn = turn.wrapping_add(1);
        let mut pick = fewest(&workers, turn);
        workers[pick].open.inc();
        let mut accepted = Accepted {
            stream: Some(stream),
            remote,
            _permit: permit,
            open: workers[pick].open.clone(),
        };
        // A worker that has stopped hands the connection back: take it out, try another.
        while let Err(mpsc::error::SendError(back)) = workers[pick].tx.send(accepted) {
            accepted = back;
            workers.swap_remove(pick);
            if workers.is_empty() {
                break;
            }
            pick = fewest(&workers, turn);
            accepted.assign(&workers[pick].open);
        }
    }
}

/// The worker with the fewest open connections, searching from `turn` so ties rotate.
fn fewest(workers: &[WorkerQueue], turn: usize) -> usize {
    let n = workers.len();
    (0..n)
        .map(|i| (turn + i) % n)
        .min_by_key(|&i| workers[i].open.get())
        .unwrap_or(0)
}

/// Connection-level accept errors are the peer's problem; anything else (EMFILE…) is
/// logged and backed off, so the loop never spins.
pub(crate) async fn accept_error(e: std::io::Error) {
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
