//! A fault-injecting TCP proxy for tests: put it between idem and Redis, or between
//! idem and the upstream, and break the link on demand.
//!
//! Faults (set with [`FaultyProxy::set`], effective at once on every connection, open or
//! new):
//! - [`Fault::Pass`]: forward bytes as they come.
//! - [`Fault::Delay`]: forward every chunk, in order, after a delay (a slow peer).
//! - [`Fault::Hold`]: a black hole: stop reading from either side, so bytes wait in the
//!   kernel buffers, and accept new connections without connecting them. Nothing is
//!   dropped: like a network partition that TCP rides out, flow resumes in order when
//!   the fault is lifted. (Dropping bytes of a live stream is not a fault TCP can
//!   produce, and would desynchronise any pipelined protocol.)
//! - [`Fault::Reset`]: reset every connection (RST, `SO_LINGER 0`), and reset new ones
//!   as soon as they are accepted (a crashed peer or a firewall reject).
//!
//! Triggers ([`FaultyProxy::arm`]) switch the fault the moment a chunk containing a byte
//! pattern passes in a given direction — *before* that chunk is forwarded: e.g. "black-hole
//! Redis when the completion write goes out" or "reset the upstream connection when the
//! third chunk of the response comes". A triggered `Hold` keeps the chunk and forwards it
//! when lifted; a triggered `Reset` drops it with the connection.
//!
//! Every loop is bounded by the sockets it serves: the proxy's tasks end when it drops.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Delay(Duration),
    Hold,
    Reset,
}

/// Which way a chunk travels: from the client (idem) to the target, or back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Up,
    Down,
}

struct Trigger {
    dir: Dir,
    pattern: Vec<u8>,
    fault: Fault,
    /// Only the connection the chunk travels on, rather than the whole link.
    this_connection: bool,
}

struct Shared {
    target: SocketAddr,
    fault: watch::Sender<Fault>,
    triggers: Mutex<Vec<Trigger>>,
    fired: AtomicU64,
    accepted: AtomicU64,
}

impl Shared {
    /// The fault a chunk going `dir` switches on, if it matches an armed trigger, and
    /// whether it is for this connection only.
    fn check(&self, dir: Dir, chunk: &[u8]) -> Option<(Fault, bool)> {
        let mut triggers = self.triggers.lock().unwrap();
        let i = triggers.iter().position(|t| {
            t.dir == dir
                && chunk
                    .windows(t.pattern.len().max(1))
                    .any(|w| w == t.pattern)
        })?;
        let trigger = triggers.remove(i);
        self.fired.fetch_add(1, Ordering::SeqCst);
        if !trigger.this_connection {
            self.fault.send_replace(trigger.fault.clone());
        }
        Some((trigger.fault, trigger.this_connection))
    }
}

/// A running fault proxy on a free loopback port, forwarding to `target`.
pub struct FaultyProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultyProxy {
    pub async fn start(target: SocketAddr) -> FaultyProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind faulty proxy");
        let addr = listener.local_addr().unwrap();
        let (fault, _) = watch::channel(Fault::Pass);
        let shared = Arc::new(Shared {
            target,
            fault,
            triggers: Mutex::new(Vec::new()),
            fired: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let sh = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                sh.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(sh.clone(), client));
            }
        });
        FaultyProxy {
            addr,
            shared,
            accept,
        }
    }

    /// `host:port` of the proxy, for URLs.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    pub fn set(&self, fault: Fault) {
        self.shared.fault.send_replace(fault);
    }

    pub fn fault(&self) -> Fault {
        self.shared.fault.borrow().clone()
    }

    /// Switch the whole link to `fault` when a chunk going `dir` contains `pattern`
    /// (one shot).
    pub fn arm(&self, dir: Dir, pattern: &[u8], fault: Fault) {
        self.push_trigger(dir, pattern, fault, false);
    }

    /// Apply `fault` to the one connection on which a chunk going `dir` contains
    /// `pattern` (one shot): `Reset` resets it, `Hold` freezes it for good (until the
    /// link is reset or the proxy dropped), `Delay` slows it.
    pub fn arm_connection(&self, dir: Dir, pattern: &[u8], fault: Fault) {
        self.push_trigger(dir, pattern, fault, true);
    }

    fn push_trigger(&self, dir: Dir, pattern: &[u8], fault: Fault, this_connection: bool) {
        self.shared.triggers.lock().unwrap().push(Trigger {
            dir,
            pattern: pattern.to_vec(),
            fault,
            this_connection,
        });
    }

    /// Reset every open connection (new ones are then accepted as before).
    pub async fn reset_open(&self) {
        let before = self.fault();
        self.set(Fault::Reset);
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.set(before);
    }

    /// How many armed triggers have fired.
    pub fn fired(&self) -> u64 {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Open connections see the reset and end.
        self.shared.fault.send_replace(Fault::Reset);
    }
}

