//! Listing in-progress records for operators (SPEC §1 "Unknown outcomes"): `SCAN` the
//! keyspace under the prefix on every master; for each batch one read-only script
//! checks every record's state byte on the server (`GETRANGE key 0 0`) and returns only
//! the in-progress ones, so completed records — nearly all of them, and the ones
//! carrying bodies — never travel, and the batch costs idem one command, not one per key.
//!
//! Cluster: `CLUSTER SHARDS` names the shards; each is scanned through one of its slots,
//! routed to that slot's master by the client's own slot map, so the configured
//! credentials and TLS apply and no announced address needs translating.
//!
//! Cost: O(records under the prefix) per call, in batches of [`BATCH`], each command
//! bounded by `op_timeout`. An admin operation, never on the request path. Names under
//! the prefix that are not record keys (another program's, a `TYPE` other than string)
//! are skipped.
//!
//! Also the admin's view of one key: its record with its remaining life (`PTTL`).

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{FromRedisValue, Value};

use super::conn::Link;
use super::RedisStore;
use crate::key::StoreKey;
use crate::store::listing::Soonest;
use crate::store::record::{decode, decode_owned};
use crate::store::{Record, StoreError};

/// Keys asked for per `SCAN` step (a hint to Redis), and so records read per batch.
const BATCH: usize = 500;

/// The in-progress records among the names in `ARGV` (all of one node), as name, value
/// pairs. Undeclared keys: they are the node's own (from its `SCAN`), in many slots.
const IN_PROGRESS: &str = "#!lua flags=no-writes,allow-cross-slot-keys
local out = {}
for _, name in ipairs(ARGV) do
  if redis.call('GETRANGE', name, 0, 0) == 'P' then
    local value = redis.call('GET', name)
    if value then
      out[#out + 1] = name
      out[#out + 1] = value
    end
  end
end
return out";

impl RedisStore {
    /// `GET` and `PTTL` in one pipeline (one key, so one node on a Cluster).
    pub async fn get_with_life(
        &self,
        key: &StoreKey,
    ) -> Result<Option<(Record, Duration)>, StoreError> {
        let mut link = self.conn.link();
        let store_key = self.layout.store_key(key);
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(&store_key[..]);
        pipe.cmd("PTTL").arg(&store_key[..]);
        let (bytes, pttl): (Option<Vec<u8>>, i64) = self
            .bounded(&self.conn, pipe.query_async(&mut link))
            .await?;
        let life = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
        bytes
            .map(|b| decode_owned(b.into()).map(|record| (record, life)))
            .transpose()
    }

    pub async fn list_in_progress(
        &self,
        limit: usize,
    ) -> Result<Vec<(StoreKey, Record)>, StoreError> {
        let link = self.conn.link();
        let nodes: Vec<Option<u16>> = match &link {
            Link::Cluster(cluster) => {
                let slots = self.shard_slots(cluster.clone()).await?;
                slots.into_iter().map(Some).collect()
            }
            _ => vec![None],
        };
        let mut soonest = Soonest::new(limit);
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let (next, names) = self.scan(&link, node, cursor).await?;
                // Names are parsed only for the few records the script returns: parsing
                // every scanned name was most of idem's cost per record here.
                for (key, record) in self.read_in_progress(&link, node, &names).await? {
                    soonest.push(key, record);
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(soonest.finish())
    }

    /// One `SCAN` step on the node of `slot` (cluster) or the one server.
    async fn scan(
        &self,
        link: &Link,
        slot: Option<u16>,
        cursor: u64,
    ) -> Result<(u64, Vec<Vec<u8>>), StoreError> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(self.layout.scan_pattern())
            .arg("COUNT")
            .arg(BATCH)
            .arg("TYPE")
            .arg("string");
        let reply = self.on_node(link, slot, cmd).await?;
        <(u64, Vec<Vec<u8>>)>::from_redis_value(reply)
            .map_err(|e| StoreError::Unavailable(format!("unexpected SCAN reply: {e}")))
    }

    /// The in-progress records among `names` (all on the node of `slot`; a name that
    /// is not a record key is skipped), in one round
    /// trip: a read-only script checks each record's state byte on the server and
    /// returns only the in-progress ones, so neither the completed records nor one
    /// command per key ever travel (a command costs idem thousands of instructions).
    async fn read_in_progress(
        &self,
        link: &Link,
        slot: Option<u16>,
        names: &[Vec<u8>],
    ) -> Result<Vec<(StoreKey, Record)>, StoreError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(IN_PROGRESS).arg(0);
        for name in names {
            cmd.arg(&name[..]);
        }
        let reply = self.on_node(link, slot, cmd).await?;
        let found = <Vec<Vec<u8>>>::from_redis_value(reply)
            .map_err(|e| StoreError::Unavailable(format!("unexpected listing reply: {e}")))?;
        let mut records = Vec::with_capacity(found.len() / 2);
        for pair in found.chunks_exact(2) {
            let (name, bytes) = (&pair[0], &pair[1]);
            let Some(key) = self.layout.parse_store_key(name) else {
                continue;
            };
            match decode(bytes) {
                Ok(record) => records.push((key, record)),
                Err(e) => tracing::warn!(key = %String::from_utf8_lossy(name), error = %e,
                    "skipping an unreadable record while listing"),
            }
        }
        Ok(records)
    }

    /// Send `cmd` to the node of `slot` (cluster) or the one server.
    async fn on_node(
        &self,
        link: &Link,
        slot: Option<u16>,
        cmd: redis::Cmd,
    ) -> Result<Value, StoreError> {
        match (link, slot) {
            (Link::Cluster(cluster), Some(slot)) => {
                let mut cluster = cluster.clone();
                let route = Route::new(slot, SlotAddr::Master);
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                self.bounded(&self.conn, cluster.route_command(cmd, to))
                    .await
            }
            _ => {
                let mut link = link.clone();
                self.bounded(&self.conn, cmd.query_async::<Value>(&mut link))
                    .await
            }
        }
    }

    /// One slot of every shard that serves any, from `CLUSTER SHARDS` (Redis ≥ 7).
    async fn shard_slots(&self, mut cluster: ClusterConnection) -> Result<Vec<u16>, StoreError> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SHARDS");
        let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let reply = self
            .bounded(&self.conn, cluster.route_command(cmd, to))
            .await?;
        let slots = first_slots(&reply);
        if slots.is_empty() {
            return Err(StoreError::Unavailable(
                "CLUSTER SHARDS named no shard serving slots".to_owned(),
            ));
        }
        Ok(slots)
    }
}

