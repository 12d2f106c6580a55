//! `idem loadtest` (SPEC §7): fire N distinct intents, each repeated D times
//! concurrently, and check from outside that every intent ran exactly once.
//!
//! # Intent keys
//! Intent `i` of a run has the key `lt-<run>-<i>`, where `<run>` is `--run-id` or 8
//! random hex digits. By default the key goes in an `Idempotency-Key` header
//! (`--key-header NAME` picks another header, `--key-header ''` sends none), which is what
//! `idem serve --upstream URL` keys on. Routes that key on something else (a path
//! capture, a body field) get it from the templates: `{i}`, `{key}` and `{run}` are
//! replaced in `--path-template`, `--body`, `--header` values and `--check-url`
//! (URL-encoded there).
//!
//! # Double execution
//! - From the answers: an intent that received two *different* 2xx bodies ran twice
//!   (upstreams answer each execution with its own id; replays repeat the first body).
//! - With `--check-url`: after the load, the upstream is asked per intent for JSON
//!   `{"count": n}`; any count other than 1 fails the run.
//!
//! Responses are classed as forwarded (2xx without `Idempotent-Replayed: true`),
//! replayed (`Idempotent-Replayed: true`), conflicts (409) and errors (any other status,
//! timeouts, transport failures). The run fails (exit 1) on any double execution, any
//! error, or any wrong or unreadable count.
//!
//! While it runs, progress goes to stderr (a bar on a terminal, a line every
//! `--progress-interval` elsewhere; [`progress`]); the report goes to stdout.
//!
//! # Layout
//! - `plan.rs`: the arguments checked and turned into a request plan.
//! - `client.rs`: the HTTP client, one exchange, the `--check-url` reads.
//! - `progress.rs`: progress on stderr.
//! - `report.rs`: the tally of answers and the report.
//! - `template.rs`: the `{i}`, `{key}`, `{run}` templates.

mod client;
mod plan;
mod progress;
mod report;
mod template;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};

use client::{check_counts, send};
use plan::{valid_run_id, Plan};
use progress::Progress;

pub use report::{CheckResult, LatencySummary, Reply, Report, RunInfo, Tally};
pub use template::{IntentVars, LoadTemplate};

/// Arguments of `idem loadtest`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadtestArgs {
    /// Base URL to load (idem's listener, or an upstream directly): http://host:port
    #[arg(long)]
    pub target: String,
    /// Distinct intents to fire.
    #[arg(long, default_value_t = 1000)]
    pub intents: u64,
    /// Times each intent is sent, all at once.
    #[arg(long, default_value_t = 1)]
    pub duplicates: u64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// HTTP method.
    #[arg(long, default_value = "POST")]
    pub method: String,
    /// Request path; `{i}`, `{key}`, `{run}` are replaced per intent.
    #[arg(long, default_value = "/loadtest/charge")]
    pub path_template: String,
    /// Extra header `K:V` (repeatable); placeholders are replaced in V.
    #[arg(long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Request body (JSON); placeholders are replaced.
    #[arg(
        long,
        default_value = r#"{"intent":"{key}","amount":100,"currency":"eur"}"#
    )]
    pub body: String,
    /// Header carrying the intent key; empty: send none.
    #[arg(long, default_value = "Idempotency-Key")]
    pub key_header: String,
    /// Run id in the intent keys `lt-<run>-<i>` (letters, digits, `.`, `_`, `-`);
    /// random by default.
    #[arg(long)]
    pub run_id: Option<String>,
    /// Per-intent execution count URL answering `{"count": n}`, e.g.
    /// 'http://127.0.0.1:3000/count?key={key}'.
    #[arg(long)]
    pub check_url: Option<String>,
    /// Stop sending new requests after this long (in-flight ones finish).
    #[arg(long, default_value = "60s", value_parser = crate::units::parse_duration)]
    pub duration_limit: Duration,
    /// Per-request timeout (counted as an error).
    #[arg(long, default_value = "30s", value_parser = crate::units::parse_duration)]
    pub timeout: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// How often a progress line goes to stderr when it is not a terminal (a terminal
    /// gets a bar instead); 0 turns progress off.
    #[arg(long, default_value = "5s", value_parser = crate::units::parse_duration)]
    pub progress_interval: Duration,
}

impl LoadtestArgs {
    /// Defaults for `target`, as `idem loadtest --target TARGET` would have them.
    pub fn new(target: impl Into<String>) -> LoadtestArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: LoadtestArgs,
        }
        let target = target.into();
        Wrap::parse_from(["loadtest", "--target", &target]).args
    }
}

