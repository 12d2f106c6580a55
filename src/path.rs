//! Path templates (`/invoices/{invoice_id}/charge`): the path language of routes,
//! parsing and matching. Pure: no I/O, no body, no dependency on the configuration.
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

use percent_encoding::percent_decode_str;

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

#[cfg(test)]
mod tests;
