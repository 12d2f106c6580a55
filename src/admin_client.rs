//! The client side of `idem keys`: one request to the admin API per command, and the
//! table `idem keys unknown` prints (every cell through [`crate::terminal::escape`]).

use std::time::SystemTime;

use base64::Engine;
use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};

use crate::cli::{AdminArgs, KeyTarget, ResolveArgs};
use crate::terminal::escape;

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// `/v1/keys/{route}/{key}` plus `suffix` (e.g. `/resolve`), with `?scope=` if given.
fn key_path(args: &KeyTarget, key: &str, suffix: &str) -> Result<String, String> {
    if args.route.is_empty() {
        return Err("--route NAME is required".to_owned());
    }
    let mut path = format!("/v1/keys/{}/{}{suffix}", enc(&args.route), enc(key));
    if !args.scope.is_empty() {
        path.push_str(&format!("?scope={}", enc(&args.scope)));
    }
    Ok(path)
}

/// Send GET/DELETE `/v1/keys/{route}/{key}`; returns the status and body text.
pub async fn key_request(
    args: &KeyTarget,
    method: Method,
    key: &str,
    with_body: bool,
) -> Result<(StatusCode, String), String> {
    let mut path = key_path(args, key, "")?;
    if with_body {
        path.push_str(if path.contains('?') { "&" } else { "?" });
        path.push_str("body=true");
    }
    send(&args.admin, method, &path, None).await
}

/// `GET /v1/unknown`, narrowed to `--route` if given.
pub async fn unknown_request(
    args: &AdminArgs,
    route: &str,
    inflight: bool,
    limit: usize,
) -> Result<(StatusCode, String), String> {
    let mut path = format!("/v1/unknown?limit={limit}");
    if !route.is_empty() {
        path.push_str(&format!("&route={}", enc(route)));
    }
    if inflight {
        path.push_str("&include=inflight");
    }
    send(args, Method::GET, &path, None).await
}

/// `POST /v1/keys/{route}/{key}/resolve` with the outcome the flags describe.
pub async fn resolve_request(resolve: &ResolveArgs) -> Result<(StatusCode, String), String> {
    let Some(key) = &resolve.key else {
        return resolve_all_request(resolve).await;
    };
    let path = key_path(&resolve.target, key, "/resolve")?;
    let body = match resolve.not_executed {
        true => json!({ "outcome": "not_executed" }),
        false => completed(resolve)?,
    };
    send(&resolve.target.admin, Method::POST, &path, Some(body)).await
}

/// `POST /v1/unknown/resolve`: every unknown outcome of `--route` as not executed.
async fn resolve_all_request(resolve: &ResolveArgs) -> Result<(StatusCode, String), String> {
    let target = &resolve.target;
    if target.route.is_empty() {
        return Err("--route NAME is required with --all-unknown".to_owned());
    }
    let mut body = json!({
        "route": target.route,
        "outcome": "not_executed",
        "dry_run": resolve.dry_run,
    });
    if let Some(after) = &resolve.sent_after {
        body["sent_after"] = json!(after);
    }
    if let Some(before) = &resolve.sent_before {
        body["sent_before"] = json!(before);
    }
    send(
        &target.admin,
        Method::POST,
        "/v1/unknown/resolve",
        Some(body),
    )
    .await
}

fn completed(resolve: &ResolveArgs) -> Result<Value, String> {
    let mut headers = serde_json::Map::new();
    for line in &resolve.headers {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("--header {line:?}: write it as 'name: value'"));
        };
        headers.insert(name.trim().to_ascii_lowercase(), json!(value.trim()));
    }
    let mut body = json!({ "outcome": "completed", "status": resolve.status, "headers": headers });
    if let Some(path) = &resolve.body_file {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read --body-file {}: {e}", path.display()))?;
        match String::from_utf8(bytes) {
            Ok(text) => body["body"] = json!(text),
            Err(e) => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
                body["body_base64"] = json!(b64);
            }
        }
    }
    Ok(body)
}

