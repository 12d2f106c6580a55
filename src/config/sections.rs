//! The process-wide sections: `listen`, `server`, `admin`, `upstream`, `store`.
//!
//! Each starts from its built-in default and overwrites what the file sets, so an absent
//! section or field simply keeps the default. Only `upstream.url` is required.

use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use redis::IntoConnectionInfo;

use super::error::Pos;
use super::walk::{At, Fields, Walker};
use super::yaml::Node;
use super::UpstreamConfig;
use super::{
    defaults, AdminConfig, BackendName, EncryptionConfig, KeyPlaces, PostgresConfig, RedisConfig,
    RedisMode, RedisModeName, ServerConfig, StoreBackend, StoreConfig,
};

/// Parse an `IP:port` listen address.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("invalid address {text:?}; expected IP:port, e.g. 0.0.0.0:8080 or [::1]:8080")
    })
}

/// Validate an upstream URL: `http` or `https`, a host, and nothing after the authority.
///
/// The result always carries an explicit port (80/443 by scheme) and path `/`, so the
/// pipeline can use its authority as is. Shared by the file and `--upstream`.
pub fn parse_upstream_url(text: &str) -> Result<Uri, String> {
    let text = text.trim();
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("invalid URL {text:?}: {e}; expected e.g. http://127.0.0.1:3000"))?;
    let default_port = match uri.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        _ => {
            return Err(format!(
                "invalid URL {text:?}: the scheme must be http or https"
            ))
        }
    };
    let Some(authority) = uri.authority() else {
        return Err(format!("invalid URL {text:?}: it has no host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "invalid URL {text:?}: credentials in the URL are not supported; the caller's \
             headers are forwarded as they are"
        ));
    }
    if authority.host().is_empty() {
        return Err(format!("invalid URL {text:?}: it has no host"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "invalid URL {text:?}: a path or query is not supported; requests keep their own \
             path, so give only scheme, host and port"
        ));
    }
    let port = match authority.port_u16() {
        Some(0) => return Err(format!("invalid URL {text:?}: port 0")),
        Some(port) => port,
        None => default_port,
    };
    Uri::builder()
        .scheme(uri.scheme_str().unwrap_or("http"))
        .authority(format!("{}:{port}", authority.host()))
        .path_and_query("/")
        .build()
        .map_err(|e| format!("invalid URL {text:?}: {e}"))
}

/// Report a zero duration or count where zero would disable the feature by accident.
pub(crate) fn nonzero<T: PartialEq + Default>(w: &mut Walker<'_>, at: Option<At<T>>) -> Option<T> {
    let at = at?;
    if at.value == T::default() {
        w.error(at.pos, &at.path, "must be greater than 0");
        return None;
    }
    Some(at.value)
}

fn set<T>(target: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *target = value;
    }
}

pub(crate) fn server(w: &mut Walker<'_>, node: Option<&Node>) -> ServerConfig {
    let mut cfg = ServerConfig::default();
    let Some(node) = node else { return cfg };
    let f = w.fields(node, "server");
    let header_read_timeout = w.duration(&f, "header_read_timeout");
    set(
        &mut cfg.header_read_timeout,
        nonzero(w, header_read_timeout),
    );
    let max_header_bytes = w.size(&f, "max_header_bytes");
    set(&mut cfg.max_header_bytes, nonzero(w, max_header_bytes));
    let max_connections = w.count(&f, "max_connections");
    set(&mut cfg.max_connections, nonzero(w, max_connections));
    set(
        &mut cfg.shutdown_grace,
        w.duration(&f, "shutdown_grace").map(|a| a.value),
    );
    if let Some(workers) = w.field(&f, "workers", parse_workers) {
        cfg.workers = workers.value;
    }
    set(&mut cfg.http2, w.flag(&f, "http2").map(|a| a.value));
    let streams = w.count(&f, "http2_max_streams");
    set(&mut cfg.http2_max_streams, nonzero(w, streams));
    let buffered = w.size(&f, "max_buffered_bytes");
    set(&mut cfg.max_buffered_bytes, nonzero(w, buffered));
    let body_read_timeout = w.duration(&f, "body_read_timeout");
    cfg.body_read_timeout = nonzero(w, body_read_timeout);
    cfg
}

/// `auto` (one per usable CPU) or a whole number from 1 to 256.
pub fn parse_workers(text: &str) -> Result<Option<usize>, String> {
    match text.trim() {
        "auto" => Ok(None),
        n => match n.parse::<usize>() {
            Ok(n @ 1..=256) => Ok(Some(n)),
            _ => Err(format!(
                "invalid value {text:?}; expected auto or a whole number from 1 to 256"
            )),
        },
    }
}

