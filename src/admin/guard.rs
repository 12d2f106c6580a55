//! Who may read records and change them through the admin listener (SPEC §4).
//!
//! The record data and the writes — `/v1/keys/…` (inspect, release, resolve),
//! `/v1/unknown…` and the console page at `/` — are what the guard covers. `/healthz`,
//! `/readyz`, `/metrics` and `/v1/config` hold nothing of a record and stay open to
//! probes and scrapers.
//!
//! With `admin.token`, the bearer token is the guard: a browser never attaches it by
//! itself, so neither another site's page nor a renamed host gets anywhere without it
//! (the console page itself holds no data and asks for the token).
//!
//! Without a token (the default), three checks stand in for it:
//! - **Peers**: a listener that is not on loopback answers only loopback peers (a
//!   `kubectl port-forward` arrives from loopback): anything else on the network would
//!   otherwise read and release keys.
//! - **DNS rebinding**: a page on `evil.example` can re-point its own name at 127.0.0.1
//!   and then read this listener as if it were its own origin. The browser still sends
//!   `Host: evil.example`, so only a `Host` that is a loopback name (`localhost` or a
//!   name under it, `app.localhost`), an IP literal (v4 or `[v6]`, with or without a
//!   port) or a name in `admin.allowed_hosts` is served. Names under `.localhost` are
//!   safe to accept because no one can point them elsewhere: the top-level name is
//!   reserved for loopback (RFC 6761 §6.3) and delegated by no registry, so there is no
//!   DNS record to rebind, and browsers resolve it to loopback without asking DNS.
//! - **Cross-site writes**: a write (any method but GET, HEAD, OPTIONS) whose `Origin` is
//!   present and is neither the host it addressed nor an allowed host is refused
//!   (`Origin: null`, sent from sandboxed frames and files, too). Browsers send `Origin`
//!   on every such request; the CLI and curl send none.

use std::net::{IpAddr, SocketAddr};

use http::uri::Authority;
use http::{header, HeaderValue, Method, Request, StatusCode};
use subtle::ConstantTimeEq;

use super::config::AdminConfig;
use super::reply::{problem, AdminResponse};

/// The admin listener's access rules, from `admin:` and the address it is bound to.
pub struct Guard {
    token: Option<String>,
    /// `admin.allowed_hosts`, lowercase.
    allowed_hosts: Vec<String>,
    /// Bound to something other than loopback (e.g. `0.0.0.0` in a pod, for the probes).
    exposed: bool,
}

/// Whether `path` reads record data or changes records (what the guard covers).
pub(super) fn covers(path: &str) -> bool {
    path == "/"
        || path.starts_with("/v1/keys/")
        || path == "/v1/unknown"
        || path.starts_with("/v1/unknown/")
}

impl Guard {
    pub fn new(config: &AdminConfig, bound: SocketAddr) -> Guard {
        Guard {
            token: config.token.clone(),
            allowed_hosts: config.allowed_hosts.clone(),
            exposed: !is_loopback(bound.ip()),
        }
    }

    /// `None` when `req`, from `peer`, may reach a path the guard covers; otherwise the
    /// refusal to answer with.
    pub(super) fn check<B>(&self, req: &Request<B>, peer: SocketAddr) -> Option<AdminResponse> {
        if let Some(token) = &self.token {
            // The page holds no data; everything else needs the token.
            let allowed = req.uri().path() == "/" || bearer_is(req, token);
            return (!allowed).then(unauthorized);
        }
        if self.exposed && !is_loopback(peer.ip()) {
            return Some(refused(
                "admin_token_required",
                "Admin token required",
                format!(
                    "This admin listener is not bound to loopback and has no admin.token, so \
                     record data and writes are answered only to loopback peers (e.g. through \
                     kubectl port-forward); {peer} is not one. Set admin.token and send \
                     Authorization: Bearer <token>."
                ),
            ));
        }
        let host = addressed(req);
        let Some((host, port)) = host.as_deref().and_then(split_host) else {
            let shown = host.unwrap_or_default();
            return Some(self.host_refused(&shown));
        };
        if !self.host_allowed(&host) {
            return Some(self.host_refused(&format!("{host}:{port}")));
        }
        let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let origin = req.headers().get(header::ORIGIN);
        if let (true, Some(origin)) = (write, origin) {
            let same = origin_of(origin).is_some_and(|(o_host, o_port)| {
                (o_host == host && o_port == port) || self.allowed_hosts.contains(&o_host)
            });
            if !same {
                let shown = String::from_utf8_lossy(origin.as_bytes()).into_owned();
                return Some(refused(
                    "admin_origin_refused",
                    "Cross-site write refused",
                    format!(
                        "A {} from Origin {shown:?} to {host}:{port} is refused: a page of \
                         another site may not change records. Use the console served by this \
                         listener, the CLI (idem keys) or a client that sends no Origin.",
                        req.method()
                    ),
                ));
            }
        }
        None
    }

