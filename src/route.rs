//! Path templates (`/invoices/{invoice_id}/charge`) and the compiled route table.
//! Matching only: no I/O, no body.
//!
//! # Matching rules
//! - A template is `/`-separated segments; each is a literal, a `{name}` capture (one
//!   non-empty segment) or, last only, a `{name*}` wildcard (the rest of the path: zero
//!   or more segments, so `/{path*}` matches every path, `/` included).
//! - Request segments are percent-decoded before comparison, so `/%63harge` matches the
//!   literal `charge` (an encoded literal must not slip past a protected route).
//!   Comparison is case-sensitive (RFC 3986 paths are).
//! - Trailing slashes are significant: `/emails` does not match `/emails/` and vice
//!   versa. A wildcard is the exception: `/files/{rest*}` matches `/files` and `/files/`
//!   (both capture the empty string).
//! - No dot-segment normalisation (`/a/../b`): hyper does not do it either, and the
//!   upstream receives the path unchanged.
//! - A miss allocates nothing: the path is checked first, captures are built only for a
//!   match.

use std::borrow::Cow;
use std::sync::Arc;

use http::Method;
use percent_encoding::percent_decode_str;

use crate::config::RoutePolicy;

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    source: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Compared against the percent-decoded request segment.
    Literal(String),
    /// `{name}`: exactly one non-empty segment.
    Capture(String),
    /// `{name*}`: the rest of the path (last segment only).
    Wildcard(String),
}

/// Captured path parameters, percent-decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captures(Vec<(String, String)>);

/// Routes in order; the first match wins.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Arc<RoutePolicy>>,
}

// === impl PathTemplate ===

impl PathTemplate {
    /// Parse `/invoices/{invoice_id}/charge`. Errors name the offending segment.
    pub fn parse(text: &str) -> Result<PathTemplate, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("path template `{text}` must start with `/`"));
        };
        let raw: Vec<&str> = rest.split('/').collect();
        let mut segments = Vec::with_capacity(raw.len());
        for (i, seg) in raw.iter().enumerate() {
            let is_last = i + 1 == raw.len();
            let segment = parse_segment(seg, is_last)
                .map_err(|why| format!("path template `{text}`: {why}"))?;
            if let Segment::Capture(name) | Segment::Wildcard(name) = &segment {
                if segments
                    .iter()
                    .any(|s| segment_name(s) == Some(name.as_str()))
                {
                    return Err(format!(
                        "path template `{text}`: capture `{{{name}}}` appears twice"
                    ));
                }
            }
            segments.push(segment);
        }
        Ok(PathTemplate {
            source: text.to_owned(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Names of the captures (wildcard included), in order.
    pub fn capture_names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(segment_name)
    }

    /// Match a request path (no query; anything from `?` on is ignored); `None` if it
    /// does not match. Allocates only when it matches and the template has captures.
    pub fn matches(&self, path: &str) -> Option<Captures> {
        let path = path.split('?').next().unwrap_or_default();
        let rest = path.strip_prefix('/')?;
        if !self.is_match(rest) {
            return None;
        }
        Some(self.collect_captures(rest))
    }

    /// The allocation-free check. `rest` is the path without its leading `/`.
    fn is_match(&self, rest: &str) -> bool {
        let mut parts = rest.split('/');
        for segment in &self.segments {
            let part = match (segment, parts.next()) {
                (Segment::Wildcard(_), _) => return true,
                (_, None) => return false,
                (_, Some(part)) => part,
            };
            let ok = match segment {
                Segment::Literal(lit) => percent_decode_str(part).eq(lit.bytes()),
                _ => !part.is_empty(),
            };
            if !ok {
                return false;
            }
        }
        parts.next().is_none()
    }

    /// Build captures for a path already known to match.
    fn collect_captures(&self, rest: &str) -> Captures {
        let mut out = Vec::new();
        let mut remaining = rest;
        for segment in &self.segments {
            let (part, after) = match remaining.split_once('/') {
                Some((part, after)) => (part, after),
                None => (remaining, ""),
            };
            match segment {
                Segment::Literal(_) => {}
                Segment::Capture(name) => out.push((name.clone(), decode(part))),
                Segment::Wildcard(name) => {
                    out.push((name.clone(), decode(remaining)));
                    break;
                }
            }
            remaining = after;
        }
        Captures(out)
    }
}

/// Parse one template segment. `is_last`: a wildcard is allowed, and an empty segment
/// (a trailing slash) is.
fn parse_segment(seg: &str, is_last: bool) -> Result<Segment, String> {
    let Some(inner) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
        return parse_literal(seg, is_last);
    };
    let (name, wildcard) = match inner.strip_suffix('*') {
        Some(name) => (name, true),
        None => (inner, false),
    };
    if !is_valid_name(name) {
        return Err(format!(
            "invalid capture name in `{seg}`: use letters, digits and `_` (e.g. `{{invoice_id}}`)"
        ));
    }
    match (wildcard, is_last) {
        (true, false) => Err(format!("wildcard `{seg}` must be the last segment")),
        (true, true) => Ok(Segment::Wildcard(name.to_owned())),
        (false, _) => Ok(Segment::Capture(name.to_owned())),
    }
}

