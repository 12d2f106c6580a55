//! Connection attempts after a failure, paced: one at a time per process, after a
//! growing pause, instead of one per request.
//!
//! deadpool-postgres opens a connection whenever a request finds no idle one, so while
//! PostgreSQL is down or restarting every request started a connect of its own. Each
//! attempt that got as far as the server forked a backend, and one abandoned at
//! `op_timeout` left its backend waiting for a startup packet (up to PostgreSQL's
//! `authentication_timeout`, 60 s): in the nemesis run two primary restarts 3 s apart
//! left 1,202 backends and "sorry, too many clients already" for every replica (issue
//! 45). Here, after a failed attempt, requests fail at once with the last error until
//! the pause is over; then one of them tries, the others still fail at once, and its
//! success opens the pool to all again (what pgbouncer's `server_login_retry` does).
//!
//! A thin wrapper around deadpool-postgres's own [`Manager`]: that crate has no pacing
//! of its own (its `create_timeout` bounds an attempt, not how often one starts).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool::managed::{Metrics, RecycleError, RecycleResult};
use deadpool_postgres::{ClientWrapper, Manager};

/// The first pause after a failure; it doubles with each failure in a row.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause: the outage is noticed within it once PostgreSQL is back.
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// Why no connection was had.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The driver's own error (the attempt was made).
    Db(tokio_postgres::Error),
    /// No attempt: the last one failed and the pause after it is not over, or another
    /// request is making the next one.
    Paused { last: String, retry_in: Duration },
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Db(e) => write!(f, "{}", super::db_error::describe(e)),
            ConnectError::Paused { last, retry_in } => write!(
                f,
                "not connecting for another {} ms after a failed connection attempt ({last})",
                retry_in.as_millis()
            ),
        }
    }
}

impl std::error::Error for ConnectError {}

/// The process-wide pacing state, shared by every worker's pool.
#[derive(Default)]
pub(crate) struct Pacing {
    state: Mutex<PacingState>,
}

#[derive(Default)]
struct PacingState {
    /// Failed attempts in a row; 0 while connecting works.
    failures: u32,
    /// The last failure's text, for the requests refused meanwhile.
    last: String,
    /// When the next attempt may start.
    retry_at: Option<Instant>,
    /// Whether an attempt after a failure is under way.
    probing: bool,
}

/// The outcome a permit records when it is dropped without [`Permit::succeeded`] or
/// [`Permit::failed`]: the attempt was abandoned (the pool's `create_timeout`).
const ABANDONED: &str = "the connection attempt timed out";

impl Pacing {
    /// Leave to make an attempt now, or why not.
    fn permit(self: &Arc<Self>) -> Result<Permit, ConnectError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.failures > 0 {
            let now = Instant::now();
            let retry_at = state.retry_at.unwrap_or(now);
            if state.probing || now < retry_at {
                return Err(ConnectError::Paused {
                    last: state.last.clone(),
                    retry_in: retry_at.saturating_duration_since(now),
                });
            }
            state.probing = true;
        }
        Ok(Permit {
            pacing: Some(self.clone()),
        })
    }

    fn record(&self, failure: Option<String>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.probing = false;
        match failure {
            None => *state = PacingState::default(),
            Some(text) => {
                state.failures = state.failures.saturating_add(1);
                state.retry_at = Some(Instant::now() + pause_after(state.failures));
                state.last = text;
            }
        }
    }
}

/// The pause after `failures` failed attempts in a row: 100 ms doubling to 2 s.
fn pause_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_PAUSE
        .saturating_mul(1 << doublings)
        .min(LONGEST_PAUSE)
}

/// One attempt's leave; dropped unfinished, it counts as a failure.
struct Permit {
    pacing: Option<Arc<Pacing>>,
}

impl Permit {
    fn finish(mut self, failure: Option<String>) {
        if let Some(pacing) = self.pacing.take() {
            pacing.record(failure);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(pacing) = self.pacing.take() {
            pacing.record(Some(ABANDONED.to_owned()));
        }
    }
}

/// deadpool-postgres's manager with paced connection attempts.
pub(crate) struct PacedManager {
    inner: Manager,
    pacing: Arc<Pacing>,
}

impl PacedManager {
    pub(crate) fn new(inner: Manager, pacing: Arc<Pacing>) -> PacedManager {
        PacedManager { inner, pacing }
    }
}

impl deadpool::managed::Manager for PacedManager {
    type Type = ClientWrapper;
    type Error = ConnectError;

    async fn create(&self) -> Result<ClientWrapper, ConnectError> {
        let permit = self.pacing.permit()?;
        match deadpool::managed::Manager::create(&self.inner).await {
            Ok(client) => {
                permit.finish(None);
                Ok(client)
            }
            Err(e) => {
                permit.finish(Some(super::db_error::describe(&e)));
                Err(ConnectError::Db(e))
            }
        }
    }

    async fn recycle(
        &self,
        client: &mut ClientWrapper,
        metrics: &Metrics,
    ) -> RecycleResult<ConnectError> {
        deadpool::managed::Manager::recycle(&self.inner, client, metrics)
            .await
            .map_err(|e| match e {
                RecycleError::Backend(e) => RecycleError::Backend(ConnectError::Db(e)),
                RecycleError::Message(m) => RecycleError::Message(m),
            })
    }

    fn detach(&self, client: &mut ClientWrapper) {
        deadpool::managed::Manager::detach(&self.inner, client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_to_its_limit() {
        assert_eq!(pause_after(1), Duration::from_millis(100));
        assert_eq!(pause_after(2), Duration::from_millis(200));
        assert_eq!(pause_after(5), Duration::from_millis(1600));
        assert_eq!(pause_after(6), LONGEST_PAUSE);
        assert_eq!(pause_after(u32::MAX), LONGEST_PAUSE);
    }

    #[test]
    fn after_a_failure_one_attempt_at_a_time_and_only_after_the_pause() {
        let pacing = Arc::new(Pacing::default());
        // While connecting works, attempts run side by side.
        let a = pacing.permit().unwrap();
        let b = pacing.permit().unwrap();
        a.finish(None);
        b.finish(Some("connection refused".into()));
        // Within the pause: refused at once, naming the last failure.
        match pacing.permit() {
            Err(ConnectError::Paused { last, retry_in }) => {
                assert_eq!(last, "connection refused");
                assert!(retry_in <= FIRST_PAUSE);
            }
            _ => panic!("an attempt within the pause"),
        }
        std::thread::sleep(FIRST_PAUSE);
        let probe = pacing.permit().unwrap();
        assert!(
            pacing.permit().is_err(),
            "a second attempt beside the probe"
        );
        // An abandoned probe is a failure: the next pause is longer.
        drop(probe);
        match pacing.permit() {
            Err(ConnectError::Paused { last, retry_in }) => {
                assert_eq!(last, ABANDONED);
                assert!(retry_in > FIRST_PAUSE);
            }
            _ => panic!("an attempt right after an abandoned one"),
        }
        std::thread::sleep(pause_after(2));
        pacing.permit().unwrap().finish(None);
        let (c, d) = (pacing.permit().unwrap(), pacing.permit().unwrap());
        c.finish(None);
        d.finish(None);
    }
}
