//! Lua scripts for the reservation and the fenced writes: check and write in one round
//! trip, on the store's clock.
//!
//! Every lease is written and judged on **one clock, the Redis server's** (SPEC §1 "One
//! clock for every lease"): the scripts read `TIME` (allowed since scripts replicate
//! their effects, the only mode of Redis 7; on Cluster it is the clock of the node that
//! holds the key) and stamp the record's `expires_at_ms` (and, for a first send,
//! `sent_at_ms`) in place of the proxy's estimate, so neither a proxy's skewed clock nor
//! a step of it can end a live lease.
//!
//! A record's bytes 2..=33 (Lua's 1-based `string.sub`) are its fencing token in hex
//! (see `store::record`), so ownership is checked without parsing JSON in Lua. Scripts
//! run atomically on the server: no other command interleaves between the check and
//! the write, which is what a bare `SET`/`EXPIRE`/`DEL` after a `GET` cannot promise.
//!
//! The store sends `EVALSHA` and falls back to `EVAL` with the source on `NOSCRIPT`
//! (after a Redis restart, `SCRIPT FLUSH`, or on a cluster node that never ran it).
//!
//! Wake-ups are published with `PUBLISH`, or in cluster mode with `SPUBLISH` on a shard
//! channel in the record's own slot (see `keys.rs`): Redis lets a script publish only on
//! a shard channel the node serves.

use std::sync::LazyLock;

use idem_fence::{Condition, Write};
use redis::Script;

/// The scripts, for one way of publishing.
pub(super) struct Scripts {
    pub(super) reserve: Fenced,
    pub(super) replace_if_owner: Fenced,
    pub(super) take_over: Fenced,
    pub(super) renew: Fenced,
    pub(super) release_if_owner: Fenced,
    pub(super) delete: Fenced,
}

/// A script's source and its SHA-1 (for `EVALSHA`).
pub(super) struct Fenced {
    pub(super) source: String,
    pub(super) hash: String,
}

pub(super) static PLAIN: LazyLock<Scripts> = LazyLock::new(|| Scripts::with("PUBLISH"));
pub(super) static SHARDED: LazyLock<Scripts> = LazyLock::new(|| Scripts::with("SPUBLISH"));

impl Scripts {
    fn with(publish: &str) -> Scripts {
        let script = |text: &str| {
            let source = text.replace("'PUBLISH'", &format!("'{publish}'"));
            let hash = Script::new(&source).get_hash().to_string();
            Fenced { source, hash }
        };
        Scripts {
            reserve: script(&format!("{REPLAYED}{FIELD}{CLOCK}{INDEX}{RESERVE}")),
            replace_if_owner: script(&fenced(Write::ReplaceIfOwner, &REPLACE)),
            take_over: script(&fenced(Write::TakeOver, &REPLACE)),
            renew: script(&fenced(Write::Renew, &REPLACE)),
            release_if_owner: script(&fenced(Write::ReleaseIfOwner, &RELEASE)),
            delete: script(&format!("{FIELD}{INDEX}{DELETE}")),
        }
    }
}

/// What a fenced write does once its guards passed, and whether that reads the
/// server's clock (`stamp` does; a delete does not).
struct Body {
    lua: &'static str,
    reads_clock: bool,
}

/// A fenced write's script: read the record once into `current`, check each condition
/// of the write's row in `idem_fence::FENCES` (one [`guard`] each, in the table's
/// order), then `body`. The helpers come first; `CLOCK` only where a condition or the
/// body reads the server's clock.
fn fenced(write: Write, body: &Body) -> String {
    let requires = write.requires();
    let clock = body.reads_clock || requires.iter().any(|c| c.reads_clock());
    let mut source = String::from(FIELD);
    if clock {
        source.push_str(CLOCK);
    }
    source.push_str(INDEX);
    source.push_str("local current = redis.call('GET', KEYS[1])\n");
    for condition in requires {
        source.push_str(guard(*condition));
    }
    source.push_str(body.lua);
    source
}

