//! Path templates (`/invoices/{invoice_id}/charge`): the path language of routes,
//! parsing and matching. Pure: no I/O, no body, no dependency on the configuration.
//!
//! # Matching rules
//! - A template is `/`-separated segments; each is a literal, a `{name}` capture (one
//!   non-empty segment) or, last only, a `{name*}` wildcard (the rest of the path: zero
//!   or more segments, so `/{path*}` matches every path, `/` included).
//! - Request segments are percent-decoded before comparison, so `/%63harge` matches the
//!   literal `charge` (an encoded literal must not slip past a protected route).
//!   Comparison is case-sensitive (RFC 3986 paths are), unless the route sets
//!   `path_case: insensitive` ([`PathTemplate::case_insensitive`]).
//! - Empty segments (a trailing slash, repeated slashes) and `.` segments (`%2e` too)
//!   are skipped, on both sides: `/invoices/1/charge/`, `//invoices/1/charge` and
//!   `/./invoices/1/charge` match `/invoices/{id}/charge`, as the frameworks behind idem
//!   route them to the same handler (issue 46 §6: a variant must not skip protection).
//!   The upstream still receives the path as sent; the fingerprint reads
//!   [`normalised`], so such a variant of a repeat is a replay.
//! - No `..` resolution: hyper does not do it either, and a path with `..` matches only a
//!   template that has a capture or wildcard there.
//! - A miss allocates nothing: the path is checked first, captures are built only for a
//!   match.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    source: String,
    segments: Vec<Segment>,
    /// `path_case: insensitive`: literals compare ASCII case-insensitively.
    case_insensitive: bool,
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
            // A trailing slash is not a segment: requests are matched without theirs.
            if !matches!(&segment, Segment::Literal(l) if l.is_empty()) {
                segments.push(segment);
            }
        }
        Ok(PathTemplate {
            source: text.to_owned(),
            segments,
            case_insensitive: false,
        })
    }

    /// The template with literals compared ASCII case-insensitively (`path_case:
    /// insensitive`).
    pub fn case_insensitive(mut self) -> PathTemplate {
        self.case_insensitive = true;
        self
    }

    /// Whether literals compare ASCII case-insensitively.
    pub fn is_case_insensitive(&self) -> bool {
        self.case_insensitive
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the template is `/{name*}` alone: every path matches it.
    pub fn matches_every_path(&self) -> bool {
        matches!(self.segments.as_slice(), [Segment::Wildcard(_)])
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
        let mut parts = Significant::new(rest);
        for segment in &self.segments {
            let part = match (segment, parts.next()) {
                (Segment::Wildcard(_), _) => return true,
                (_, None) => return false,
                (_, Some((part, _))) => part,
            };
            if let Segment::Literal(lit) = segment {
                let ok = match self.case_insensitive {
                    false => percent_decode_str(part).eq(lit.bytes()),
                    true => {
                        let mut decoded = percent_decode_str(part);
                        lit.bytes()
                            .all(|b| decoded.next().is_some_and(|c| c.eq_ignore_ascii_case(&b)))
                            && decoded.next().is_none()
                    }
                };
                if !ok {
                    return false;
                }
            }
        }
        parts.next().is_none()
    }

    /// Build captures for a path already known to match.
    fn collect_captures(&self, rest: &str) -> Captures {
        let mut out = Vec::new();
        let mut parts = Significant::new(rest);
        for segment in &self.segments {
            let next = parts.next();
            match segment {
                Segment::Literal(_) => {}
                Segment::Capture(name) => {
                    let part = next.map_or("", |(part, _)| part);
                    out.push((name.clone(), decode(part)));
                }
                Segment::Wildcard(name) => {
                    let remaining = next.map_or("", |(_, from)| from);
                    out.push((name.clone(), decode(remaining)));
                    break;
                }
            }
        }
        Captures(out)
    }
}

// === normalised paths ===

/// The request segments that matching compares: empty segments (repeated slashes, a
/// trailing slash) and `.` segments (`%2e` too) are skipped. Each item is the segment
/// and the path from it on (a wildcard's capture).
struct Significant<'a> {
    rest: Option<&'a str>,
}

impl<'a> Significant<'a> {
    fn new(rest: &'a str) -> Self {
        Significant { rest: Some(rest) }
    }
}

impl<'a> Iterator for Significant<'a> {
    type Item = (&'a str, &'a str);

    #[inline]
    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        loop {
            let from = self.rest?;
            let part = match from.split_once('/') {
                Some((part, after)) => {
                    self.rest = Some(after);
                    part
                }
                None => {
                    self.rest = None;
                    from
                }
            };
            if !part.is_empty() && !is_dot(part) {
                return Some((part, from));
            }
        }
    }
}

/// `.` or its percent-encoded form (`.` is unreserved: RFC 3986 §6.2.2.2 decodes it).
fn is_dot(part: &str) -> bool {
    part == "." || part.eq_ignore_ascii_case("%2e")
}

/// The path (and query) as matching reads it, for the fingerprint (issue 46 §6): no
/// empty or `.` segments, no trailing slash, percent-encoded unreserved characters
/// decoded (other escapes in upper case), lower case with `lowercase`. Borrowed, with no
/// work beyond one scan, when the path is already in that form (the usual case), so a
/// record made before this normalisation keeps its fingerprint.
pub fn normalised(path_and_query: &str, lowercase: bool) -> Cow<'_, str> {
    let (path, query) = match path_and_query.find('?') {
        Some(at) => path_and_query.split_at(at),
        None => (path_and_query, ""),
    };
    if is_normal(path, lowercase) {
        return Cow::Borrowed(path_and_query);
    }
    let mut out = String::with_capacity(path_and_query.len());
    for (part, _) in Significant::new(path.strip_prefix('/').unwrap_or(path)) {
        out.push('/');
        push_segment(&mut out, part, lowercase);
    }
    if out.is_empty() {
        out.push('/');
    }
    out.push_str(query);
    Cow::Owned(out)
}

/// Whether `path` is already in normalised form: one scan, no allocation.
fn is_normal(path: &str, lowercase: bool) -> bool {
    let bytes = path.as_bytes();
    if bytes.len() > 1 && bytes.last() == Some(&b'/') {
        return false;
    }
    let mut previous = 0u8;
    for &b in bytes {
        let odd = match b {
            b'%' => true,
            b'/' | b'.' => previous == b'/',
            b'A'..=b'Z' => lowercase,
            _ => false,
        };
        if odd {
            return false;
        }
        previous = b;
    }
    true
}

/// One segment, unreserved escapes decoded, other escapes in upper case.
fn push_segment(out: &mut String, part: &str, lowercase: bool) {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape = (b == b'%' && i + 2 < bytes.len())
            .then(|| hex_pair(bytes[i + 1], bytes[i + 2]))
            .flatten();
        match escape {
            Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') => {
                out.push(char::from(if lowercase {
                    c.to_ascii_lowercase()
                } else {
                    c
                }));
                i += 3;
            }
            Some(_) => {
                out.push('%');
                out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
                out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
                i += 3;
            }
            None => {
                // A char boundary: only ASCII bytes were consumed before it.
                let c = part[i..].chars().next().unwrap_or_default();
                out.push(if lowercase { c.to_ascii_lowercase() } else { c });
                i += c.len_utf8();
            }
        }
    }
}

fn hex_pair(hi: u8, lo: u8) -> Option<u8> {
    let digit = |b: u8| char::from(b).to_digit(16);
    Some((digit(hi)? * 16 + digit(lo)?) as u8)
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
