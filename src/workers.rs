//! The data plane: `server.workers` threads, each running a single-threaded tokio
//! runtime that serves the connections the acceptor hands it and owns everything they
//! need — the connection tasks, the detached upstream calls, the upstream connection
//! pool and, with Redis, its own store connection.
//!
//! Why not one multi-threaded runtime: a proxied request is a relay of small I/O events
//! between the caller, the upstream and Redis, and on a work-stealing runtime each of
//! them can wake a task on another core. Thread per core, as nginx and pingora's
//! no-steal mode do, keeps an exchange on one thread from accept to the last byte
//! (docs/benchmarks.md has the A/B). One acceptor spreads connections over the workers
//! by their open connection counts (`server::accept`).

use crate::traces::Traces;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};

use crate::metrics::{Metrics, WorkerLabels};
use crate::proxy::{Control, ProxyConfig};
use crate::server::{self, config::ServerConfig};
use crate::store::SharedStore;
use crate::store::{Store, StoreError};

/// Why idem could not start. Defined here, below [`crate::app`], because the workers
/// start the store and report its failure; the app only adds the listeners' and the
/// tracer's failures.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("cannot start the worker threads: {0}")]
    Workers(std::io::Error),
    #[error("{0}")]
    Traces(String),
    #[error("{0}")]
    Keys(String),
}

/// Started workers: the control side (admin, reload), every worker's store handle (the
/// admin asks them all), and a future that resolves when every worker has drained
/// (`true` when all drains finished within `shutdown_grace`).
pub struct Started<F> {
    pub control: Control,
    pub stores: Vec<Store>,
    pub done: F,
}

/// Start the workers; each builds its store handle from `shared` on its own runtime,
/// then its proxy from `proxy`. `stop` going to `true` (or its sender being dropped)
/// starts the drain.
pub async fn start(
    listener: TcpListener,
    server_cfg: &ServerConfig,
    proxy: ProxyConfig,
    shared: SharedStore,
    stop: watch::Receiver<bool>,
    traces: Option<Traces>,
) -> Result<Started<impl Future<Output = bool>>, StartError> {
    // Traces on: latency histograms carry a sampled request's trace id as exemplar.
    let metrics = Metrics::with_exemplars(traces.is_some());
    let control = Control::new(proxy, metrics, traces, shared.sealing().clone());
    let metrics = control.metrics();
    let mut queues = Vec::new();
    let mut stores = Vec::new();
    let mut handoffs = Vec::new();
    let mut finished = Vec::new();
    for n in 0..server_cfg.worker_count() {
        let open = metrics.connections.get_or_create(&WorkerLabels {
            worker: n.to_string(),
        });
        let (queue, incoming) = server::worker_queue(open.clone());
        let (store_tx, store_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let worker = WorkerThread {
            server_cfg: server_cfg.clone(),
            shared: shared.clone(),
            control: control.clone(),
            stop: stop.clone(),
        };
        std::thread::Builder::new()
            .name(format!("idem-worker-{n}"))
            .spawn(move || {
                let drained = worker.run(incoming, store_tx, go_rx);
                let _ = done_tx.send(drained);
            })
            .map_err(StartError::Workers)?;
        // A worker that cannot start (runtime, store) fails the start; the workers
        // already started then stop, as their go-ahead never arrives.
        let store = match store_rx.await {
            Ok(result) => result?,
            Err(_) => return Err(StartError::Workers(std::io::Error::other("worker died"))),
        };
        stores.push(store);
        queues.push(queue);
        handoffs.push(go_tx);
        finished.push(done_rx);
    }
    for handoff in handoffs {
        let _ = handoff.send(());
    }
    // `max_connections` holds for the whole proxy, not per worker.
    let permits = Arc::new(Semaphore::new(server_cfg.max_connections.max(1)));
    let mut stop_accepting = stop;
    tokio::spawn(server::accept(listener, queues, permits, async move {
        let _ = stop_accepting.wait_for(|stop| *stop).await;
    }));
    let done = async move {
        let mut all = true;
        for done in finished {
            all &= done.await.unwrap_or(false);
        }
        all
    };
    Ok(Started {
        control,
        stores,
        done,
    })
}

struct WorkerThread {
    server_cfg: ServerConfig,
    shared: SharedStore,
    control: Control,
    stop: watch::Receiver<bool>,
}

impl WorkerThread {
    /// The worker thread's life: build its runtime and store, hand the store over (the
    /// admin asks every worker's), wait for every worker to have started, build its
    /// proxy, serve until drained.
    fn run(
        self,
        incoming: server::ConnectionInbox,
        store_tx: oneshot::Sender<Result<Store, StartError>>,
        go: oneshot::Receiver<()>,
    ) -> bool {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = store_tx.send(Err(StartError::Workers(e)));
                return false;
            }
        };
        runtime.block_on(async move {
            let store = self.shared.for_worker().await;
            let store = store.map_err(StartError::from);
            let mine = store.as_ref().ok().cloned();
            let _ = store_tx.send(store);
            let (Ok(()), Some(store)) = (go.await, mine) else {
                return false;
            };
            let proxy = self.control.worker_proxy(store);
            let mut stop = self.stop;
            let stopped = async move {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            server::serve(incoming, proxy, self.server_cfg, stopped).await
        })
    }
}
