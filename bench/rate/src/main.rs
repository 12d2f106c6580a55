//! `idem-bench-rate`: an open-loop HTTP/1.1 load generator, for the added-latency phase
//! of the benchmark (`bench/latency.py`, issue 36 §3).
//!
//! wrk is closed-loop: each connection sends its next request only when the previous
//! answer is in, so when the server stalls, the requests that would have arrived during
//! the stall are never sent, and their waiting is never measured (coordinated omission).
//! Here request `i` is *due* at `t0 + i / rate` whatever happened before, and its latency
//! is its completion minus that due time: a request that had to wait for a free
//! connection, or behind a stalled server, is charged for the wait.
//!
//! ```text
//! idem-bench-rate --rate R|max [--duration 6] [--warmup 1] [--connections 64]
//!     [--method POST] [--body TEXT] [--header 'Name: value']...
//!     [--keys none|unique|same] [--key-prefix P] [--timeout 10] URL
//! ```
//!
//! - `URL`: `http://HOST:PORT/path`, on loopback only (127.0.0.0/8, ::1, localhost).
//! - `--keys unique`: every request carries `Idempotency-Key: <prefix>-<i>` (fresh intents);
//!   `same`: every request carries `<prefix>` (replays; one request completes it before
//!   the run starts); `none`: no key.
//! - `--connections`: keep-alive connections opened before the run. A due request goes
//!   out on an idle one; when none is idle it waits, and the wait counts in its latency
//!   (the JSON's `lag_*` says how long requests waited to be sent: with enough
//!   connections, that is the pacing's own precision, tens of µs).
//! - `--warmup`: seconds at the same rate before the measured `--duration`; not recorded.
//! - `--rate max`: closed loop instead, each connection sending its next request as soon
//!   as the last is answered (like wrk): the saturation throughput with this generator's
//!   own CPU cost on the machine. Latency is then from the actual send.
//!
//! Prints one JSON object on stdout: the target and achieved rates, counts, errors (any
//! answer that is not 2xx, and transport errors or timeouts), and in µs the latency
//! percentiles from the due time (`p50_us` … `p999_us`, `max_us`), the service time from
//! the actual send (`service_p50_us`, `service_p99_us`), and the send lag (`lag_p50_us`,
//! `lag_p99_us`, `lag_max_us`; of it, the wait for a free connection: `conn_wait_p50_us`,
//! `conn_wait_p99_us`). Pacing runs on its own thread (`std::thread::sleep`, whose
//! precision is the kernel's high-resolution timers and the thread's timer slack, not
//! tokio's millisecond wheel); the requests on a current-thread tokio runtime.

use std::collections::VecDeque;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::process::exit;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use http::header::{HeaderName, HeaderValue, HOST};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{handshake, SendRequest};
use hyper_util::rt::TokioIo;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Conn = SendRequest<Full<Bytes>>;

const USAGE: &str = "usage: idem-bench-rate --rate R|max [--duration S] [--warmup S] \
[--connections C] [--method M] [--body TEXT] [--header 'Name: value']... \
[--keys none|unique|same] [--key-prefix P] [--timeout S] http://127.0.0.1:PORT/path";

#[derive(Clone, Copy, PartialEq)]
enum Keys {
    None,
    Unique,
    Same,
}