async fn send(
    args: &AdminArgs,
    method: Method,
    path: &str,
    json: Option<Value>,
) -> Result<(StatusCode, String), String> {
    let uri = format!("{}{path}", args.admin.trim_end_matches('/'));
    let mut request = Request::builder().method(method).uri(&uri);
    if let Some(token) = &args.token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if json.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let body = json.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
    let request = request
        .body(Full::new(body))
        .map_err(|e| format!("bad admin URL {uri}: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("admin API at {} unreachable: {e}", args.admin))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The `/v1/unknown` answer as aligned columns, ages relative to the server's `now`.
pub fn unknown_table(listing: &Value) -> String {
    let now = parse_time(&listing["now"]);
    let ago = |v: &Value| match (now, parse_time(v)) {
        (Some(now), Some(t)) => {
            let secs = now.duration_since(t).map_or(0, |d| d.as_secs());
            // The config's own duration grammar (`9m30s`), the one idem writes everywhere.
            let age = crate::units::format_duration(std::time::Duration::from_secs(secs));
            format!("{age} ago")
        }
        _ => "-".to_owned(),
    };
    let row = |i: &Value| {
        // Keys and scopes come from callers or the store: never raw to the terminal.
        let text = |f: &str| {
            let value = i[f].as_str().filter(|s| !s.is_empty()).unwrap_or("-");
            escape(value).into_owned()
        };
        let lease = i
            .get("lease_ended_at")
            .map_or_else(|| "live".to_owned(), ago);
        [
            text("route"),
            text("key"),
            text("scope"),
            i["attempt"].to_string(),
            text("state"),
            ago(&i["first_sent_at"]),
            lease,
            text("trace_id"),
        ]
    };
    let mut rows = vec![[
        "ROUTE",
        "KEY",
        "SCOPE",
        "ATTEMPT",
        "STATE",
        "FIRST SENT",
        "LEASE ENDED",
        "TRACE ID",
    ]
    .map(str::to_owned)];
    let items = listing["unknown"].as_array().into_iter().flatten();
    let inflight = listing["inflight"].as_array().into_iter().flatten();
    rows.extend(items.chain(inflight).map(row));
    if rows.len() == 1 {
        return "no unknown outcomes\n".to_owned();
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if listing["truncated"] == json!(true) {
        out.push_str("(more not shown: raise --limit)\n");
    }
    out
}

fn parse_time(v: &Value) -> Option<SystemTime> {
    humantime::parse_rfc3339(v.as_str()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_and_ages_from_the_servers_clock() {
        let listing = json!({"now": "2025-01-01T00:10:00.000Z", "truncated": false, "unknown": [
            {"route": "charge", "key": "charge:inv_1", "scope": "", "attempt": 1, "state": "unknown",
             "first_sent_at": "2025-01-01T00:00:00.000Z", "lease_ended_at": "2025-01-01T00:00:30.000Z"}]});
        let table = unknown_table(&listing);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("ROUTE   KEY"), "{table}");
        assert!(
            lines[1].contains("charge:inv_1  -      1        unknown  10m ago     9m30s ago"),
            "{table}"
        );
        assert_eq!(
            unknown_table(&json!({"unknown": []})),
            "no unknown outcomes\n"
        );
    }

    #[test]
    fn cells_show_control_characters_escaped() {
        let listing = json!({"unknown": [{"route": "charge", "key": "k\u{1b}[2J\nx",
            "scope": "\u{9b}31m", "attempt": 1, "state": "unknown"}]});
        let table = unknown_table(&listing);
        assert!(
            !table.chars().any(|c| c == '\x1b' || c == '\u{9b}'),
            "{table:?}"
        );
        assert!(table.contains("k\\u{1b}[2J\\u{a}x  \\u{9b}31m"), "{table}");
        assert_eq!(table.lines().count(), 2, "a newline in a key is no new row");
    }
}