pub(crate) fn admin(w: &mut Walker<'_>, node: Option<&Node>) -> AdminConfig {
    let mut cfg = AdminConfig::default();
    let Some(node) = node else { return cfg };
    let f = w.fields(node, "admin");
    set(
        &mut cfg.listen,
        w.field(&f, "listen", parse_listen).map(|a| a.value),
    );
    // `${IDEM_ADMIN_TOKEN:-}` with the variable unset gives "": no token.
    cfg.token = w
        .string(&f, "token")
        .map(|a| a.value)
        .filter(|t| !t.is_empty());
    if let Some(list) = f.get("allowed_hosts") {
        for (item_path, item) in w.list(list, &f.path("allowed_hosts")) {
            let host = w.parsed(item, &item_path, allowed_host);
            cfg.allowed_hosts.extend(host.map(|h| h.value));
        }
    }
    cfg
}

/// One `admin.allowed_hosts` entry: a DNS name as a browser sends it in `Host`, without
/// a port (any port of that name is accepted), lowercase.
pub fn allowed_host(text: &str) -> Result<String, String> {
    let host = text.trim().to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.contains('*') {
        return Err(format!(
            "invalid host {text:?}: no wildcards; list each name the admin listener is \
             reached by"
        ));
    }
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "invalid host {text:?}: a DNS name without scheme or port, e.g. \
             idem-admin.internal (localhost, names under .localhost and IP literals are always \
             accepted)"
        ));
    }
    Ok(host)
}

/// `None` when the section or its URL is missing or invalid (already reported).
pub(crate) fn upstream(
    w: &mut Walker<'_>,
    node: Option<&Node>,
    root: &Fields<'_>,
) -> Option<UpstreamConfig> {
    let Some(node) = node else {
        let message = "missing: idem needs the tool API it protects, e.g. `upstream: {url: http://127.0.0.1:3000}`";
        w.error(root.pos(), "upstream", message);
        return None;
    };
    let f = w.fields(node, "upstream");
    let url = w.field(&f, "url", parse_upstream_url);
    if url.is_none() && f.get("url").is_none() {
        w.error(
            node.pos,
            "upstream.url",
            "missing: e.g. `url: http://127.0.0.1:3000`",
        );
    }
    let connect_timeout = w.duration(&f, "connect_timeout");
    let connect_timeout = nonzero(w, connect_timeout);
    let timeout = w.duration(&f, "timeout");
    let timeout = nonzero(w, timeout);
    let mut cfg = UpstreamConfig::new(url?.value);
    set(&mut cfg.connect_timeout, connect_timeout);
    set(&mut cfg.timeout, timeout);
    Some(cfg)
}

pub(crate) fn store(w: &mut Walker<'_>, node: Option<&Node>) -> StoreConfig {
    let mut cfg = StoreConfig::default();
    let Some(node) = node else { return cfg };
    let f = w.fields(node, "store");
    if let Some(memory) = f.get("memory") {
        let f = w.fields(memory, "store.memory");
        if let Some(max) = w.count::<usize>(&f, "max_records") {
            match max.value {
                0 => w.error(max.pos, &max.path, "max_records must be at least 1"),
                n => cfg.memory_max_records = n,
            }
        }
        let bytes = w.size(&f, "max_bytes");
        set(&mut cfg.memory_max_bytes, nonzero(w, bytes));
    }
    if let Some(enc) = f.get("encryption") {
        cfg.encryption = encryption(w, enc);
    }
    let mut backend = BackendName::Memory;
    set(&mut backend, w.choice(&f, "backend").map(|a| a.value));
    set(&mut cfg.on_error, w.choice(&f, "on_error").map(|a| a.value));
    // A section of another backend is still checked for its shape (a typo is an error)
    // but its values are not used.
    let redis = f
        .get("redis")
        .map(|n| redis(w, n, backend == BackendName::Redis));
    let pg = f
        .get("postgres")
        .map(|n| postgres(w, n, backend == BackendName::Postgres));
    cfg.backend = match backend {
        BackendName::Memory => StoreBackend::Memory,
        BackendName::Redis => StoreBackend::Redis(redis.unwrap_or_default()),
        BackendName::Postgres => StoreBackend::Postgres(pg.unwrap_or_default()),
    };
    cfg
}

