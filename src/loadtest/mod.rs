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

mod report;
mod template;

use std::hash::{DefaultHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, Semaphore};

pub use report::{Answer, CheckResult, LatencySummary, Report, RunInfo, Tally};
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
    #[arg(long, default_value = "60s", value_parser = crate::config::parse_duration)]
    pub duration_limit: Duration,
    /// Per-request timeout (counted as an error).
    #[arg(long, default_value = "30s", value_parser = crate::config::parse_duration)]
    pub timeout: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
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

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Everything a request of the run needs, parsed once.
struct Plan {
    method: Method,
    base: String,
    path: LoadTemplate,
    body: LoadTemplate,
    constant_body: Option<Bytes>,
    headers: Vec<(HeaderName, LoadTemplate)>,
    key_header: Option<HeaderName>,
    run: String,
    timeout: Duration,
}

impl Plan {
    fn new(args: &LoadtestArgs, run: String) -> Result<Plan, UsageError> {
        let base = args.target.trim_end_matches('/').to_owned();
        let uri: Uri = base
            .parse()
            .map_err(|e| UsageError(format!("--target {base}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(UsageError(format!(
                "--target {base}: give an http://host:port URL"
            )));
        }
        if !args.path_template.starts_with('/') {
            return Err(UsageError("--path-template must start with /".into()));
        }
        let method = Method::from_bytes(args.method.as_bytes())
            .map_err(|_| UsageError(format!("--method {}: not a method", args.method)))?;
        let mut headers = Vec::new();
        for h in &args.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| UsageError(format!("--header {h}: expected K:V")))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| UsageError(format!("--header {h}: bad header name")))?;
            headers.push((name, LoadTemplate::parse(value.trim())));
        }
        let key_header = match args.key_header.trim() {
            "" => None,
            name => Some(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| UsageError(format!("--key-header {name}: bad header name")))?,
            ),
        };
        let body = LoadTemplate::parse(&args.body);
        let constant_body = body
            .is_constant()
            .then(|| Bytes::from(args.body.clone().into_bytes()));
        Ok(Plan {
            method,
            base,
            path: LoadTemplate::parse(&args.path_template),
            body,
            constant_body,
            headers,
            key_header,
            run,
            timeout: args.timeout,
        })
    }

    fn key(&self, i: u64) -> String {
        format!("lt-{}-{i}", self.run)
    }

    fn request(&self, intent: IntentVars<'_>) -> Result<Request<Full<Bytes>>, String> {
        let uri = format!("{}{}", self.base, self.path.render(intent));
        let mut req = Request::builder().method(self.method.clone()).uri(uri);
        if let Some(name) = &self.key_header {
            req = req.header(name, intent.key);
        }
        let body = match &self.constant_body {
            Some(b) => b.clone(),
            None => Bytes::from(self.body.render(intent)),
        };
        if !body.is_empty() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in &self.headers {
            let value = HeaderValue::from_str(&value.render(intent))
                .map_err(|_| format!("header {name}: value is not a valid header value"))?;
            req = req.header(name, value);
        }
        req.body(Full::new(body)).map_err(|e| e.to_string())
    }
}

fn client(pool: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(pool)
        .build(connector)
}

fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

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

    let client = client(args.concurrency);
    let intents = usize::try_from(args.intents)
        .map_err(|_| UsageError("--intents: too many for this machine".into()))?;
    let mut tally = Tally::new(format!("lt-{run}-"), intents);
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Duration, Answer)>();
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
                            Err(e) => Answer::Transport(e),
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
    let mut total = 0u64;
    while let Some((i, took, answer)) = rx.recv().await {
        tally.record(i, took, answer);
        total += 1;
    }
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

async fn send(client: &HttpClient, request: Request<Full<Bytes>>, timeout: Duration) -> Answer {
    let exchange = async {
        let response = client.request(request).await.map_err(|e| {
            // The hyper-util error alone says little ("client error (Connect)").
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        })?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the body: {e}"))?
            .to_bytes();
        let body_hash = (200..300).contains(&status).then(|| {
            let mut h = DefaultHasher::new();
            h.write(&body);
            h.finish()
        });
        Ok::<_, String>(Answer::Response {
            status,
            replayed,
            body_hash,
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Answer::Transport(e),
        Err(_) => Answer::Timeout,
    }
}

/// Ask `url` (rendered per intent) for each sent intent's execution count.
async fn check_counts(
    client: &HttpClient,
    tally: &Tally,
    url: &LoadTemplate,
    run: &str,
    concurrency: usize,
) -> CheckResult {
    use futures_util::stream::{self, StreamExt};

    let requests = tally.sent_intents().map(|i| {
        let key = tally.key(i);
        let uri = url.render(IntentVars {
            index: i as u64,
            key: &key,
            run,
        });
        let client = client.clone();
        async move {
            let count = read_count(&client, &uri).await;
            (key, count)
        }
    });
    let mut results = stream::iter(requests).buffer_unordered(concurrency.clamp(1, 64));
    let mut check = CheckResult::default();
    while let Some((key, count)) = results.next().await {
        check.checked += 1;
        match count {
            Ok(1) => {}
            Ok(n) => {
                check.wrong_total += 1;
                if check.wrong.len() < 10 {
                    check.wrong.push((key, n));
                }
            }
            Err(e) => {
                check.failures_total += 1;
                if check.failures.len() < 10 {
                    check.failures.push(format!("{key}: {e}"));
                }
            }
        }
    }
    check
}

async fn read_count(client: &HttpClient, uri: &str) -> Result<u64, String> {
    let request = Request::get(uri)
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("bad check URL {uri}: {e}"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("GET {uri}: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("GET {uri}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("GET {uri}: status {status}"));
        }
        let json: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| format!("GET {uri}: the answer is not JSON"))?;
        json.get("count")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("GET {uri}: no numeric \"count\" field"))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| format!("GET {uri}: no answer within 10 s"))?
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