/// Close with RST rather than FIN.
fn reset(stream: TcpStream) {
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn connection(shared: Arc<Shared>, client: TcpStream) {
    let mut faults = shared.fault.subscribe();
    // Connect only once the link is up: a held link accepts but does not connect.
    loop {
        let fault = faults.borrow_and_update().clone();
        match fault {
            Fault::Reset => return reset(client),
            Fault::Hold => {
                if faults.changed().await.is_err() {
                    return reset(client);
                }
            }
            Fault::Pass | Fault::Delay(_) => break,
        }
    }
    let Ok(server) = TcpStream::connect(shared.target).await else {
        return reset(client);
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    pump(shared, faults, client, server).await;
}

async fn pump(
    shared: Arc<Shared>,
    mut faults: watch::Receiver<Fault>,
    mut client: TcpStream,
    mut server: TcpStream,
) {
    let mut up = vec![0u8; 64 * 1024];
    let mut down = vec![0u8; 64 * 1024];
    // A chunk kept back by a triggered `Hold`, forwarded when the hold lifts.
    let mut pending: Option<(Dir, Vec<u8>)> = None;
    // A fault triggered for this connection only; overrides the link's unless Reset.
    let mut local: Option<Fault> = None;
    let (mut up_open, mut down_open) = (true, true);
    while up_open || down_open {
        let mut fault = faults.borrow_and_update().clone();
        if let Some(l) = &local {
            if fault != Fault::Reset {
                fault = l.clone();
            }
        }
        match fault {
            Fault::Reset => {
                reset(client);
                reset(server);
                return;
            }
            Fault::Hold => {
                if faults.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Fault::Pass | Fault::Delay(_) => {}
        }
        if let Some((dir, chunk)) = pending.take() {
            let to = if dir == Dir::Up {
                &mut server
            } else {
                &mut client
            };
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            continue;
        }
        let (dir, n) = tokio::select! {
            r = client.read(&mut up), if up_open => (Dir::Up, r),
            r = server.read(&mut down), if down_open => (Dir::Down, r),
            changed = faults.changed() => {
                if changed.is_err() { return; }
                continue;
            }
        };
        let n = match n {
            Ok(0) | Err(_) => {
                // Pass the half-close on.
                if dir == Dir::Up {
                    up_open = false;
                    let _ = server.shutdown().await;
                } else {
                    down_open = false;
                    let _ = client.shutdown().await;
                }
                continue;
            }
            Ok(n) => n,
        };
        let chunk = if dir == Dir::Up { &up[..n] } else { &down[..n] };
        let triggered = shared.check(dir, chunk);
        if let Some((fault, true)) = &triggered {
            local = Some(fault.clone());
        }
        match triggered.map(|(fault, _)| fault) {
            Some(Fault::Reset) => {
                reset(client);
                reset(server);
                return;
            }
            Some(Fault::Hold) => {
                pending = Some((dir, chunk.to_vec()));
                continue;
            }
            Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
            Some(Fault::Pass) => {}
            None => {
                if let Fault::Delay(d) = fault {
                    tokio::time::sleep(d).await;
                }
            }
        }
        let to = if dir == Dir::Up {
            &mut server
        } else {
            &mut client
        };
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}