    /// A loopback name, an IP literal, or a name the operator listed.
    fn host_allowed(&self, host: &str) -> bool {
        loopback_name(host)
            || literal_ip(host).is_some()
            || self.allowed_hosts.iter().any(|h| h == host)
    }

    fn host_refused(&self, host: &str) -> AdminResponse {
        refused(
            "admin_host_refused",
            "Host not allowed",
            format!(
                "Host {host:?} is not localhost (or a name under .localhost), an IP literal \
                 or a name in admin.allowed_hosts, and this admin listener has no admin.token: \
                 refused so that a web page cannot reach it by pointing its own name at this \
                 address (DNS rebinding). Address it as 127.0.0.1:<port> or localhost:<port>, \
                 list the name in admin.allowed_hosts, or set admin.token."
            ),
        )
    }
}

/// A 403 `application/problem+json` (RFC 9457), as the proxy's own errors.
fn refused(code: &'static str, title: &'static str, detail: String) -> AdminResponse {
    problem(StatusCode::FORBIDDEN, code, title, detail)
}

/// 401 with the challenge a 401 must carry (RFC 9110 §11.6.1): `Bearer`.
fn unauthorized() -> AdminResponse {
    let detail = "This admin listener has admin.token set: record data and writes need \
                  Authorization: Bearer <token>, and the token sent was missing or wrong. \
                  idem keys reads it from --token or IDEM_ADMIN_TOKEN; the console asks for it."
        .to_owned();
    let mut r = problem(
        StatusCode::UNAUTHORIZED,
        "admin_token_invalid",
        "Admin token missing or wrong",
        detail,
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"idem admin\""),
    );
    r
}

fn bearer_is<B>(req: &Request<B>, token: &str) -> bool {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // `subtle`'s comparison takes the same time wherever the bytes differ (it returns
    // early only on a length mismatch, which the token's length is not secret enough
    // to matter for): a guessed prefix is not timed out of it.
    presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(token.as_bytes())))
}

/// Loopback, also as an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, a dual-stack
/// listener's view of an IPv4 peer).
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// The authority the request addressed: HTTP/2's `:authority`, else `Host`.
fn addressed<B>(req: &Request<B>) -> Option<String> {
    if let Some(authority) = req.uri().authority() {
        return Some(authority.as_str().to_owned());
    }
    let host = req.headers().get(header::HOST)?;
    Some(String::from_utf8_lossy(host.as_bytes()).into_owned())
}

/// `host[:port]` as lowercase host (IPv6 with its brackets) and port (80 when absent:
/// the admin listener speaks plain HTTP). `None` for anything else (userinfo, a path).
fn split_host(text: &str) -> Option<(String, u16)> {
    let (host, port) = authority(text)?;
    Some((host, port.unwrap_or(80)))
}

/// `host[:port]`, the host lowercase; the port only when given.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    if text.contains('@') || text.ends_with(':') {
        return None;
    }
    let authority: Authority = text.parse().ok()?;
    let host = authority.host().to_ascii_lowercase();
    (!host.is_empty()).then(|| (host, authority.port_u16()))
}

/// An `Origin` (`scheme://host[:port]`) as host and port, the port defaulting by scheme.
/// `None` for `null` and anything unparseable.
fn origin_of(origin: &HeaderValue) -> Option<(String, u16)> {
    let (scheme, rest) = origin.to_str().ok()?.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let (host, port) = authority(rest)?;
    Some((host, port.unwrap_or(default)))
}

/// `localhost` or a name under it (`app.localhost`; lowercase already, as
/// [`authority`] returns it). Not `localhost.` with a trailing dot, nor an empty label
/// (`.localhost`, `a..localhost`): those are not names a browser resolves to loopback.
fn loopback_name(host: &str) -> bool {
    host == "localhost"
        || host
            .strip_suffix(".localhost")
            .is_some_and(|sub| !sub.is_empty() && sub.split('.').all(|label| !label.is_empty()))
}

/// `127.0.0.1` or `[::1]` (a Host header writes IPv6 in brackets) as an address.
fn literal_ip(host: &str) -> Option<IpAddr> {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

#[cfg(test)]
mod tests;