/// How a script checks one fence condition on `current` (the stored record, or `nil`),
/// on the server's clock: `return 0` (refused) when it fails. Each is a block of its
/// own, so a row can hold any of them in any order. `ARGV[1]` is the token the writer
/// holds (or read); `ARGV[8]` a takeover's key window in ms, or `""`.
fn guard(condition: Condition) -> &'static str {
    match condition {
        // Bytes 2..=33 of a record are its token in hex (see `store::record`).
        Condition::Owner => {
            r"if not current or string.sub(current, 2, 33) ~= ARGV[1] then
  return 0
end
"
        }
        Condition::InProgress => {
            r"if not current or string.sub(current, 1, 1) ~= 'P' then
  return 0
end
"
        }
        Condition::LeaseEnded => {
            r"do
  local lease_end = lease_field(current, 'expires_at_ms')
  if not lease_end or lease_end > now() then
    return 0
  end
end
"
        }
        Condition::LeaseLive => {
            r"do
  local lease_end = lease_field(current, 'expires_at_ms')
  if not lease_end or lease_end <= now() then
    return 0
  end
end
"
        }
        Condition::WithinKeyWindow => {
            r"if ARGV[8] ~= '' then
  local sent_at = lease_field(current, 'sent_at_ms')
  if not sent_at or now() - sent_at >= tonumber(ARGV[8]) then
    return 0
  end
end
"
        }
    }
}

/// The server's clock as unix ms (`now()`, read with `TIME` once per script and only
/// when needed: a replay or a completion never asks, which saves Redis a command per
/// call), and `stamp(record, lease, sent)`: the record with `expires_at_ms` set to `now +
/// lease` (unless `lease` is `""`) and, when `sent` is `"1"`, `sent_at_ms` set to `now`,
/// and the lease's end it wrote (`nil` if none); `keep_sent(record, current)`: the record
/// with the `sent_at_ms` of the stored `current` (a write that is not a first send keeps
/// the store's, not the writer's estimate). The fields are found by `digits` (`FIELD`),
/// and the record is rebuilt once, with one concatenation, however many fields change:
/// a pattern search and a copy of the record per field were most of a script's time
/// (issue 48).
const CLOCK: &str = r#"
local clock_ms
local function now()
  if not clock_ms then
    local clock = redis.call('TIME')
    clock_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  end
  return clock_ms
end
local function splice(record, s, e, value)
  return string.sub(record, 1, s - 1) .. value .. string.sub(record, e + 1)
end
local function stamp(record, lease, sent)
  if lease == '' then
    return record, nil
  end
  local lease_end = now() + tonumber(lease)
  local until_ms = string.format('%d', lease_end)
  local es, ee = digits(record, '"expires_at_ms":')
  local ss, se
  if sent == '1' then
    ss, se = digits(record, '"sent_at_ms":')
  end
  if not ss then
    if not es then
      return record, nil
    end
    return splice(record, es, ee, until_ms), lease_end
  end
  local sent_ms = string.format('%d', now())
  if not es then
    return splice(record, ss, se, sent_ms), nil
  end
  if ss < es then
    return string.sub(record, 1, ss - 1) .. sent_ms .. string.sub(record, se + 1, es - 1)
      .. until_ms .. string.sub(record, ee + 1), lease_end
  end
  return string.sub(record, 1, es - 1) .. until_ms .. string.sub(record, ee + 1, ss - 1)
    .. sent_ms .. string.sub(record, se + 1), lease_end
end
local function keep_sent(record, current)
  local cs, ce = digits(current, '"sent_at_ms":')
  if not cs then
    return record
  end
  local s, e = digits(record, '"sent_at_ms":')
  if not s then
    return record
  end
  return splice(record, s, e, string.sub(current, cs, ce))
end
"#;

/// The reservation's first lines, before the helpers are even defined: a replay (the key
/// holds a completed record) is answered by one `GET`, without building the closures of
/// `FIELD`, `CLOCK` and `INDEX` it would not use.
const REPLAYED: &str = r"
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 1) == 'C' then
  return current
end
";

/// `SET key value NX GET PX ttl`, stamped (after `REPLAYED`, whose `current` it reads):
/// `KEYS[1]` store key; `ARGV[1]` record; `ARGV[2]` TTL in ms (the record's life);
/// `ARGV[3]` lease in ms. Returns `now` (an integer) when the key was absent and is now
/// ours; the existing record alone when it is completed (`REPLAYED`: a replay never reads
/// the clock); `{now, existing record}` when it is in progress. The two short shapes
/// matter: the client's parser costs about 1 400 instructions more for the array than
/// for one value (callgrind, replay-redis).
const RESERVE: &str = r"
if current then
  return {now(), current}
end
local record, lease_end = stamp(ARGV[1], ARGV[3], '1')
redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
index(record, KEYS[1], lease_end)
return now()
";

