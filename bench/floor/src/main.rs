//! The floor of idem's own stack: the smallest correct proxies built from the crates idem
//! uses (hyper's client and server connections, tokio, redis-rs), its allocator and its
//! release profile. `bench/callgrind.py` measures them beside idem, so that "how far is
//! idem from what its stack allows" is a ratio measured in one run (issue 36).
//!
//! ```text
//! idem-floor --mode passthrough|fresh|replay --listen ADDR --upstream ADDR [--redis URL]
//! ```
//!
//! - `passthrough`: forward every request, stream the answer back.
//! - `fresh`: one `SET k 0 NX GET PX 10000` (the reservation), forward, then one
//!   `SET k <status><body> PX 86400000` (the record), answer. A key already completed is
//!   answered from its value; one in flight gets 409.
//! - `replay`: one `GET k`; a completed key is answered from its value, anything else
//!   goes the `fresh` way.
//!
//! The key is the `Idempotency-Key` header as it is: no hashing, no scope, no headers
//! stored, no lease renewal, no metrics. That is what a floor leaves out; everything it
//! does, idem does too. One current-thread runtime, as each idem worker is one.

mod pool;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use redis::aio::MultiplexedConnection;

#[global_allocator]
static ALLOCATOR: idem_alloc::Allocator = idem_alloc::Allocator;

type Answer = Response<Either<Incoming, Full<Bytes>>>;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Passthrough,
    Fresh,
    Replay,
}

struct Floor {
    mode: Mode,
    upstream: pool::Pool,
    redis: Option<MultiplexedConnection>,
}

/// The value that marks a key reserved and not yet completed.
const IN_FLIGHT: &[u8] = b"0";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let usage = "usage: idem-floor --mode passthrough|fresh|replay --listen ADDR --upstream ADDR [--redis URL]";
    let mode = match arg("--mode").as_deref() {
        Some("passthrough") => Mode::Passthrough,
        Some("fresh") => Mode::Fresh,
        Some("replay") => Mode::Replay,
        _ => exit(usage),
    };
    let listen: SocketAddr = arg("--listen")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| exit(usage));
    let upstream: SocketAddr = arg("--upstream")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| exit(usage));
    let redis_url = arg("--redis");
    if mode != Mode::Passthrough && redis_url.is_none() {
        exit("--mode fresh and replay need --redis");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let redis = match redis_url {
            Some(url) => Some(
                redis::Client::open(url)
                    .expect("redis url")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("redis connection"),
            ),
            None => None,
        };
        let floor = Arc::new(Floor {
            mode,
            upstream: pool::Pool::new(upstream),
            redis,
        });
        let listener = tokio::net::TcpListener::bind(listen).await.expect("bind");
        tokio::select! {
            _ = serve(listener, floor) => {}
            _ = shutdown() => {}
        }
    });
}

fn exit(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}

/// SIGTERM or SIGINT: return, so that the process exits and valgrind writes its counts.
async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn serve(listener: tokio::net::TcpListener, floor: Arc<Floor>) {
    let mut server = http1::Builder::new();
    server
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let floor = floor.clone();
        let service = service_fn(move |req| {
            let floor = floor.clone();
            async move { Ok::<_, Infallible>(floor.handle(req).await) }
        });
        let connection = server.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(connection);
    }
}

impl Floor {
    async fn handle(&self, req: Request<Incoming>) -> Answer {
        if self.mode == Mode::Passthrough {
            return match self.upstream.send(req).await {
                Ok(resp) => resp.map(Either::Left),
                Err(_) => status(StatusCode::BAD_GATEWAY),
            };
        }
        let Some(key) = req.headers().get("idempotency-key") else {
            return status(StatusCode::BAD_REQUEST);
        };
        let key = [b"floor:", key.as_bytes()].concat();
        let mut redis = self.redis.clone().expect("checked at start");
        if self.mode == Mode::Replay {
            let stored: Option<Vec<u8>> =
                match redis::cmd("GET").arg(&key).query_async(&mut redis).await {
                    Ok(stored) => stored,
                    Err(_) => return status(StatusCode::SERVICE_UNAVAILABLE),
                };
            if let Some(answer) = stored.as_deref().and_then(replayed) {
                return answer;
            }
        }
        let reserved: Option<Vec<u8>> = match redis::cmd("SET")
            .arg(&key)
            .arg(IN_FLIGHT)
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut redis)
            .await
        {
            Ok(previous) => previous,
            Err(_) => return status(StatusCode::SERVICE_UNAVAILABLE),
        };
        if let Some(previous) = reserved {
            return replayed(&previous).unwrap_or_else(|| status(StatusCode::CONFLICT));
        }
        let Ok(resp) = self.upstream.send(req).await else {
            let _: Result<(), _> = redis::cmd("DEL").arg(&key).query_async(&mut redis).await;
            return status(StatusCode::BAD_GATEWAY);
        };
        let (head, body) = resp.into_parts();
        let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
            return status(StatusCode::BAD_GATEWAY);
        };
        let mut record = BytesMut::with_capacity(2 + body.len());
        record.put_u16(head.status.as_u16());
        record.put_slice(&body);
        let stored: Result<(), _> = redis::cmd("SET")
            .arg(&key)
            .arg(&record[..])
            .arg("PX")
            .arg(86_400_000)
            .query_async(&mut redis)
            .await;
        if stored.is_err() {
            return status(StatusCode::SERVICE_UNAVAILABLE);
        }
        Response::from_parts(head, Either::Right(Full::new(body)))
    }
}

/// The answer a completed value holds (two bytes of status, then the body); `None` for
/// a key in flight.
fn replayed(value: &[u8]) -> Option<Answer> {
    let (code, body) = value.split_first_chunk::<2>()?;
    let code = StatusCode::from_u16(u16::from_be_bytes(*code)).ok()?;
    let mut resp = Response::new(Either::Right(Full::new(Bytes::copy_from_slice(body))));
    *resp.status_mut() = code;
    Some(resp)
}

fn status(code: StatusCode) -> Answer {
    let mut resp = Response::new(Either::Right(Full::new(Bytes::new())));
    *resp.status_mut() = code;
    resp
}
