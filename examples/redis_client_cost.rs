//! What one Redis command costs the *client*, two ways, for `bench/redis_client_cost.py`
//! (which runs this under callgrind and prints instructions per command):
//!
//! - `multiplexed`: redis-rs's `ConnectionManager`, as idem's store uses it — the command
//!   goes through the multiplexer's channel to its driver task, which writes it, reads
//!   and parses the reply, and completes the caller's oneshot;
//! - `multiplexed-plain`: the same multiplexed connection without the manager's
//!   reconnecting wrapper (what the wrapper itself costs);
//! - `direct`: one socket driven by the caller's own task, with redis-rs's own pieces
//!   (`Cmd::write_packed_command` and the `ValueCodec` reply parser): no channel, no
//!   second task — what a connection-per-worker client would cost.
//!
//! ```sh
//! cargo build --release --example redis_client_cost
//! target/release/examples/redis_client_cost redis://127.0.0.1:6379/ direct 10000
//! ```
//!
//! Each command is a `SET key <record> PX 60000` of a 300-byte value (the size of a
//! reservation), one at a time on a current-thread runtime, as an idem worker sends them.

use std::process::ExitCode;

use bytes::BytesMut;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Value, ValueCodec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

const VALUE_BYTES: usize = 300;

/// idem's allocator, so that allocations cost what they cost in idem.
#[global_allocator]
static ALLOCATOR: idem_alloc::Allocator = idem_alloc::Allocator;

fn command(i: usize, value: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(format!("bench:client:{i}"))
        .arg(value)
        .arg("PX")
        .arg(60_000);
    cmd
}

async fn multiplexed(url: &str, n: usize) -> redis::RedisResult<()> {
    // As idem's store configures it (src/store/redis/conn.rs): operations are bounded
    // outside, so no response timer inside the multiplexer.
    let config = ConnectionManagerConfig::new().set_response_timeout(None);
    let conn = ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?;
    send_all(conn, n).await
}

async fn multiplexed_plain(url: &str, n: usize) -> redis::RedisResult<()> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let client = redis::Client::open(url)?;
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    send_all(conn, n).await
}

/// The `n` commands, one at a time, through one of redis-rs's connections.
async fn send_all(mut conn: impl ConnectionLike, n: usize) -> redis::RedisResult<()> {
    let value = vec![b'x'; VALUE_BYTES];
    for i in 0..n {
        let reply: Value = command(i, &value).query_async(&mut conn).await?;
        expect_ok(&reply)?;
    }
    Ok(())
}

async fn direct(url: &str, n: usize) -> redis::RedisResult<()> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
        return Err((redis::ErrorKind::InvalidClientConfig, "plain tcp only").into());
    };
    let mut socket = TcpStream::connect((host.as_str(), *port)).await?;
    socket.set_nodelay(true)?;
    let mut codec = ValueCodec::default();
    let (mut out, mut input) = (Vec::with_capacity(512), BytesMut::with_capacity(4096));
    let value = vec![b'x'; VALUE_BYTES];
    for i in 0..n {
        out.clear();
        command(i, &value).write_packed_command(&mut out);
        socket.write_all(&out).await?;
        let reply = loop {
            if let Some(reply) = codec.decode(&mut input)? {
                break reply;
            }
            if socket.read_buf(&mut input).await? == 0 {
                return Err((redis::ErrorKind::Io, "redis closed the connection").into());
            }
        };
        expect_ok(&reply)?;
    }
    Ok(())
}

fn expect_ok(reply: &Value) -> redis::RedisResult<()> {
    match reply {
        Value::Okay => Ok(()),
        other => Err((
            redis::ErrorKind::Client,
            "unexpected reply",
            format!("{other:?}"),
        )
            .into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(mode), Some(Ok(n))) = (
        args.get(1),
        args.get(2),
        args.get(3).map(|n| n.parse::<usize>()),
    ) else {
        eprintln!(
            "usage: redis_client_cost <redis-url> multiplexed|multiplexed-plain|direct <commands>"
        );
        return ExitCode::from(64);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let done = runtime.block_on(async {
        match mode.as_str() {
            "multiplexed" => multiplexed(url, n).await,
            "direct" => direct(url, n).await,
            "multiplexed-plain" => multiplexed_plain(url, n).await,
            _ => Err((redis::ErrorKind::InvalidClientConfig, "unknown mode").into()),
        }
    });
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{mode}: {e}");
            ExitCode::FAILURE
        }
    }
}