/// The first slot of each shard's `slots` ranges. Each shard is a RESP3 map or a RESP2
/// array of alternating field names and values.
fn first_slots(reply: &Value) -> Vec<u16> {
    let Value::Array(shards) = reply else {
        return Vec::new();
    };
    let first = |shard: &Value| {
        let (_, slots) = fields(shard).into_iter().find(|(n, _)| *n == b"slots")?;
        match slots {
            Value::Array(bounds) => match bounds.first()? {
                Value::Int(slot) => u16::try_from(*slot).ok(),
                _ => None,
            },
            _ => None,
        }
    };
    shards.iter().filter_map(first).collect()
}

fn name(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn fields(value: &Value) -> Vec<(&[u8], &Value)> {
    match value {
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((name(k)?, v)))
            .collect(),
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|p| Some((name(&p[0])?, &p[1])))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn one_slot_per_shard_in_either_protocol() {
        let resp2 = Value::Array(vec![
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![Value::Int(0), Value::Int(5460)]),
                bulk("nodes"),
                Value::Array(vec![]),
            ]),
            Value::Array(vec![bulk("slots"), Value::Array(vec![])]),
        ]);
        assert_eq!(first_slots(&resp2), vec![0]);
        let resp3 = Value::Array(vec![Value::Map(vec![(
            bulk("slots"),
            Value::Array(vec![Value::Int(5461), Value::Int(10922)]),
        )])]);
        assert_eq!(first_slots(&resp3), vec![5461]);
    }
}
