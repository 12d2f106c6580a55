//! `idem-bench-upstream`: the fast tool API the benchmark (`bench/run.sh`) puts behind
//! idem, nginx, or nothing.
//!
//! - Any `POST`/`PUT`/`PATCH`/`DELETE`: reads the body, counts one execution for the
//!   request's `Idempotency-Key` (none: counted under `-`), and answers `201` with a
//!   small JSON body carrying an execution id unique to this process, so two executions
//!   of one intent never answer with the same body.
//!   With `x-bench-body-bytes: N` the answer is padded to about N bytes.
//! - `GET /count?key=K`: `{"count": n}`, executions seen for key `K` (URL-decoded) —
//!   the shape `idem loadtest --check-url` expects.
//! - `GET /stats`: `{"executions": n, "keys": k, "duplicated_keys": d, "max_per_key": m}`
//!   over every key counted so far (`-` excluded), so a run can check executions == intents.
//! - `POST /reset`: forget every count.
//! - Any other `GET`: `200 {"ok":true}`.
//!
//! Usage: `idem-bench-upstream [--listen 127.0.0.1:0] [--threads 1]`. Prints
//! `listening on ADDR` on stdout once bound; runs until killed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const SHARDS: usize = 64;
const NO_KEY: &str = "-";

struct Counts {
    shards: Vec<Mutex<HashMap<Box<str>, u64>>>,
    hasher: RandomState,
    seq: AtomicU64,
    unkeyed: AtomicU64,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            seq: AtomicU64::new(0),
            unkeyed: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, HashMap<Box<str>, u64>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count one execution of `key`; returns how many it has had, this one included.
    fn execute(&self, key: Option<&str>) -> u64 {
        let Some(key) = key else {
            return self.unkeyed.fetch_add(1, Ordering::Relaxed) + 1;
        };
        let mut shard = self.shard(key);
        if let Some(n) = shard.get_mut(key) {
            *n += 1;
            return *n;
        }
        shard.insert(key.into(), 1);
        1
    }

    fn count(&self, key: &str) -> u64 {
        if key == NO_KEY {
            return self.unkeyed.load(Ordering::Relaxed);
        }
        self.shard(key).get(key).copied().unwrap_or(0)
    }

    fn stats(&self) -> String {
        let (mut executions, mut keys, mut duplicated, mut max) = (0u64, 0u64, 0u64, 0u64);
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for &n in shard.values() {
                executions += n;
                keys += 1;
                duplicated += u64::from(n > 1);
                max = max.max(n);
            }
        }
        let unkeyed = self.unkeyed.load(Ordering::Relaxed);
        format!(
            "{{\"executions\":{executions},\"keys\":{keys},\"duplicated_keys\":{duplicated},\
             \"max_per_key\":{max},\"unkeyed\":{unkeyed}}}"
        )
    }

    fn reset(&self) {
        for shard in &self.shards {
            shard.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        self.unkeyed.store(0, Ordering::Relaxed);
    }
}

fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(counts: Arc<Counts>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    // Drain the body whatever it is (a client must be able to reuse the connection).
    let _ = body.collect().await;
    let path = parts.uri.path();
    match parts.method {
        Method::GET if path == "/count" => {
            let key = parts
                .uri
                .query()
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .unwrap_or("");
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            json(
                StatusCode::OK,
                format!("{{\"count\":{}}}", counts.count(&key)),
            )
        }
        Method::GET if path == "/stats" => json(StatusCode::OK, counts.stats()),
        Method::POST if path == "/reset" => {
            counts.reset();
            json(StatusCode::OK, "{\"ok\":true}")
        }
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => {
            let key = parts
                .headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok());
            let execution = counts.execute(key);
            let id = counts.seq.fetch_add(1, Ordering::Relaxed);
            let mut body =
                format!("{{\"id\":\"ex_{id:x}\",\"execution\":{execution},\"status\":\"ok\"}}");
            // `x-bench-body-bytes: N`: an answer of about N bytes (a `pad` field), for the
            // cost of capturing, storing, sealing and replaying larger responses.
            let want = parts
                .headers
                .get("x-bench-body-bytes")
                .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            if want > body.len() + 10 {
                body.pop();
                body.push_str(",\"pad\":\"");
                body.push_str(&"a".repeat(want - body.len() - 2));
                body.push_str("\"}");
            }
            json(StatusCode::CREATED, body)
        }
        _ => json(StatusCode::OK, "{\"ok\":true}"),
    }
}

struct Args {
    listen: SocketAddr,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        threads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => args.listen = value()?.parse().map_err(|e| format!("--listen: {e}"))?,
            "--threads" => {
                args.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?
            }
            "-h" | "--help" => {
                return Err("usage: idem-bench-upstream [--listen ADDR] [--threads N]".into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(serve(args.listen));
}

async fn serve(listen: SocketAddr) {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    };
    let addr = listener.local_addr().expect("bound address");
    println!("listening on {addr}");
    let _ = std::io::stdout().flush();
    let counts = Arc::new(Counts::new());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let counts = counts.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let counts = counts.clone();
                async move { Ok::<_, Infallible>(handle(counts, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
