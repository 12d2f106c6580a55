//! The three ways an agent repeats a tool call, as the demo plays them.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The agent's HTTP client times out while the charge is still running; it retries.
    TimeoutThenRetry,
    /// A planner fans out the same step several times at once.
    ConcurrentDuplicates,
    /// After a context compaction, a new session repeats a step that already finished.
    LaterSessionRepeats,
}

/// What one scenario did against one target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub charges: u64,
    pub replays: u64,
    pub conflicts: u64,
}

const DUPLICATES: usize = 5;

impl Scenario {
    pub const ALL: [Scenario; 3] = [
        Scenario::TimeoutThenRetry,
        Scenario::ConcurrentDuplicates,
        Scenario::LaterSessionRepeats,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Scenario::TimeoutThenRetry => "client timeout, then retry",
            Scenario::ConcurrentDuplicates => "5 concurrent duplicates",
            Scenario::LaterSessionRepeats => "later session repeats the step",
        }
    }

    pub fn story(self) -> &'static str {
        match self {
            Scenario::TimeoutThenRetry => {
                "the agent gives up after 300 ms and sends the charge again"
            }
            Scenario::ConcurrentDuplicates => "the same tool call is sent 5 times at once",
            Scenario::LaterSessionRepeats => "the step finished; a new session runs it again",
        }
    }

    /// Play the scenario against `base` (the API or idem) for one invoice.
    pub async fn play(self, base: &str, invoice: &str) -> Tally {
        let url = format!("{base}/invoices/{invoice}/charge");
        let mut tally = Tally::default();
        match self {
            Scenario::TimeoutThenRetry => {
                let first = tokio::time::timeout(Duration::from_millis(300), call(&url)).await;
                tally.calls += 1;
                if let Ok(r) = first {
                    tally.count(r);
                }
                tally.calls += 1;
                tally.count(call(&url).await);
            }
            Scenario::ConcurrentDuplicates => {
                let results = join_all((0..DUPLICATES).map(|_| call(&url))).await;
                tally.calls += DUPLICATES as u64;
                for r in results {
                    tally.count(r);
                }
            }
            Scenario::LaterSessionRepeats => {
                tally.calls += 2;
                tally.count(call(&url).await);
                tally.count(call(&url).await);
            }
        }
        tally
    }
}

impl Tally {
    fn count(&mut self, outcome: Option<(u16, bool)>) {
        match outcome {
            Some((_, true)) => self.replays += 1,
            Some((409, _)) => self.conflicts += 1,
            _ => {}
        }
    }
}

/// One `charge_customer` call; returns the status and whether it was a replay.
async fn call(url: &str) -> Option<(u16, bool)> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = Full::new(Bytes::from_static(br#"{"amount":4200,"currency":"eur"}"#));
    let request = Request::post(url)
        .header("content-type", "application/json")
        .body(body)
        .ok()?;
    let response = client.request(request).await.ok()?;
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let _ = response.into_body().collect().await;
    Some((status, replayed))
}
