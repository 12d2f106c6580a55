//! Building and sending commands: a record encoded straight into the command buffer,
//! fenced scripts by hash with a fallback to their source, and `WAIT` on the node that
//! holds a key.

use std::time::Duration;

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, RedisWrite, ToRedisArgs, Value};
use tokio::time::timeout;

use super::conn::Link;
use super::scripts::Fenced;
use crate::store::record::{encode_into, encoded_size_hint};
use crate::store::{Record, StoreError};

/// A record as one command argument, encoded straight into the command's buffer (no
/// intermediate copy of the stored body).
pub(super) struct Encoded<'a>(pub(super) &'a Record);

impl ToRedisArgs for Encoded<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        encode_into(self.0, &mut out.writer_for_next_arg());
    }
}

/// The most arguments a fenced script call has: `EVALSHA`, its hash, the key count, the
/// store key and the eight `ARGV` of the fenced writes (`REPLACE` in `scripts.rs`).
const MAX_ARGS: usize = 12;

/// `name`, to which the caller appends the arguments. When one of them is `carries`, the
/// buffer is sized for that record up front, so encoding into it never regrows (and
/// copies) it midway; the argument list is sized for the longest call, for the same
/// reason.
pub(super) fn command(name: &str, carries: Option<&Record>) -> Cmd {
    let bytes = 192 + carries.map_or(0, encoded_size_hint);
    let mut cmd = Cmd::with_capacity(MAX_ARGS, bytes);
    cmd.arg(name);
    cmd
}

/// Runs a fenced script as `EVALSHA <sha> 1 <store key> ARGV...`; on `NOSCRIPT` (after
/// a Redis restart or `SCRIPT FLUSH`, or a cluster node that never ran it) sends the
/// same call as `EVAL <source>`, which also caches the script on that node. Building
/// the command ourselves rather than through `ScriptInvocation` spares two copies of
/// every argument (the record included).
pub(super) async fn eval<T: FromRedisValue>(
    link: &mut Link,
    script: &Fenced,
    store_key: &[u8],
    carries: Option<&Record>,
    args: impl Fn(&mut Cmd),
) -> RedisResult<T> {
    // One call site for the send, in a loop: the future holds one `query_async` state,
    // not one per verb, and the common path stays inlined.
    let mut by_hash = true;
    loop {
        let (verb, body) = match by_hash {
            true => ("EVALSHA", &script.hash),
            false => ("EVAL", &script.source),
        };
        let mut cmd = command(verb, carries);
        cmd.arg(body.as_str()).arg(1).arg(store_key);
        args(&mut cmd);
        match cmd.query_async(link).await {
            Err(e) if by_hash && e.kind() == redis::ErrorKind::Server(NO_SCRIPT) => {
                by_hash = false;
            }
            other => return other,
        }
    }
}

const NO_SCRIPT: redis::ServerErrorKind = redis::ServerErrorKind::NoScript;

/// Milliseconds for `PX`/`WAIT`: Redis rejects `PX 0`, and a sub-millisecond TTL
/// rounds up rather than to "no expiry".
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, i64::MAX as u64)
}

/// `WAIT n op_timeout` on the node that holds `store_key`, over the link that just wrote
/// it (`WAIT` counts that connection's writes; in cluster mode it is routed to the
/// slot's master, not to a random node). Fewer acks than `n` is a store error: a
/// failover now could lose the write. On a Redis error, that error comes along so the
/// caller can check whether the master moved.
pub(super) async fn wait_for_replicas(
    link: &mut Link,
    store_key: &[u8],
    n: u32,
    op_timeout: Duration,
) -> Result<(), (StoreError, Option<RedisError>)> {
    if n == 0 {
        return Ok(());
    }
    let mut wait = redis::cmd("WAIT");
    wait.arg(n).arg(millis(op_timeout));
    let acked = async {
        let value = match link {
            Link::Cluster(cluster) => {
                let route = Route::with_key(store_key, SlotAddr::Master);
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                cluster.route_command(wait, to).await?
            }
            _ => wait.query_async::<Value>(link).await?,
        };
        Ok::<_, RedisError>(u32::from_redis_value(value)?)
    };
    // Redis answers WAIT itself after `op_timeout`; allow it that long plus one.
    let bound = op_timeout * 2;
    match timeout(bound, acked).await {
        Ok(Ok(acks)) if acks >= n => Ok(()),
        Ok(Ok(acks)) => Err((
            StoreError::Unavailable(format!(
                "only {acks} of {n} replicas acknowledged the write within {op_timeout:?} \
                 (wait_replicas)"
            )),
            None,
        )),
        Ok(Err(e)) => Err((
            StoreError::Unavailable(format!("WAIT for replicas failed: {e}")),
            Some(e),
        )),
        Err(_) => Err((StoreError::Timeout(bound), None)),
    }
}
