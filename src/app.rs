//! Putting idem together: store, proxy, listeners; start, reload, drain.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::admin::{self, Admin};
use crate::config::Config;
use crate::proxy::{Control, ProxyConfig, Reloaded};
use crate::store::config::{StoreBackend, StoreConfig};
use crate::store::{Sealing, SharedStore};
use crate::{traces, workers};

pub use crate::workers::StartError;

/// A running idem: its bound addresses and the handles to reload or drain it.
pub struct Running {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub control: Control,
    admin: Arc<Admin>,
    stop: watch::Sender<bool>,
    done: JoinHandle<bool>,
    /// The trace exporter (traces on), flushed once the drain is over.
    exporter: Option<traces::Exporter>,
}

/// Bind the listeners and start serving. Port 0 binds a free port (tests).
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })
    };
    let listener = bind(config.listen).await?;
    let admin_listener = bind(config.admin.listen).await?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: config.admin.listen,
            source,
        })?;
    let (traces, exporter) = match traces::start(&config.telemetry).map_err(StartError::Traces)? {
        Some((traces, exporter)) => (Some(traces), Some(exporter)),
        None => (None, None),
    };
    let sealing = Sealing::load(config.store.encryption.as_ref()).map_err(StartError::Keys)?;
    let shared = SharedStore::start(&config.store, config.server.worker_count(), sealing)?;
    let (stop, stopped) = watch::channel(false);
    let workers::Started {
        control,
        stores,
        done: serving,
    } = workers::start(
        listener,
        &config.server,
        proxy_config(config),
        shared,
        stopped,
        traces,
    )
    .await?;
    let admin = Arc::new(Admin {
        control: control.clone(),
        stores,
        guard: admin::Guard::new(&config.admin, admin_addr),
        draining: Default::default(),
        store_timeout: readiness_timeout(&config.store),
        header_read_timeout: config.server.header_read_timeout,
        eviction: match &config.store.backend {
            StoreBackend::Redis(redis) => admin::EvictionCheck::redis(redis.allow_eviction),
            _ => admin::EvictionCheck::none(),
        },
    });
    // The admin listener outlives the drain, so probes see "draining" (not a refused
    // connection) and metrics stay scrapeable until the end.
    let (admin_stop, admin_stopped) = oneshot::channel::<()>();
    tokio::spawn(admin::serve(admin_listener, admin.clone(), async move {
        let _ = admin_stopped.await;
    }));
    let done = tokio::spawn(async move {
        let drained = serving.await;
        drop(admin_stop);
        drained
    });
    tracing::info!(
        %addr,
        %admin_addr,
        upstream = %config.upstream.url,
        workers = config.server.worker_count(),
        "idem listening"
    );
    Ok(Running {
        addr,
        admin_addr,
        control,
        admin,
        stop,
        done,
        exporter,
    })
}

/// The proxy's part of `config`: the upstream, the server's body limits, and what a
/// reload swaps.
fn proxy_config(config: &Config) -> ProxyConfig {
    ProxyConfig {
        upstream: config.upstream.clone(),
        body_read_timeout: config.server.body_read_timeout(&config.upstream),
        max_buffered_bytes: config.server.max_buffered_bytes,
        reloaded: reloaded(config),
    }
}

/// What a reload of `config` swaps: the routes, the default action, `store.on_error`
/// and the `store.encryption` keys.
fn reloaded(config: &Config) -> Reloaded {
    Reloaded {
        routes: config.routes.clone(),
        default: config.default,
        on_store_error: config.store.on_error,
        encryption: config.store.encryption.clone(),
    }
}

/// How long `/readyz` waits for the store's ping: the backend's own `op_timeout`, and at
/// least 250 ms so a probe does not flap on a busy node.
pub fn readiness_timeout(store: &StoreConfig) -> Duration {
    store
        .op_timeout()
        .unwrap_or_default()
        .max(Duration::from_millis(250))
}

impl Running {
    /// Swap in a new configuration's routes and keys; on an error nothing changes.
    pub fn reload(&self, config: &Config) -> Result<u64, String> {
        self.control.reload(reloaded(config))
    }

    /// Drain and stop; `true` when everything finished within `shutdown_grace`.
    pub async fn shutdown(self) -> bool {
        self.admin.draining.store(true, Ordering::Relaxed);
        let _ = self.stop.send(true);
        let drained = self.done.await.unwrap_or(false);
        if let Some(exporter) = self.exporter {
            exporter.shutdown().await;
        }
        drained
    }
}
