//! Process signals: SIGTERM (Kubernetes sends this) or SIGINT drain; SIGHUP reloads.

use tokio::signal::unix::{signal, SignalKind};

/// What the process was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Shutdown,
    Reload,
}

/// Signals as a stream of requests.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Shutdown,
            _ = self.int.recv() => Signal::Shutdown,
            _ = self.hup.recv() => Signal::Reload,
        }
    }
}