/// A request plan that failed validation (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

/// Run the load test and return its report (print it with `Display`, or as JSON).
pub async fn run(args: &LoadtestArgs) -> Result<Report, UsageError> {
    if args.intents == 0 || args.duplicates == 0 || args.concurrency == 0 {
        return Err(UsageError(
            "--intents, --duplicates and --concurrency must be at least 1".into(),
        ));
    }
    let run = match &args.run_id {
        Some(id) if valid_run_id(id) => id.clone(),
        Some(id) => {
            return Err(UsageError(format!(
                "--run-id {id}: use letters, digits, '.', '_' and '-' (at most 64)"
            )))
        }
        None => format!("{:08x}", rand::random::<u32>()),
    };
    let plan = Arc::new(Plan::new(args, run.clone())?);
    let check = args
        .check_url
        .as_deref()
        .map(|u| LoadTemplate::parse(u).url_encoded());
    // Fail fast on a template that cannot make a request at all.
    let first_key = plan.key(0);
    plan.request(IntentVars {
        index: 0,
        key: &first_key,
        run: &run,
    })
    .map_err(UsageError)?;

    let client = client::client(args.concurrency);
    let intents = usize::try_from(args.intents)
        .map_err(|_| UsageError("--intents: too many for this machine".into()))?;
    let mut tally = Tally::new(format!("lt-{run}-"), intents);
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Duration, Reply)>();
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + args.duration_limit;
    let mut stopped_at_limit = false;

    // Dispatch: the D copies of an intent take permits back to back, so they are in
    // flight together (when concurrency ≥ duplicates).
    let dispatcher = {
        let plan = plan.clone();
        let client = client.clone();
        let permits = permits.clone();
        let intents = args.intents;
        let duplicates = args.duplicates;
        tokio::spawn(async move {
            'outer: for i in 0..intents {
                let key = plan.key(i);
                for _ in 0..duplicates {
                    let permit = tokio::select! {
                        p = permits.clone().acquire_owned() => p.expect("semaphore open"),
                        _ = tokio::time::sleep_until(deadline) => break 'outer,
                    };
                    if tokio::time::Instant::now() >= deadline {
                        break 'outer;
                    }
                    let intent = IntentVars {
                        index: i,
                        key: &key,
                        run: &plan.run,
                    };
                    let request = plan.request(intent);
                    let (client, tx, timeout) = (client.clone(), tx.clone(), plan.timeout);
                    tokio::spawn(async move {
                        let sent = Instant::now();
                        let answer = match request {
                            Ok(request) => send(&client, request, timeout).await,
                            Err(e) => Reply::Transport(e),
                        };
                        let _ = tx.send((i as usize, sent.elapsed(), answer));
                        drop(permit);
                    });
                }
            }
            // Every copy of `tx` is gone once the last request reports.
            drop(tx);
        })
    };
    let mut progress = Progress::start(args.progress_interval, args.intents * args.duplicates);
    let mut total = 0u64;
    loop {
        tokio::select! {
            received = rx.recv() => {
                let Some((i, took, answer)) = received else { break };
                tally.record(i, took, answer);
                total += 1;
                progress.update(total, tally.error_count());
            }
            () = progress.due() => progress.line(total, tally.error_count()),
        }
    }
    progress.finish();
    let _ = dispatcher.await;
    let elapsed = started.elapsed();
    if total < args.intents * args.duplicates {
        stopped_at_limit = true;
    }

    let check = match check {
        Some(url) => Some(check_counts(&client, &tally, &url, &run, args.concurrency).await),
        None => None,
    };
    let info = RunInfo {
        target: args.target.clone(),
        run_id: run,
        intents: args.intents,
        duplicates: args.duplicates,
        concurrency: args.concurrency,
        key_header: plan
            .key_header
            .as_ref()
            .map(|_| args.key_header.trim().to_owned()),
        stopped_at_limit,
    };
    Ok(tally.finish(info, elapsed, check))
}

/// `idem loadtest`: run, print, and map the outcome to an exit status (0 pass, 1 fail,
/// 2 bad arguments).
pub async fn main(args: LoadtestArgs) -> u8 {
    match run(&args).await {
        Ok(report) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                print!("{report}");
            }
            if report.passed() {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("idem loadtest: {e}");
            2
        }
    }
}
