//! `on_unknown: reconcile`'s lookup (SPEC §1 "Unknown outcomes"): the request that asks
//! the upstream whether an attempt happened, and how its answer reads. The YAML and its
//! checks are `config/reconcile.rs`.
//!
//! `{key}` is the upstream key as it was forwarded; the other placeholders are those of
//! keys. Every byte outside the unreserved set is encoded, and so is `.`: a value is
//! always one whole path segment, never `.` or `..` (which would climb out of the
//! lookup's path, e.g. key `..` turning `/v1/charges/{key}/status` into `/v1/status`).

use std::time::Duration;

use http::Method;

use crate::template::{RenderError, RequestView, Template};

/// A `reconcile.path` as written, and split at each `{key}`: the upstream key goes
/// between the parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupPath {
    parts: Vec<Template>,
    source: String,
}

impl LookupPath {
    /// Parse a `reconcile.path` (`{key}` and key placeholders).
    pub fn parse(text: &str) -> Result<LookupPath, String> {
        if !text.starts_with('/') {
            return Err(format!("invalid path {text:?}: it must start with /"));
        }
        if !text.contains("{key}") {
            return Err(format!(
                "path {text:?} has no {{key}}: the lookup must name the attempt, e.g. /v1/charges/search?idempotency_key={{key}}"
            ));
        }
        let parts = text
            .split("{key}")
            .map(|part| {
                Template::parse(part).map_err(|e| format!("invalid template {part:?}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(LookupPath {
            parts,
            source: text.to_owned(),
        })
    }

    /// The path as the route wrote it.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The lookup request and how its statuses read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    pub method: Method,
    path: LookupPath,
    /// "It happened": this response is the outcome.
    pub found: Vec<u16>,
    /// With `found`: where in the JSON answer the attempt must appear (RFC 6901).
    pub found_json: Option<String>,
    /// "It never happened": forward again.
    pub absent: Vec<u16>,
    pub timeout: Duration,
}

impl Reconcile {
    /// A lookup of `path` with these status rules, for the tests of what its answers
    /// say (`proxy/decide/lookup.rs`).
    #[cfg(test)]
    pub fn for_test(path: &str, found: &[u16], absent: &[u16], found_json: Option<&str>) -> Self {
        Reconcile {
            method: Method::GET,
            path: LookupPath::parse(path).expect("a valid lookup path"),
            found: found.to_vec(),
            found_json: found_json.map(str::to_owned),
            absent: absent.to_vec(),
            timeout: Duration::from_secs(2),
        }
    }

    /// A lookup of `path` with these status rules.
    pub fn new(
        method: Method,
        path: LookupPath,
        found: Vec<u16>,
        found_json: Option<String>,
        absent: Vec<u16>,
        timeout: Duration,
    ) -> Reconcile {
        Reconcile {
            method,
            path,
            found,
            found_json,
            absent,
            timeout,
        }
    }

    /// The lookup's path and query for an attempt forwarded with `upstream_key`, or
    /// `None` when a placeholder does not resolve from the request.
    pub fn render(
        &self,
        upstream_key: &str,
        req: &RequestView<'_>,
    ) -> Result<Option<String>, RenderError> {
        let mut out = String::with_capacity(self.path.source.len() + upstream_key.len());
        for (i, part) in self.path.parts.iter().enumerate() {
            if i > 0 {
                push_encoded(&mut out, upstream_key);
            }
            match part.render_with(req, push_encoded)? {
                Some(text) => out.push_str(&text),
                None => return Ok(None),
            }
        }
        // A value that is exactly `.` or `..` is `%2E` or `%2E%2E`, which the WHATWG URL
        // parser (browsers, Node's `URL`) still reads as a dot segment: no lookup then
        // (it fails, and the outcome stays unknown for a person to settle).
        let path = out.split('?').next().unwrap_or_default();
        let dots = |s: &str| s.eq_ignore_ascii_case("%2e") || s.eq_ignore_ascii_case("%2e%2e");
        if path.split('/').any(dots) {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// What a lookup's answer with a `found` status says, read with `found_json`:
    /// `body` is the answer's body (`None` when it was larger than the route keeps).
    pub fn read_found(&self, body: Option<&[u8]>) -> Found {
        let Some(pointer) = &self.found_json else {
            return Found::Yes;
        };
        let Some(body) = body else {
            return Found::Unreadable("the answer was too large to read".to_owned());
        };
        let value: serde_json::Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(e) => return Found::Unreadable(format!("the answer is not JSON ({e})")),
        };
        let empty = match value.pointer(pointer) {
            None | Some(serde_json::Value::Null) => true,
            Some(serde_json::Value::Array(a)) => a.is_empty(),
            Some(serde_json::Value::Object(o)) => o.is_empty(),
            Some(serde_json::Value::String(s)) => s.is_empty(),
            Some(_) => false,
        };
        if empty {
            Found::Empty
        } else {
            Found::Yes
        }
    }
}

/// A `found` answer, read with `found_json`.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The attempt is in the answer (or there is no `found_json`): it happened.
    Yes,
    /// The pointer is missing, null or empty: nothing found.
    Empty,
    /// Not JSON, or not kept: says neither.
    Unreadable(String),
}

/// A value placed in a URL's path or query: every byte outside the unreserved set
/// percent-encoded, and `.` too, so that the value is never a `.` or `..` segment.
fn push_encoded(out: &mut String, value: &str) {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'~');
    out.extend(percent_encoding::utf8_percent_encode(value, SET));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(path: &str, found_json: Option<&str>) -> Reconcile {
        Reconcile::for_test(path, &[200], &[404], found_json)
    }

    fn render(r: &Reconcile, key: &str) -> String {
        try_render(r, key).unwrap()
    }

    /// The lookup's path, or `None` when `key` cannot be one segment.
    fn try_render(r: &Reconcile, key: &str) -> Option<String> {
        let body = crate::body::BodyView::new(bytes::Bytes::new());
        let view = RequestView {
            method: &Method::POST,
            route: "r",
            captures: &Default::default(),
            query: None,
            headers: &Default::default(),
            body: &body,
            mcp: None,
        };
        r.render(key, &view).unwrap()
    }

    #[test]
    fn the_upstream_key_is_encoded_between_the_parts() {
        let r = lookup("/v1/charges/search?idempotency_key={key}", None);
        assert_eq!(
            render(&r, "charge:inv 1/x"),
            "/v1/charges/search?idempotency_key=charge%3Ainv%201%2Fx"
        );
        assert!(LookupPath::parse("/v1/charges")
            .unwrap_err()
            .contains("{key}"));
        assert!(LookupPath::parse("v1?k={key}").is_err());
    }

    #[test]
    fn a_key_is_always_one_segment_never_a_dot_segment() {
        let r = lookup("/v1/charges/{key}/status", None);
        assert_eq!(render(&r, "..."), "/v1/charges/%2E%2E%2E/status");
        assert_eq!(render(&r, "../x"), "/v1/charges/%2E%2E%2Fx/status");
        assert_eq!(render(&r, "a.b-c_d~e"), "/v1/charges/a%2Eb-c_d~e/status");
        // Exactly `.` or `..`: a dot segment to WHATWG parsers even encoded; no lookup.
        assert_eq!(try_render(&r, ".."), None);
        assert_eq!(try_render(&r, "."), None);
        let q = lookup("/v1/search?k={key}", None);
        assert_eq!(
            render(&q, ".."),
            "/v1/search?k=%2E%2E",
            "a query value is no segment"
        );
    }

    #[test]
    fn found_json_needs_a_non_empty_value_at_the_pointer() {
        let r = lookup("/v1/charges/search?k={key}", Some("/data/0"));
        let read = |body: &str| r.read_found(Some(body.as_bytes()));
        assert_eq!(read(r#"{"data":[{"id":"ch_1"}]}"#), Found::Yes);
        assert_eq!(read(r#"{"data":["x"]}"#), Found::Yes);
        assert_eq!(
            read(r#"{"data":[0]}"#),
            Found::Yes,
            "0 and false are values"
        );
        for empty in [
            r#"{"data":[]}"#,
            r#"{"data":[null]}"#,
            r#"{"data":[{}]}"#,
            r#"{"data":[""]}"#,
            r#"{"data":[[]]}"#,
            r#"{}"#,
            r#"[]"#,
        ] {
            assert_eq!(read(empty), Found::Empty, "{empty}");
        }
        assert!(matches!(read("<html>"), Found::Unreadable(_)));
        assert!(matches!(r.read_found(None), Found::Unreadable(_)));
        let plain = lookup("/v1/charges/{key}", None);
        assert_eq!(
            plain.read_found(Some(b"[]")),
            Found::Yes,
            "status rule only"
        );
    }
}