/// A literal segment, stored percent-decoded so it compares against decoded requests.
fn parse_literal(seg: &str, is_last: bool) -> Result<Segment, String> {
    if seg.contains(['{', '}']) {
        return Err(format!(
            "segment `{seg}` mixes literal text and a capture, or has an unbalanced brace; \
             a capture must be a whole segment, e.g. `/{{id}}`"
        ));
    }
    if seg.is_empty() && !is_last {
        return Err("empty segment (`//`)".to_owned());
    }
    if let Some(c) = seg
        .chars()
        .find(|c| c.is_ascii_control() || c.is_whitespace() || matches!(c, '?' | '#'))
    {
        return Err(format!(
            "segment `{seg}` contains {c:?}; a template is a path only"
        ));
    }
    match percent_decode_str(seg).decode_utf8() {
        Ok(lit) if !lit.contains('/') => Ok(Segment::Literal(lit.into_owned())),
        _ => Err(format!(
            "segment `{seg}` has an invalid percent-encoding (or an encoded `/`)"
        )),
    }
}

fn segment_name(segment: &Segment) -> Option<&str> {
    match segment {
        Segment::Capture(n) | Segment::Wildcard(n) => Some(n.as_str()),
        Segment::Literal(_) => None,
    }
}

/// `[A-Za-z0-9_]+`.
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Percent-decode a captured value. Invalid UTF-8 becomes U+FFFD: the route still
/// matches, and a key built from it is rejected later as not printable ASCII.
fn decode(raw: &str) -> String {
    match percent_decode_str(raw).decode_utf8_lossy() {
        Cow::Borrowed(s) => s.to_owned(),
        Cow::Owned(s) => s,
    }
}

// === impl Captures ===