struct Opts {
    addr: SocketAddr,
    authority: String,
    path: String,
    rate: f64,
    duration: f64,
    warmup: f64,
    connections: usize,
    method: Method,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    keys: Keys,
    prefix: String,
    timeout: Duration,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut url = None;
    let mut o = Opts {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        authority: String::new(),
        path: String::new(),
        rate: 0.0,
        duration: 6.0,
        warmup: 1.0,
        connections: 64,
        method: Method::POST,
        body: Bytes::new(),
        headers: Vec::new(),
        keys: Keys::None,
        prefix: String::new(),
        timeout: Duration::from_secs(10),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if !a.starts_with("--") {
            url = Some(a.clone());
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let num = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| format!("{a}: not a number: {v}"))
        };
        match a.as_str() {
            "--rate" if v == "max" => o.rate = f64::INFINITY,
            "--rate" => o.rate = num(v)?,
            "--duration" => o.duration = num(v)?,
            "--warmup" => o.warmup = num(v)?,
            "--connections" => o.connections = num(v)? as usize,
            "--timeout" => o.timeout = Duration::from_secs_f64(num(v)?),
            "--method" => o.method = v.parse().map_err(|_| format!("bad method {v}"))?,
            "--body" => o.body = Bytes::from(v.clone()),
            "--header" => {
                let (name, value) = v
                    .split_once(':')
                    .ok_or_else(|| format!("--header wants 'Name: value', got {v}"))?;
                let name = HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| format!("bad header name in {v}"))?;
                let value = HeaderValue::from_str(value.trim())
                    .map_err(|_| format!("bad header value in {v}"))?;
                o.headers.push((name, value));
            }
            "--keys" => {
                o.keys = match v.as_str() {
                    "none" => Keys::None,
                    "unique" => Keys::Unique,
                    "same" => Keys::Same,
                    _ => return Err(format!("--keys: none, unique or same, not {v}")),
                }
            }
            "--key-prefix" => o.prefix = v.clone(),
            _ => return Err(format!("unknown option {a}")),
        }
    }
    if o.rate.is_nan() || o.rate <= 0.0 || o.duration <= 0.0 || o.connections == 0 {
        return Err("--rate, --duration and --connections must be > 0".into());
    }
    let url: http::Uri = url
        .ok_or("no URL")?
        .parse()
        .map_err(|e| format!("bad URL: {e}"))?;
    if url.scheme_str() != Some("http") {
        return Err("the URL must be http://".into());
    }
    let authority = url.authority().ok_or("the URL has no host")?;
    let port = authority.port_u16().unwrap_or(80);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    o.addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .find(|a| a.ip().is_loopback())
        .ok_or_else(|| format!("{host} is not a loopback address: loopback only"))?;
    o.authority = authority.as_str().to_string();
    o.path = url
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if o.prefix.is_empty() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        o.prefix = format!("rate-{}-{nanos}", std::process::id());
    }
    Ok(o)
}

impl Opts {
    fn request(&self, key: Option<&str>) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(self.path.as_str())
            .header(HOST, self.authority.as_str());
        for (name, value) in &self.headers {
            b = b.header(name, value);
        }
        if let Some(key) = key {
            b = b.header("idempotency-key", key);
        }
        b.body(Full::new(self.body.clone()))
            .expect("a request from validated parts")
    }

    /// Request `i` of the run (`u64::MAX - c`: connection `c`'s warming request).
    fn nth(&self, i: u64) -> Request<Full<Bytes>> {
        match self.keys {
            Keys::None => self.request(None),
            Keys::Same => self.request(Some(&self.prefix)),
            Keys::Unique => self.request(Some(&format!("{}-{i}", self.prefix))),
        }
    }
}

async fn connect(addr: SocketAddr) -> Result<Conn, Error> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// What became of one request.
enum Outcome {
    Answered(StatusCode),
    Failed,
}

/// One exchange on `conn`, the answer read to its end. A connection that failed or timed
/// out is replaced by a new one (`None` if that fails too).
async fn exchange(
    mut conn: Conn,
    req: Request<Full<Bytes>>,
    addr: SocketAddr,
    timeout: Duration,
) -> (Option<Conn>, Outcome, Instant) {
    let result = tokio::time::timeout(timeout, async {
        conn.ready().await?;
        let resp = conn.send_request(req).await?;
        let status = resp.status();
        resp.into_body().collect().await?;
        Ok::<_, Error>(status)
    })
    .await;
    let done = Instant::now();
    match result {
        Ok(Ok(status)) => (Some(conn), Outcome::Answered(status), done),
        _ => {
            drop(conn);
            (connect(addr).await.ok(), Outcome::Failed, done)
        }
    }
}

