//! Listing and counting the records that are not completed, for operators (SPEC §1
//! "Unknown outcomes"), from the **open index** the scripts keep beside the records
//! (`scripts.rs` `INDEX`): a sorted set of every record in progress, scored by its
//! lease's end. The cost is proportional to the unsettled intents, never to the
//! completed records, however many the store holds (docs/benchmarks.md, "Listing").
//!
//! One read-only pass per index (one index, or 256 in cluster mode, one per hash-tag
//! bucket, each in its records' slot): a script takes the members in score order,
//! reads their records and drops the members whose record is gone (its retention
//! ended while in progress) or completed (by a release before the index existed).
//!
//! Records written by a release before the index are indexed by
//! [`RedisStore::index_existing`], one `SCAN` when a replica starts.

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use std::sync::LazyLock;

use redis::{FromRedisValue, Value};

use super::conn::Link;
use super::scripts::{FIELD, INDEX};
use super::RedisStore;
use crate::store::listing::Soonest;
use crate::store::record::decode;
use crate::store::{Record, StoreError};
use crate::store_key::StoreKey;

/// Keys asked for per `SCAN` step of the one-time indexing (a hint to Redis).
const BATCH: usize = 500;

/// `KEYS[1]` an open index; `ARGV[1]` at most this many (`-1`: all) of the leases
/// ending first, and as many of those settled as not executed. Returns member, record pairs. Members
/// whose record is gone or completed leave the index.
const LIST: &str = r"
local open = KEYS[1]
local base = string.sub(open, 1, #open - 4)
local limit = ARGV[1]
local out = {}
local function take(members)
  for _, member in ipairs(members) do
    local value = redis.call('GET', base .. member)
    if value and string.sub(value, 1, 1) == 'P' then
      out[#out + 1] = member
      out[#out + 1] = value
    else
      redis.call('ZREM', open, member)
    end
  end
end
take(redis.call('ZRANGE', open, 0, '+inf', 'BYSCORE', 'LIMIT', 0, limit))
take(redis.call('ZRANGE', open, '-inf', '(0', 'BYSCORE', 'LIMIT', 0, limit))
return out";

/// Indexes the records not completed among the names in `ARGV` (all of one node, in
/// many slots), with the scripts' own `index` (`scripts.rs`); returns how many.
static INDEX_EXISTING: LazyLock<String> = LazyLock::new(|| {
    format!(
        "#!lua flags=allow-cross-slot-keys\n{FIELD}{INDEX}
local indexed = 0
for _, name in ipairs(ARGV) do
  local value = redis.call('GET', name)
  if value and string.sub(value, 1, 1) == 'P' then
    index(value, name)
    indexed = indexed + 1
  end
end
return indexed"
    )
});

impl RedisStore {
    pub async fn list_in_progress(
        &self,
        limit: usize,
    ) -> Result<Vec<(StoreKey, Record)>, StoreError> {
        let link = self.conn.link();
        // `LIMIT 0 -1`: all of them.
        let count = i64::try_from(limit).unwrap_or(-1);
        // One script per index, all at once (256 on Cluster, spread over the masters).
        let lists = self.layout.open_indexes().into_iter().map(|index| {
            let link = &link;
            async move {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(LIST).arg(1).arg(&index[..]).arg(count);
                let reply = self.on_node(link, None, cmd).await?;
                <Vec<Vec<u8>>>::from_redis_value(reply)
                    .map_err(|e| StoreError::Unavailable(format!("unexpected listing reply: {e}")))
            }
        });
        let mut soonest = Soonest::new(limit);
        for found in futures_util::future::try_join_all(lists).await? {
            for pair in found.chunks_exact(2) {
                let (member, bytes) = (&pair[0], &pair[1]);
                let Some(key) = self.layout.indexed_key(member) else {
                    continue;
                };
                match decode(bytes) {
                    Ok(record) => soonest.push(key, record),
                    Err(e) => tracing::warn!(key = %String::from_utf8_lossy(member), error = %e,
                        "skipping an unreadable record while listing"),
                }
            }
        }
        Ok(soonest.finish())
    }

    /// Keys in the database (`DBSIZE` on every master): with a database of idem's
    /// own, its records plus the open indexes (1, or one per bucket on Cluster).
    pub async fn record_count(&self) -> Result<u64, StoreError> {
        let link = self.conn.link();
        let nodes = self.masters(&link).await?;
        let mut keys = 0;
        for node in nodes {
            let reply = self.on_node(&link, node, redis::cmd("DBSIZE")).await?;
            keys += u64::from_redis_value(reply)
                .map_err(|e| StoreError::Unavailable(format!("unexpected DBSIZE reply: {e}")))?;
        }
        Ok(keys)
    }

    /// How many open index keys exist when `open` records are indexed (an estimate
    /// on Cluster, where they spread over 256 buckets).
    pub fn index_keys(&self, open: u64) -> u64 {
        open.min(self.layout.open_index_count())
    }

    /// Indexes the records a release before the open index wrote (one `SCAN` of the
    /// prefix on every master; an entry is scored from its record, as the scripts do). Run
    /// once when a replica starts; returns how many records it found not completed.
    pub async fn index_existing(&self) -> Result<u64, StoreError> {
        let link = self.conn.link();
        let nodes = self.masters(&link).await?;
        let mut indexed = 0;
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let (next, names) = self.scan(&link, node, cursor).await?;
                let names: Vec<_> = names
                    .into_iter()
                    .filter(|n| self.layout.parse_store_key(n).is_some())
                    .collect();
                if !names.is_empty() {
                    let mut cmd = redis::cmd("EVAL");
                    cmd.arg(INDEX_EXISTING.as_str()).arg(0);
                    for name in &names {
                        cmd.arg(&name[..]);
                    }
                    let reply = self.on_node(&link, node, cmd).await?;
                    indexed += u64::from_redis_value(reply).map_err(|e| {
                        StoreError::Unavailable(format!("unexpected indexing reply: {e}"))
                    })?;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(indexed)
    }

    /// One slot of each master (Cluster), or `None` for the one server.
    async fn masters(&self, link: &Link) -> Result<Vec<Option<u16>>, StoreError> {
        match link {
            Link::Cluster(cluster) => {
                let slots = self.shard_slots(cluster.clone()).await?;
                Ok(slots.into_iter().map(Some).collect())
            }
            _ => Ok(vec![None]),
        }
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

    /// Send `cmd` to the node of `slot` (cluster), or with no slot wherever the client
    /// routes it (a script: by its first key), or to the one server.
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