/// `store.encryption: {keys: [{id, file}, ...], credential_key_file}`: ids, paths and
/// where each is named. The files are read by the store's sealing layer alone
/// (`store/sealing.rs`), once when idem starts, checks (`idem check`) or reloads, and
/// its errors are prefixed with those places (an unreadable or malformed key file is
/// reported at its entry; its content never is).
fn encryption(w: &mut Walker<'_>, node: &Node) -> Option<EncryptionConfig> {
    let f = w.fields(node, "store.encryption");
    // Optional: keys the credential hash (`seal/credential_key.rs` says why a key of its
    // own). Read first, so that it is a field of this map whatever else is wrong.
    let credential_key_file = w.string(&f, "credential_key_file");
    let accept_unsealed_until = w.field(&f, "accept_unsealed_until", parse_rfc3339_ms);
    if let Some(until) = &accept_unsealed_until {
        warn_far_ahead(w, until.pos, &until.path, until.value);
    }
    let Some(list) = f.get("keys") else {
        w.error(
            node.pos,
            "store.encryption.keys",
            "list at least one key: {id: \"2026-12\", file: /etc/idem/keys/2026-12}",
        );
        return None;
    };
    let mut keys: Vec<(String, std::path::PathBuf)> = Vec::new();
    let mut places = KeyPlaces::default();
    let mut ok = true;
    for (path, item) in w.list(list, "store.encryption.keys") {
        let k = w.fields(item, &path);
        let id = w.string(&k, "id");
        let file = w.string(&k, "file");
        let (Some(id), Some(file)) = (id, file) else {
            w.error(item.pos, &path, "each key needs an id and a file");
            ok = false;
            continue;
        };
        if keys.iter().any(|(seen, _)| *seen == id.value) {
            w.error(id.pos, &id.path, format!("duplicate key id {:?}", id.value));
            ok = false;
            continue;
        }
        places.keys.push(format!("{}: {}", file.pos, file.path));
        keys.push((id.value, file.value.into()));
    }
    if !ok {
        return None;
    }
    if let Some(file) = &credential_key_file {
        places.credential_key_file = Some(format!("{}: {}", file.pos, file.path));
    }
    Some(EncryptionConfig {
        keys,
        credential_key_file: credential_key_file.map(|f| f.value.into()),
        accept_unsealed_until_ms: accept_unsealed_until.map(|a| a.value),
        places,
    })
}

/// `accept_unsealed_until` a day or more ahead: until then a record in clear that a store
/// writer plants now is replayed (issue 46 §1), which is the protection switched off.
/// The procedure sets it a little after the rollout that turns encryption on.
fn warn_far_ahead(w: &mut Walker<'_>, pos: Pos, path: &str, until_ms: u64) {
    const DAY_MS: u64 = 24 * 60 * 60 * 1000;
    if until_ms > crate::store::record::now_ms().saturating_add(DAY_MS) {
        w.warn(
            pos,
            path,
            "dated a day or more ahead: until then a record in clear, which any store writer can \
             plant, is replayed as it is; set it a little after the rollout that turns \
             encryption on, and remove it once `retention` has passed",
        );
    }
}

/// An RFC 3339 time in UTC (`2026-12-06T22:00:00Z`), as unix milliseconds.
pub fn parse_rfc3339_ms(text: &str) -> Result<u64, String> {
    let at = humantime::parse_rfc3339_weak(text.trim()).map_err(|e| {
        format!("invalid time {text:?} ({e}); expected RFC 3339 in UTC, e.g. 2026-12-06T22:00:00Z")
    })?;
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("invalid time {text:?}: before 1970"))?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

fn postgres(w: &mut Walker<'_>, node: &Node, in_use: bool) -> PostgresConfig {
    let mut cfg = PostgresConfig::default();
    let f = w.fields(node, "store.postgres");
    // Checked by the same parser connecting uses, only when PostgreSQL is the backend.
    let check = |text: &str| -> Result<String, String> {
        if in_use {
            crate::store::postgres::Target::parse(text).map_err(|e| {
                format!("{e}; expected postgres://user:password@host:port[,host2:port]/db?sslmode=require")
            })?;
        }
        Ok(text.to_string())
    };
    set(&mut cfg.url, w.field(&f, "url", check).map(|a| a.value));
    let table = |text: &str| -> Result<String, String> {
        crate::store::postgres::check_table_name(text).map(|()| text.to_string())
    };
    set(&mut cfg.table, w.field(&f, "table", table).map(|a| a.value));
    let pool_size: Option<At<usize>> = w.count(&f, "pool_size");
    set(&mut cfg.pool_size, nonzero(w, pool_size));
    let op_timeout: Option<At<Duration>> = w.duration(&f, "op_timeout");
    set(&mut cfg.op_timeout, nonzero(w, op_timeout));
    cfg
}