/// The write of `replace_if_owner`, `take_over` and `renew`, once their guards passed:
/// `KEYS[1]` store key; `ARGV[1]` owner token hex; `ARGV[2]` new record; `ARGV[3]` TTL
/// in ms; `ARGV[4]` channel to notify, or `""` for a silent write (lease renewal);
/// `ARGV[5]` message (the hex store key); `ARGV[6]` the new lease in ms, or `""` for a
/// completed record (its life is the key's TTL); `ARGV[7]` `"1"` when this is a first
/// send (`sent_at_ms` stamped, else the stored one kept: the writer's copy holds its
/// own clock's estimate, and a renewal or an ended lease under clock skew would move the
/// key window); `ARGV[8]` the key window of a takeover (see [`guard`]). Returns 1 if
/// replaced (0, from a guard, if refused).
const REPLACE: Body = Body {
    lua: r"local record, lease_end = stamp(ARGV[2], ARGV[6], ARGV[7])
if ARGV[7] ~= '1' then
  record = keep_sent(record, current)
end
redis.call('SET', KEYS[1], record, 'PX', ARGV[3])
index(record, KEYS[1], lease_end)
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 1
",
    reads_clock: true,
};

/// `digits(record, '"name":')`: the first and last byte of the number of the field `name`
/// in the record's metadata line (from byte 35, before the first newline, where every
/// string is JSON-escaped, so a key or header cannot fake a field), or `nil`.
/// `lease_field(record, name)`: that number in an in-progress record (`expires_at_ms`,
/// `sent_at_ms`), or `nil` when the record is absent, completed, or lacks it. Plain
/// `string.find` (a `memchr` and a compare in C), not a Lua pattern tried at every byte.
pub(super) const FIELD: &str = r#"
local function digits(record, needle)
  local s = string.find(record, needle, 35, true)
  if not s then
    return nil
  end
  local first = s + #needle
  local _, last = string.find(record, '^%d+', first)
  if not last then
    return nil
  end
  local eol = string.find(record, '\n', 35, true)
  if eol and eol < s then
    return nil
  end
  return first, last
end
local function lease_field(record, name)
  if not record or string.sub(record, 1, 1) ~= 'P' then
    return nil
  end
  local s, e = digits(record, '"' .. name .. '":')
  return s and tonumber(string.sub(record, s, e))
end
"#;

/// `index(record, name, lease_end)`: keeps the entry of the record under `name` (the
/// scripts' `KEYS[1]`) in the **open index** (see `keys.rs` `open_indexes`): the sorted
/// set, beside the record and in its slot, of every record not completed, scored by its
/// lease's end (negated for one resolved as not executed and waiting for its repeat), so
/// operators list and count the unsettled intents without reading the completed ones
/// (`listing.rs`, which also indexes an earlier release's records with it).
/// `lease_end`, when given, is the end `stamp` just wrote into the record (no second
/// search); `index(nil, name)` (or a completed record) removes the entry. The set's name
/// is the record key with its 64 hex digits replaced by `open`; the member is those
/// digits.
pub(super) const INDEX: &str = r#"
local function index(record, name, lease_end)
  local open = string.sub(name, 1, #name - 64) .. 'open'
  local member = string.sub(name, -64)
  if not record or string.sub(record, 1, 1) ~= 'P' then
    redis.call('ZREM', open, member)
    return
  end
  lease_end = lease_end or lease_field(record, 'expires_at_ms')
  if not lease_end then
    redis.call('ZREM', open, member)
    return
  end
  local settled = string.find(record, '"settled":"not_executed"', 35, true)
  if settled and settled < (string.find(record, '\n', 35, true) or #record) then
    lease_end = -lease_end
  end
  redis.call('ZADD', open, string.format('%d', lease_end), member)
end
"#;

/// The write of `release_if_owner`, once its guard passed: `KEYS[1]` store key;
/// `ARGV[1]` owner token hex; `ARGV[2]` channel; `ARGV[3]` message. Returns 1 if
/// deleted (and published).
const RELEASE: Body = Body {
    lua: r"redis.call('DEL', KEYS[1])
index(nil, KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
",
    reads_clock: false,
};

/// Admin delete: `KEYS[1]` store key; `ARGV[1]` channel; `ARGV[2]` message. Returns 1
/// if a record existed (and watchers were notified), else 0.
const DELETE: &str = r"
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
index(nil, KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
";
