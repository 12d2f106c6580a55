//! The text `idem check` prints: where traffic goes, one row per route, then warnings.
//!
//! Durations are written the way a file would (`30s`, `1h30m`), and key alternatives one
//! per line in order of preference, so the operator sees exactly which identity each
//! route derives and what happens to a duplicate.

use super::{Config, OnConcurrent, RedisMode, RoutePolicy, StoreBackend};
use crate::units::format_duration;

const HEADERS: [&str; 11] = [
    "ROUTE",
    "METHODS",
    "PATH",
    "KEY",
    "LEASE",
    "RETENTION",
    "ON_CONCURRENT",
    "ON_FAILURE",
    "ON_AMBIGUOUS",
    "ON_UNKNOWN",
    "UPSTREAM_KEY_WINDOW",
];

impl Config {
    /// The store in a few words: for Redis the mode and where, never the credentials.
    fn store_summary(&self) -> String {
        let mut out = self.backend_summary();
        if let Some(encryption) = &self.store.encryption {
            // Key ids only: the configuration holds no key material.
            let ids: Vec<&str> = encryption.keys.iter().map(|(id, _)| id.as_str()).collect();
            out.push_str(&format!(" sealed (keys: {})", ids.join(", ")));
            if encryption.credential_key_file.is_some() {
                out.push_str(", credential hashes keyed");
            }
        }
        out
    }

    fn backend_summary(&self) -> String {
        let StoreBackend::Redis(r) = &self.store.backend else {
            return self.store.backend_name().to_string();
        };
        let mut out = match &r.mode {
            RedisMode::Standalone { url } => format!("redis {}", redis_address(url)),
            RedisMode::Cluster { nodes } => format!("redis cluster ({} seed nodes)", nodes.len()),
            RedisMode::Sentinel {
                sentinels, master, ..
            } => format!("redis sentinel {master:?} ({} sentinels)", sentinels.len()),
        };
        if r.wait_replicas > 0 {
            out.push_str(&format!(" wait_replicas {}", r.wait_replicas));
        }
        out
    }

    /// The route table and warnings, as `idem check` prints them.
    pub fn route_table(&self) -> String {
        let upstream = match self.upstream.url.authority() {
            Some(authority) => {
                format!(
                    "{}://{authority}",
                    self.upstream.url.scheme_str().unwrap_or("http")
                )
            }
            None => self.upstream.url.to_string(),
        };
        let mut out = format!(
            "listen {}  ->  upstream {upstream}\nadmin {}  store {}  unmatched requests: {}\n\n",
            self.listen,
            self.admin.listen,
            self.store_summary(),
            self.default
        );
        let mut rows = vec![HEADERS.iter().map(|h| vec![h.to_string()]).collect()];
        rows.extend(self.routes.iter().map(|r| row(r)));
        out.push_str(&render(&rows));
        let routes = plural(self.routes.len(), "route");
        let warnings = plural(self.warnings.len(), "warning");
        out.push_str(&format!("\n{routes}, {warnings}\n"));
        for warning in &self.warnings {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// One route as cells; a cell may span several lines.
fn row(r: &RoutePolicy) -> Vec<Vec<String>> {
    let methods: Vec<&str> = r.methods.iter().map(|m| m.as_str()).collect();
    let mut key: Vec<String> = r.key.iter().map(|k| k.as_str().to_string()).collect();
    if !r.require_key {
        key.push("(none: forwarded unprotected)".to_string());
    }
    let on_concurrent = match r.on_concurrent {
        OnConcurrent::Wait => format!("wait {}", format_duration(r.wait_timeout)),
        OnConcurrent::Conflict => "conflict".to_string(),
    };
    let mut path = vec![r.path.as_str().to_string()];
    if let Some(mcp) = &r.mcp {
        path.push(format!("(MCP tools/call: {})", mcp.tools.join(", ")));
    }
    vec![
        vec![r.name.clone()],
        vec![methods.join(",")],
        path,
        key,
        vec![format_duration(r.lease)],
        vec![format_duration(r.retention)],
        vec![on_concurrent],
        vec![r.on_failure.to_string()],
        vec![r.on_ambiguous.to_string()],
        vec![r.on_unknown.to_string()],
        // No window: `retry` forwards again whenever the lease has ended.
        vec![r
            .upstream_key_window
            .map_or("-".to_string(), format_duration)],
    ]
}

/// Left-aligned columns two spaces apart; trailing spaces trimmed.
fn render(rows: &[Vec<Vec<String>>]) -> String {
    let columns = HEADERS.len();
    let mut widths = vec![0; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let longest = cell.iter().map(|l| l.chars().count()).max().unwrap_or(0);
            widths[i] = widths[i].max(longest);
        }
    }
    let mut out = String::new();
    for row in rows {
        let height = row.iter().map(Vec::len).max().unwrap_or(1);
        for line in 0..height {
            let mut text = String::new();
            for (i, cell) in row.iter().enumerate() {
                let part = cell.get(line).map_or("", String::as_str);
                text.push_str(&format!("{part:<width$}  ", width = widths[i]));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
    }
    out
}

/// `host:port` of a Redis URL (with ` TLS` for `rediss://`), without user or password.
fn redis_address(url: &str) -> String {
    use redis::{ConnectionAddr, IntoConnectionInfo};
    match url.into_connection_info().map(|i| i.addr().clone()) {
        Ok(ConnectionAddr::Tcp(host, port)) => format!("{host}:{port}"),
        Ok(ConnectionAddr::TcpTls { host, port, .. }) => format!("{host}:{port} TLS"),
        Ok(other) => other.to_string(),
        Err(_) => "(invalid url)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_cells_span_lines() {
        let rows = vec![
            vec![vec!["A".to_string()], vec!["B".to_string()]],
            vec![
                vec!["long".to_string()],
                vec!["x".to_string(), "y".to_string()],
            ],
        ];
        let mut rows: Vec<Vec<Vec<String>>> = rows;
        for row in &mut rows {
            row.resize(HEADERS.len(), vec![String::new()]);
        }
        assert_eq!(render(&rows), "A     B\nlong  x\n      y\n");
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "route"), "1 route");
        assert_eq!(plural(0, "warning"), "0 warnings");
    }
}