fn redis(w: &mut Walker<'_>, node: &Node, in_use: bool) -> RedisConfig {
    let mut cfg = RedisConfig::default();
    let f = w.fields(node, "store.redis");
    // URLs are checked by the Redis client's own parser (so `idem check` agrees with what
    // connecting will do), but only when Redis is the backend: a memory deployment may
    // carry an unused Redis section.
    let check = |text: &str| -> Result<String, String> {
        if in_use {
            text.into_connection_info()
                .map_err(|e| format!("invalid Redis URL: {e}; expected redis://[user:password@]host:port/db or rediss://…"))?;
        }
        Ok(text.to_string())
    };
    let mut url = defaults::REDIS_URL.to_string();
    set(&mut url, w.field(&f, "url", check).map(|a| a.value));
    let mode = w.choice(&f, "mode");
    let mut mode_name = RedisModeName::Standalone;
    set(&mut mode_name, mode.as_ref().map(|a| a.value));
    let mut nodes = Vec::new();
    if let Some(list) = f.get("nodes") {
        for (path, item) in w.list(list, "store.redis.nodes") {
            if let Some(url) = w.parsed(item, &path, check) {
                nodes.push(url.value);
            }
        }
    }
    let mut master = defaults::SENTINEL_MASTER.to_string();
    set(
        &mut master,
        w.string(&f, "sentinel_master").map(|a| a.value),
    );
    set(
        &mut cfg.key_prefix,
        w.string(&f, "key_prefix").map(|a| a.value),
    );
    let op_timeout: Option<At<Duration>> = w.duration(&f, "op_timeout");
    set(&mut cfg.op_timeout, nonzero(w, op_timeout));
    set(
        &mut cfg.wait_replicas,
        w.count(&f, "wait_replicas").map(|a| a.value),
    );
    set(
        &mut cfg.allow_eviction,
        w.flag(&f, "allow_eviction").map(|a| a.value),
    );
    if let Some(tls) = f.get("tls") {
        let t = w.fields(tls, "store.redis.tls");
        if let Some(ca) = w.string(&t, "ca_file").filter(|a| !a.value.is_empty()) {
            cfg.tls_ca_file = Some(ca.value.into());
        }
    }
    let prefix = &cfg.key_prefix;
    let cluster = mode_name == RedisModeName::Cluster;
    if in_use && cluster && (prefix.contains('{') || prefix.contains('}')) {
        w.error(
            node.pos,
            "store.redis.key_prefix",
            "in cluster mode the key prefix must not contain `{` or `}`: idem adds its own \
             hash tag so that a record and its wake-up channel share one slot",
        );
    }
    if in_use && mode_name != RedisModeName::Standalone && nodes.is_empty() {
        let what = match mode_name {
            RedisModeName::Cluster => "cluster mode needs its seed nodes",
            _ => "sentinel mode needs the sentinels' addresses",
        };
        let pos = mode.map_or(node.pos, |m| m.pos);
        w.error(
            pos,
            "store.redis.nodes",
            format!("{what}, e.g. nodes: [\"redis://10.0.0.1:6379\"]"),
        );
    }
    cfg.mode = match mode_name {
        RedisModeName::Standalone => RedisMode::Standalone { url },
        RedisModeName::Cluster => RedisMode::Cluster { nodes },
        RedisModeName::Sentinel => RedisMode::Sentinel {
            url,
            sentinels: nodes,
            master,
        },
    };
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_url_gets_an_explicit_port() {
        let uri = parse_upstream_url("http://127.0.0.1:3000").unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:3000/");
        assert_eq!(
            parse_upstream_url("https://api.example.com")
                .unwrap()
                .to_string(),
            "https://api.example.com:443/"
        );
        assert_eq!(
            parse_upstream_url("http://[::1]").unwrap().to_string(),
            "http://[::1]:80/"
        );
        assert_eq!(
            parse_upstream_url("http://tools/").unwrap().port_u16(),
            Some(80)
        );
    }

    #[test]
    fn upstream_url_rejects_what_it_cannot_honour() {
        for (bad, why) in [
            ("ftp://x", "http or https"),
            ("127.0.0.1:3000", "http or https"),
            ("http://x/api", "path"),
            ("http://x?a=1", "path or query"),
            ("http://u:p@x", "credentials"),
            ("http://x:0", "port 0"),
            ("", "invalid URL"),
            ("http://", "invalid URL"),
        ] {
            let e = parse_upstream_url(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("0.0.0.0:8080").unwrap().port(), 8080);
        assert!(parse_listen("[::1]:9901").is_ok());
        assert!(parse_listen("localhost:80")
            .unwrap_err()
            .contains("IP:port"));
    }
}
