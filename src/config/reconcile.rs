//! `reconcile:` — how a route asks the upstream whether an attempt whose outcome is
//! unknown happened (SPEC §1 "Unknown outcomes", `on_unknown: reconcile`):
//!
//! ```yaml
//! reconcile:
//!   method: GET                                            # default GET
//!   path: "/v1/charges/search?idempotency_key={key}"       # required
//!   found: [200]                                           # default [200]
//!   absent: [404]                                          # default [404]
//!   timeout: 2s                                            # default 2s
//! ```
//! `{key}` is the upstream key as it was forwarded (URL-encoded); the other
//! placeholders are those of keys, read from the original request (also URL-encoded).

use std::time::Duration;

use http::Method;

use super::values;
use super::walk::{At, Walker};
use super::yaml::{Node, Value};
use crate::template::{RenderError, RequestView, Template};

/// The lookup request and how its statuses read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    pub method: Method,
    /// The path and query, split at each `{key}`: the upstream key goes between parts.
    path: Vec<Template>,
    source: String,
    /// "It happened": this response is the outcome.
    pub found: Vec<u16>,
    /// "It never happened": forward again.
    pub absent: Vec<u16>,
    pub timeout: Duration,
}

/// `reconcile.timeout` when unset: a lookup is a read, answered quickly or not at all.
const TIMEOUT: Duration = Duration::from_secs(2);

impl Reconcile {
    /// Parse a `reconcile.path` (`{key}` and key placeholders).
    pub fn parse_path(text: &str) -> Result<Vec<Template>, String> {
        if !text.starts_with('/') {
            return Err(format!("invalid path {text:?}: it must start with /"));
        }
        if !text.contains("{key}") {
            return Err(format!(
                "path {text:?} has no {{key}}: the lookup must name the attempt, e.g. /v1/charges/search?idempotency_key={{key}}"
            ));
        }
        text.split("{key}").map(values::template).collect()
    }

    /// The lookup's path and query for an attempt forwarded with `upstream_key`, or
    /// `None` when a placeholder does not resolve from the request.
    pub fn render(
        &self,
        upstream_key: &str,
        req: &RequestView<'_>,
    ) -> Result<Option<String>, RenderError> {
        let mut out = String::with_capacity(self.source.len() + upstream_key.len());
        for (i, part) in self.path.iter().enumerate() {
            if i > 0 {
                push_encoded(&mut out, upstream_key);
            }
            match part.render_with(req, push_encoded)? {
                Some(text) => out.push_str(&text),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

/// A value placed in a URL's path or query: everything but unreserved characters
/// percent-encoded.
fn push_encoded(out: &mut String, value: &str) {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    out.extend(percent_encoding::utf8_percent_encode(value, SET));
}

/// Read a `reconcile:` map.
pub(crate) fn read(w: &mut Walker<'_>, node: &Node, path: &str) -> Option<At<Reconcile>> {
    if !matches!(node.value, Value::Map(_)) {
        w.error(
            node.pos,
            path,
            "expected a map with method, path, found, absent, timeout",
        );
        return None;
    }
    let f = w.fields(
        node,
        path,
        &["method", "path", "found", "absent", "timeout"],
    );
    let method = w.field(&f, "method", values::method);
    let parts = w.field(&f, "path", |text| {
        Ok((Reconcile::parse_path(text)?, text.to_owned()))
    });
    if f.get("path").is_none() {
        w.error(
            node.pos,
            path,
            "missing path, e.g. path: \"/v1/charges/search?idempotency_key={key}\"",
        );
    }
    let statuses = |w: &mut Walker<'_>, name: &str, default: u16| -> Vec<u16> {
        let Some(list) = f.get(name) else {
            return vec![default];
        };
        let mut codes = Vec::new();
        for (item_path, item) in w.list(list, &f.path(name)) {
            let code = w.parsed(item, &item_path, |text| match text.trim().parse::<u16>() {
                Ok(code) if (100..=599).contains(&code) => Ok(code),
                _ => Err(format!("invalid status {text:?}; a code from 100 to 599")),
            });
            codes.extend(code.map(|c| c.value));
        }
        codes
    };
    let found = statuses(w, "found", 200);
    let absent = statuses(w, "absent", 404);
    if let Some(both) = found.iter().find(|c| absent.contains(c)) {
        w.error(
            node.pos,
            path,
            format!("status {both} is in both found and absent"),
        );
    }
    let timeout = w.duration(&f, "timeout").map_or(TIMEOUT, |t| t.value);
    let (path_parts, source) = parts?.value;
    Some(At {
        value: Reconcile {
            method: method.map_or(Method::GET, |m| m.value),
            path: path_parts,
            source,
            found,
            absent,
            timeout,
        },
        pos: node.pos,
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_key_is_encoded_between_the_parts() {
        let parts = Reconcile::parse_path("/v1/charges/search?idempotency_key={key}").unwrap();
        let r = Reconcile {
            method: Method::GET,
            path: parts,
            source: String::new(),
            found: vec![200],
            absent: vec![404],
            timeout: TIMEOUT,
        };
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
        let path = r.render("charge:inv 1/x", &view).unwrap().unwrap();
        assert_eq!(
            path,
            "/v1/charges/search?idempotency_key=charge%3Ainv%201%2Fx"
        );
        assert!(Reconcile::parse_path("/v1/charges")
            .unwrap_err()
            .contains("{key}"));
        assert!(Reconcile::parse_path("v1?k={key}").is_err());
    }
}
