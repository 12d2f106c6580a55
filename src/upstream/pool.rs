//! Idle upstream connections, last in first out: the most recently used connection is
//! the one most likely still open, and the rest age out.

use std::future::poll_fn;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::conn::Conn;

pub struct Pool {
    idle: Mutex<Vec<Conn>>,
    max_idle: usize,
    idle_timeout: Duration,
    reaper_started: std::sync::Once,
}

impl Pool {
    pub fn new(max_idle: usize, idle_timeout: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
            reaper_started: std::sync::Once::new(),
        })
    }

    /// The most recent idle connection that can take a request now; closed or expired
    /// ones met on the way are dropped.
    pub async fn checkout(&self) -> Option<Conn> {
        loop {
            let mut conn = self.lock().pop()?;
            let usable = poll_fn(|cx| Poll::Ready(conn.is_usable(cx))).await;
            if usable && conn.idle_since.elapsed() < self.idle_timeout {
                return Some(conn);
            }
        }
    }

    /// Return a connection whose exchange has finished. Over `max_idle`, it is closed.
    pub fn put(self: &Arc<Self>, mut conn: Conn) {
        if !conn.is_alive() {
            return;
        }
        conn.idle_since = Instant::now();
        {
            let mut idle = self.lock();
            if idle.len() >= self.max_idle {
                return;
            }
            idle.push(conn);
        }
        self.reaper_started
            .call_once(|| spawn_reaper(Arc::downgrade(self), self.idle_timeout));
    }

    pub fn idle_count(&self) -> usize {
        self.lock().len()
    }

    /// Drop idle connections that are expired or that their peer has closed (nobody
    /// polls an idle connection, so a peer's FIN is only noticed here or at checkout).
    fn reap(&self) {
        let mut cx = Context::from_waker(Waker::noop());
        let timeout = self.idle_timeout;
        self.lock()
            .retain_mut(|c| c.idle_since.elapsed() < timeout && c.drive(&mut cx) && c.is_alive());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // A panic while holding the lock cannot leave the Vec inconsistent.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sweep the pool every few seconds for as long as it exists.
fn spawn_reaper(pool: Weak<Pool>, idle_timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let every = (idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(15));
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(pool) = pool.upgrade() else { return };
            pool.reap();
        }
    });
}
