//! What a shared store holds, read past idem: every Redis key of every master with its
//! value whatever its type, every PostgreSQL row. For tests of what is (not) readable at
//! rest, which must first see that the record they look for is there: an empty or
//! half-read dump contains no secret either.

use ::redis::{Commands, Connection, Value};

use super::redis::RedisServer;
use super::store::Backend;

/// One stored key (`idem:<hex>` in Redis, the row's `\x…` key in PostgreSQL) and its
/// value as text (lossy: sealed bytes show as replacement characters).
#[derive(Debug)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

/// Every entry of a shared store; `None` for the memory store, which lives inside the
/// idem process.
pub fn dump(backend: &Backend) -> Option<Vec<Entry>> {
    let servers: Vec<&RedisServer> = match backend {
        Backend::Memory(_) => return None,
        Backend::Postgres(server) => return Some(rows(&server.psql(ROWS))),
        Backend::Redis(server) => vec![server],
        Backend::RedisSentinel(set) => vec![&set.servers[set.master()]],
        Backend::RedisCluster(cluster) => cluster
            .nodes
            .iter()
            .filter(|n| n.command(&["INFO", "replication"]).contains("role:master"))
            .collect(),
    };
    Some(servers.into_iter().flat_map(redis_entries).collect())
}

/// The one entry of a store key (its hex, [`idem::key::StoreKey`]'s display), however
/// the store names it (`idem:<hex>`, `idem:{<slot tag>}<hex>` on a Cluster, `\x<hex>`);
/// fails if it is absent.
#[track_caller]
pub fn entry<'a>(entries: &'a [Entry], store_key: &str) -> &'a Entry {
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    entries
        .iter()
        .find(|e| e.key.ends_with(store_key))
        .unwrap_or_else(|| panic!("{store_key} is not in the store, which holds {keys:?}"))
}

/// One line a row: its key, then the row as text and the record's bytes (its newlines
/// as spaces, so that a row stays one line).
const ROWS: &str = "SELECT string_agg('\\x' || encode(key, 'hex') || ' ' || t::text \
                    || translate(encode(t.record, 'escape'), E'\\n', ' '), E'\\n') \
                    FROM idem_records t";

fn rows(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(key, value)| Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        })
        .collect()
}

/// Every key of one server, read by its type: a key idem writes with another type
/// than the ones known here fails the test rather than being skipped.
fn redis_entries(server: &RedisServer) -> Vec<Entry> {
    let mut c: Connection = ::redis::Client::open(server.url())
        .and_then(|client| client.get_connection())
        .expect("connect to redis-server");
    let keys: Vec<String> = c.keys("*").expect("KEYS");
    let mut entries = Vec::new();
    for key in keys {
        let kind: String = ::redis::cmd("TYPE").arg(&key).query(&mut c).expect("TYPE");
        let (command, range): (&str, &[&str]) = match kind.as_str() {
            "string" => ("GET", &[]),
            "hash" => ("HGETALL", &[]),
            "set" => ("SMEMBERS", &[]),
            "zset" => ("ZRANGE", &["0", "-1", "WITHSCORES"]),
            "list" => ("LRANGE", &["0", "-1"]),
            // Expired between KEYS and TYPE.
            "none" => continue,
            other => panic!("{key}: a Redis {other} this dump cannot read"),
        };
        let read: Value = ::redis::cmd(command)
            .arg(&key)
            .arg(range)
            .query(&mut c)
            .unwrap_or_else(|e| panic!("{key} ({kind}): {e}"));
        entries.push(Entry {
            key,
            value: text(&read),
        });
    }
    entries
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::Array(items) | Value::Set(items) => {
            items.iter().map(text).collect::<Vec<_>>().join(" ")
        }
        Value::Nil => String::new(),
        other => format!("{other:?}"),
    }
}