struct Done {
    measured: bool,
    due: Instant,
    sent: Instant,
    conn: Option<Conn>,
    outcome: Outcome,
    at: Instant,
}

type Flight = Pin<Box<dyn Future<Output = Done>>>;

fn histogram() -> Histogram<u64> {
    // ns, from 1 ns to 10 minutes, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds")
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    (h.value_at_quantile(q) as f64 / 100.0).round() / 10.0
}

async fn run(o: Opts) -> Result<serde_json::Value, Error> {
    let mut idle: Vec<Conn> = Vec::with_capacity(o.connections);
    for _ in 0..o.connections {
        idle.push(connect(o.addr).await?);
    }
    let mut live = idle.len();
    // `same`: one request completes the key first, so that every later one is a replay.
    // Then one request per connection (concurrently), so that every connection and the
    // server's side of it have served once before the clock starts.
    if o.keys == Keys::Same {
        let conn = idle.pop().expect("at least one connection");
        let (conn, outcome, _) = exchange(conn, o.nth(0), o.addr, o.timeout).await;
        match outcome {
            Outcome::Answered(s) if s.is_success() => {}
            Outcome::Answered(s) => return Err(format!("the priming request got {s}").into()),
            Outcome::Failed => return Err("the priming request failed".into()),
        }
        idle.push(conn.ok_or("could not reconnect")?);
    }
    let mut warming: FuturesUnordered<_> = idle
        .drain(..)
        .enumerate()
        .map(|(c, conn)| {
            let req = o.nth(u64::MAX - c as u64);
            exchange(conn, req, o.addr, o.timeout)
        })
        .collect();
    while let Some((conn, outcome, _)) = warming.next().await {
        if let Outcome::Answered(s) = outcome {
            if !s.is_success() {
                return Err(format!("a warming request got {s}").into());
            }
        }
        match conn {
            Some(conn) => idle.push(conn),
            None => live -= 1,
        }
    }
    drop(warming);
    if live == 0 {
        return Err("no connection left after warming".into());
    }

    // `--rate max`: closed loop instead (every connection sends its next request when the
    // last is answered), to find the saturation; latency is then from the actual send.
    let closed = o.rate.is_infinite();
    let period = if closed { 0.0 } else { 1e9 / o.rate };
    let warm_n = if closed {
        0
    } else {
        (o.warmup * o.rate).round() as u64
    };
    let total = if closed {
        0
    } else {
        warm_n + (o.duration * o.rate).round() as u64
    };
    let t0 = Instant::now() + Duration::from_millis(5);
    let due = move |i: u64| t0 + Duration::from_nanos((i as f64 * period) as u64);
    let measured_from = if closed {
        t0 + Duration::from_secs_f64(o.warmup)
    } else {
        due(warm_n)
    };
    let end = measured_from + Duration::from_secs_f64(o.duration);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let pacer = std::thread::spawn(move || {
        if closed {
            return None;
        }
        // The kernel lets a sleeping thread wake up to its timer slack late (50 µs by
        // default): ask for 1 µs (best effort; Linux allows it for one's own threads,
        // some kernels only with CAP_SYS_NICE). The JSON reports the slack in force.
        let file = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name().map(|tid| tid.to_string_lossy().into_owned()))
            .map(|tid| format!("/proc/{tid}/timerslack_ns"));
        let slack = file.and_then(|file| {
            let _ = std::fs::write(&file, "1000");
            std::fs::read_to_string(&file)
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        });
        for i in 0..total {
            let now = Instant::now();
            let at = due(i);
            if at > now {
                std::thread::sleep(at - now);
            }
            if tx.send(i).is_err() {
                break;
            }
        }
        slack
    });

    let (mut latency, mut service, mut lag) = (histogram(), histogram(), histogram());
    // Of the send lag, the part spent waiting for a free connection (every one busy: the
    // server's queueing, not the generator's).
    let mut wait = histogram();
    let (mut ok, mut status_errors, mut transport_errors) = (0u64, 0u64, 0u64);
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    let mut last = measured_from;
    // Due requests not sent yet, with when the dispatcher took them from the pacer.
    let mut pending: VecDeque<(u64, Instant)> = VecDeque::new();
    let mut flights: FuturesUnordered<Flight> = FuturesUnordered::new();
    let mut max_in_flight = 0usize;
    let mut open = true;
    let mut next = 0u64;
    let mut sent_measured = 0u64;
    let mut draining = false;
    let mut unfinished = 0u64;
    // Two timers made once (not one per turn of the loop): the end of a closed-loop run,
    // and the deadline for the last answers once everything is sent.
    let stop = tokio::time::sleep_until(end.into());
    let drain = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(stop, drain);
    loop {
        if closed && open {
            if Instant::now() >= end {
                open = false;
            }
            // One request per idle connection.
            while open && pending.len() < idle.len() {
                pending.push_back((next, Instant::now()));
                next += 1;
            }
        }
        while !pending.is_empty() && !idle.is_empty() {
            let (i, taken) = pending.pop_front().expect("not empty");
            let conn = idle.pop().expect("not empty");
            let sent = Instant::now();
            let due_at = if closed { sent } else { due(i) };
            let measured = if closed {
                sent >= measured_from
            } else {
                i >= warm_n
            };
            if measured {
                sent_measured += 1;
                lag.saturating_record(sent.saturating_duration_since(due_at).as_nanos() as u64);
                wait.saturating_record(sent.saturating_duration_since(taken).as_nanos() as u64);
            }
            let req = o.nth(i);
            let (addr, timeout) = (o.addr, o.timeout);
            flights.push(Box::pin(async move {
                let (conn, outcome, at) = exchange(conn, req, addr, timeout).await;
                Done {
                    measured,
                    due: due_at,
                    sent,
                    conn,
                    outcome,
                    at,
                }
            }));
            max_in_flight = max_in_flight.max(flights.len());
        }
        if !open && pending.is_empty() && flights.is_empty() {
            break;
        }
        if live == 0 {
            return Err("every connection was lost".into());
        }
        if !open && !draining {
            draining = true;
            drain
                .as_mut()
                .reset(tokio::time::Instant::now() + o.timeout);
        }
        tokio::select! {
            biased;
            Some(d) = flights.next(), if !flights.is_empty() => {
                match d.conn {
                    Some(conn) => idle.push(conn),
                    None => live -= 1,
                }
                if !d.measured {
                    continue;
                }
                last = last.max(d.at);
                match d.outcome {
                    Outcome::Answered(s) => {
                        latency.saturating_record((d.at - d.due).as_nanos() as u64);
                        service.saturating_record((d.at - d.sent).as_nanos() as u64);
                        *statuses.entry(s.as_u16()).or_default() += 1;
                        if s.is_success() { ok += 1 } else { status_errors += 1 }
                    }
                    Outcome::Failed => transport_errors += 1,
                }
            }
            _ = &mut stop, if closed && open => open = false,
            msg = rx.recv(), if open && !closed => match msg {
                Some(i) => {
                    let now = Instant::now();
                    pending.push_back((i, now));
                    while let Ok(i) = rx.try_recv() {
                        pending.push_back((i, now));
                    }
                }
                None => open = false,
            },
            _ = &mut drain, if draining => {
                unfinished = (pending.len() + flights.len()) as u64;
                break;
            }
        }
    }
    let slack = pacer.join().ok().flatten();
    let measured = if closed {
        sent_measured
    } else {
        total - warm_n
    };
    let answered = ok + status_errors;
    let span = last.saturating_duration_since(measured_from).as_secs_f64();
    Ok(serde_json::json!({
        "url": format!("http://{}{}", o.authority, o.path),
        "keys": match o.keys { Keys::None => "none", Keys::Unique => "unique", Keys::Same => "same" },
        "rate_target": if closed { None } else { Some(o.rate) },
        "rate": if span > 0.0 { answered as f64 / span } else { 0.0 },
        "duration_s": o.duration,
        "warmup_s": o.warmup,
        "connections": o.connections,
        "requests": measured,
        "ok": ok,
        "errors": status_errors + transport_errors + unfinished,
        "status_errors": status_errors,
        "transport_errors": transport_errors,
        "unfinished": unfinished,
        "statuses": statuses,
        "max_in_flight": max_in_flight,
        "p50_us": us(&latency, 0.5),
        "p90_us": us(&latency, 0.9),
        "p99_us": us(&latency, 0.99),
        "p999_us": us(&latency, 0.999),
        "max_us": us(&latency, 1.0),
        "mean_us": (latency.mean() / 100.0).round() / 10.0,
        "service_p50_us": us(&service, 0.5),
        "service_p99_us": us(&service, 0.99),
        "lag_p50_us": us(&lag, 0.5),
        "lag_p99_us": us(&lag, 0.99),
        "lag_max_us": us(&lag, 1.0),
        "conn_wait_p50_us": us(&wait, 0.5),
        "conn_wait_p99_us": us(&wait, 0.99),
        "pacer_timerslack_ns": slack,
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    let opts = parse(&args).unwrap_or_else(|e| {
        eprintln!("idem-bench-rate: {e}\n{USAGE}");
        exit(2)
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("idem-bench-rate: runtime: {e}");
            exit(1)
        });
    match rt.block_on(run(opts)) {
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("idem-bench-rate: {e}");
            exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn loopback_only() {
        let o = parse(&args(&[
            "--rate",
            "100",
            "http://127.0.0.1:8080/charges?x=1",
        ]))
        .unwrap();
        assert_eq!(o.addr, SocketAddr::from(([127, 0, 0, 1], 8080)));
        assert_eq!(o.path, "/charges?x=1");
        assert_eq!(o.authority, "127.0.0.1:8080");
        assert!(parse(&args(&["--rate", "100", "http://localhost:8080/"])).is_ok());
        assert!(parse(&args(&["--rate", "100", "http://[::1]:8080/"])).is_ok());
        let err = parse(&args(&["--rate", "100", "http://10.0.0.1:8080/"]))
            .err()
            .unwrap();
        assert!(err.contains("loopback"), "{err}");
        assert!(parse(&args(&["--rate", "100", "https://127.0.0.1:8080/"])).is_err());
    }

    #[test]
    fn rates_and_keys() {
        let o = parse(&args(&["--rate", "max", "http://127.0.0.1:1/"])).unwrap();
        assert!(o.rate.is_infinite());
        assert!(parse(&args(&["--rate", "0", "http://127.0.0.1:1/"])).is_err());
        assert!(parse(&args(&["http://127.0.0.1:1/"])).is_err());
        let o = parse(&args(&[
            "--rate",
            "10",
            "--keys",
            "unique",
            "--key-prefix",
            "p",
            "--header",
            "Content-Type: application/json",
            "http://127.0.0.1:1/c",
        ]))
        .unwrap();
        let a = o.nth(1);
        let b = o.nth(2);
        assert_eq!(a.headers()["idempotency-key"], "p-1");
        assert_eq!(b.headers()["idempotency-key"], "p-2");
        assert_eq!(a.headers()["content-type"], "application/json");
        assert_eq!(a.headers()[HOST], "127.0.0.1:1");
        let o = parse(&args(&[
            "--rate",
            "10",
            "--keys",
            "same",
            "--key-prefix",
            "k",
            "http://127.0.0.1:1/",
        ]))
        .unwrap();
        assert_eq!(o.nth(1).headers()["idempotency-key"], "k");
        assert_eq!(o.nth(7).headers()["idempotency-key"], "k");
        let o = parse(&args(&["--rate", "10", "http://127.0.0.1:1/"])).unwrap();
        assert!(o.nth(1).headers().get("idempotency-key").is_none());
    }
}