impl Captures {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `(name, value)` pairs in template order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// For tests and callers that build captures by hand.
impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for Captures {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Captures(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

// === impl RouteTable ===

impl RouteTable {
    pub fn new(routes: Vec<Arc<RoutePolicy>>) -> Self {
        RouteTable { routes }
    }

    pub fn routes(&self) -> &[Arc<RoutePolicy>] {
        &self.routes
    }

    /// The first route whose methods and path match. Allocation-free on a miss.
    pub fn find(&self, method: &Method, path: &str) -> Option<(&Arc<RoutePolicy>, Captures)> {
        self.routes.iter().find_map(|route| {
            if !route.methods.contains(method) {
                return None;
            }
            route.path.matches(path).map(|captures| (route, captures))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{
        BodyFingerprint, FingerprintSpec, KeyFormat, OnAmbiguous, OnConcurrent, OnFailure,
        StatusSet,
    };
    use crate::template::Template;
    use std::time::Duration;

    /// A route with the SPEC's defaults, for tests across the crate.
    pub(crate) fn policy(name: &str, methods: &[Method], path: &str, keys: &[&str]) -> RoutePolicy {
        RoutePolicy {
            name: name.to_owned(),
            methods: methods.to_vec(),
            path: PathTemplate::parse(path).unwrap(),
            key: keys.iter().map(|k| Template::parse(k).unwrap()).collect(),
            require_key: true,
            max_key_length: 255,
            scope: Template::empty(),
            fingerprint: FingerprintSpec {
                method: true,
                path: true,
                body: BodyFingerprint::Whole,
            },
            store_statuses: StatusSet::default(),
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(24 * 3600),
            on_concurrent: OnConcurrent::Conflict,
            wait_timeout: Duration::from_secs(10),
            on_failure: OnFailure::Replay,
            on_ambiguous: OnAmbiguous::Hold,
            max_request_bytes: 1 << 20,
            max_response_bytes: 1 << 20,
            forward_key_header: http::header::HeaderName::from_static("idempotency-key"),
            forward_key_format: KeyFormat::Plain,
            bind_credentials: vec![http::header::AUTHORIZATION, http::header::COOKIE],
        }
    }

    fn table() -> RouteTable {
        RouteTable::new(vec![
            Arc::new(policy(
                "charge",
                &[Method::POST],
                "/invoices/{id}/charge",
                &["c:{path.id}"],
            )),
            Arc::new(policy(
                "put_any",
                &[Method::PUT, Method::PATCH],
                "/{p*}",
                &["{header.idempotency-key}"],
            )),
            Arc::new(policy(
                "charge_too",
                &[Method::POST],
                "/invoices/{x}/charge",
                &["never"],
            )),
            Arc::new(policy(
                "all_post",
                &[Method::POST],
                "/{p*}",
                &["{header.idempotency-key}"],
            )),
        ])
    }

    #[test]
    fn route_table_first_match_wins() {
        let t = table();
        let (route, captures) = t.find(&Method::POST, "/invoices/7/charge").unwrap();
        assert_eq!(route.name, "charge");
        assert_eq!(captures.get("id"), Some("7"));
        let (route, captures) = t.find(&Method::PATCH, "/invoices/7/charge").unwrap();
        assert_eq!(route.name, "put_any");
        assert_eq!(captures.get("p"), Some("invoices/7/charge"));
        assert_eq!(t.find(&Method::POST, "/emails").unwrap().0.name, "all_post");
        assert_eq!(t.find(&Method::POST, "/").unwrap().0.name, "all_post");
        assert_eq!(t.routes().len(), 4);
    }

    #[test]
    fn route_table_misses() {
        let t = table();
        assert!(t.find(&Method::GET, "/invoices/7/charge").is_none());
        assert!(t.find(&Method::DELETE, "/").is_none());
        assert!(t.find(&Method::POST, "*").is_none());
        let ext = Method::from_bytes(b"PURGE").unwrap();
        assert!(t.find(&ext, "/x").is_none());
        assert!(RouteTable::default().find(&Method::POST, "/").is_none());
    }

    fn tpl(text: &str) -> PathTemplate {
        PathTemplate::parse(text).unwrap()
    }

    fn err(text: &str) -> String {
        PathTemplate::parse(text).unwrap_err()
    }

    #[test]
    fn parses_literals_and_captures() {
        let t = tpl("/invoices/{invoice_id}/charge");
        assert_eq!(t.as_str(), "/invoices/{invoice_id}/charge");
        assert_eq!(t.capture_names().collect::<Vec<_>>(), ["invoice_id"]);
        let t = tpl("/a/{x}/b/{Y_2}/{rest*}");
        assert_eq!(t.capture_names().collect::<Vec<_>>(), ["x", "Y_2", "rest"]);
        assert_eq!(tpl("/").capture_names().count(), 0);
    }

    #[test]
    fn rejects_bad_templates_with_clear_messages() {
        assert!(err("invoices").contains("must start with `/`"));
        assert!(err("").contains("must start with `/`"));
        assert!(err("/{id}/x/{id}").contains("appears twice"));
        assert!(err("/{id}/{id*}").contains("appears twice"));
        assert!(err("/{rest*}/x").contains("must be the last segment"));
        assert!(err("/{a-b}").contains("invalid capture name"));
        assert!(err("/{}").contains("invalid capture name"));
        assert!(err("/{*}").contains("invalid capture name"));
        assert!(err("/inv-{id}").contains("mixes literal text and a capture"));
        assert!(err("/{id}.json").contains("mixes literal text and a capture"));
        assert!(err("/{id").contains("mixes"));
        assert!(err("/a//b").contains("empty segment"));
        assert!(err("/a?b=1").contains("path only"));
        assert!(err("/a b").contains("path only"));
        assert!(err("/a%2Fb").contains("percent-encoding"));
        assert!(err("/a%FF").contains("percent-encoding"));
    }

    #[test]
    fn matches_and_decodes_captures() {
        let t = tpl("/invoices/{invoice_id}/charge");
        let c = t.matches("/invoices/inv_1/charge").unwrap();
        assert_eq!(c.get("invoice_id"), Some("inv_1"));
        assert_eq!(c.len(), 1);
        let c = t.matches("/invoices/a%20b%2Fc/charge").unwrap();
        assert_eq!(c.get("invoice_id"), Some("a b/c"));
        assert_eq!(c.get("other"), None);
    }

    #[test]
    fn misses() {
        let t = tpl("/invoices/{invoice_id}/charge");
        for path in [
            "/invoices/1",
            "/invoices/1/charge/x",
            "/invoices//charge",
            "/invoices/1/Charge",
            "/invoices/1/charge/",
            "invoices/1/charge",
            "",
            "*",
            "/",
        ] {
            assert_eq!(t.matches(path), None, "{path}");
        }
    }

    #[test]
    fn literal_segments_compare_decoded() {
        let t = tpl("/invoices/{id}/charge");
        assert!(t.matches("/invoices/1/%63harge").is_some());
        assert!(t.matches("/%69nvoices/1/charge").is_some());
        let t = tpl("/caf%C3%A9/x%20y");
        assert!(t.matches("/caf%C3%A9/x%20y").is_some());
        assert!(t.matches("/café/x%20y").is_some());
    }

    #[test]
    fn trailing_slash_is_significant() {
        assert!(tpl("/emails").matches("/emails").is_some());
        assert!(tpl("/emails").matches("/emails/").is_none());
        assert!(tpl("/emails/").matches("/emails/").is_some());
        assert!(tpl("/emails/").matches("/emails").is_none());
        assert!(tpl("/").matches("/").is_some());
        assert!(tpl("/").matches("/x").is_none());
    }

    #[test]
    fn wildcard_captures_the_rest() {
        let all = tpl("/{path*}");
        assert_eq!(all.matches("/").unwrap().get("path"), Some(""));
        assert_eq!(all.matches("/a").unwrap().get("path"), Some("a"));
        assert_eq!(all.matches("/a/b/").unwrap().get("path"), Some("a/b/"));
        assert_eq!(all.matches("/a%2Fb").unwrap().get("path"), Some("a/b"));
        assert!(all.matches("").is_none());

        let files = tpl("/files/{id}/{rest*}");
        let c = files.matches("/files/7/x/y").unwrap();
        assert_eq!(c.iter().collect::<Vec<_>>(), [("id", "7"), ("rest", "x/y")]);
        assert_eq!(files.matches("/files/7").unwrap().get("rest"), Some(""));
        assert_eq!(files.matches("/files/7/").unwrap().get("rest"), Some(""));
        assert!(files.matches("/files").is_none());
        assert!(files.matches("/other/7/x").is_none());
    }

    #[test]
    fn query_is_ignored_and_bad_encoding_never_panics() {
        let t = tpl("/a/{x}");
        assert_eq!(t.matches("/a/1?x=2").unwrap().get("x"), Some("1"));
        assert_eq!(t.matches("/a/%FF").unwrap().get("x"), Some("\u{FFFD}"));
        assert_eq!(t.matches("/a/%").unwrap().get("x"), Some("%"));
        assert_eq!(t.matches("/a/%zz").unwrap().get("x"), Some("%zz"));
        assert!(t.matches("/a/é").is_some());
    }

    #[test]
    fn captures_from_iter() {
        let c: Captures = [("a", "1"), ("b", "2")].into_iter().collect();
        assert_eq!(c.get("b"), Some("2"));
        assert!(!c.is_empty());
        assert!(Captures::default().is_empty());
    }
}
