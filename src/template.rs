//! Key templates: `charge:{path.invoice_id}`, `{header.x-task-id}:{header.x-step}`.
//!
//! Parsing happens once, at config load; rendering happens per request and does no I/O.
//! A template renders to `Ok(None)` when one of its placeholders does not resolve, so the
//! caller can move on to the next key alternative.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, Method};
use percent_encoding::percent_decode_str;
use serde_json::Value;

use crate::body::BodyView;
use crate::canonical;
use crate::mcp::ToolCall;
use crate::path::Captures;

/// A parsed template: literal text and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    source: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    Placeholder(Source),
}

/// Where a placeholder's value comes from (SPEC §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `{path.NAME}`: a capture of the route's path template.
    Path(String),
    /// `{body.a.b.0.c}`: a field of the JSON body.
    Body(FieldPath),
    /// `{query.NAME}`
    Query(String),
    /// `{header.NAME}` (lower-cased name).
    Header(HeaderName),
    /// `{method}`
    Method,
    /// `{route}`
    Route,
    /// `{body_hash}`: SHA-256 hex of the canonical JSON body.
    BodyHash,
    /// `{mcp.tool}`: the tool of an MCP `tools/call` (MCP routes only).
    McpTool,
    /// `{mcp.args_hash}`: SHA-256 hex of the tool name and canonical arguments.
    McpArgsHash,
}

/// A dotted path into a JSON document; numeric segments also index arrays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath(pub Vec<String>);

/// What a template is rendered against.
pub struct RequestView<'a> {
    pub method: &'a Method,
    pub route: &'a str,
    pub captures: &'a Captures,
    /// The raw query string, without `?`.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: &'a BodyView,
    /// The protected MCP call, on an MCP route.
    pub mcp: Option<&'a ToolCall>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed `{{` at byte {0}")]
    Unclosed(usize),
    #[error("unknown placeholder `{{{0}}}`; valid: {{path.NAME}}, {{body.a.b}}, {{query.NAME}}, {{header.NAME}}, {{method}}, {{route}}, {{body_hash}}, {{mcp.tool}}, {{mcp.args_hash}}")]
    Unknown(String),
    #[error("empty name in placeholder `{{{0}}}`")]
    EmptyName(String),
    #[error("unmatched `}}` at byte {0}; write `}}}}` for a literal brace")]
    UnmatchedClose(usize),
    #[error("invalid placeholder `{{{placeholder}}}`: {reason}")]
    InvalidName {
        placeholder: String,
        reason: &'static str,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A body placeholder was used but the body is not JSON.
    #[error("the request body is not JSON")]
    BodyNotJson,
    /// A value is present but unusable: an empty or malformed `Idempotency-Key`, or a
    /// body field holding a number the JSON parse rounded.
    #[error("{0}")]
    Invalid(String),
}

impl Template {
    /// Parse `text` (e.g. `charge:{path.invoice_id}`).
    /// `{{` and `}}` are literal braces; a lone `}` is an error (almost always a typo).
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let next = bytes.get(i + 1).copied();
            match (bytes[i], next) {
                (b'{', Some(b'{')) | (b'}', Some(b'}')) => {
                    literal.push(char::from(bytes[i]));
                    i += 2;
                }
                (b'{', _) => {
                    let len = text[i + 1..].find('}').ok_or(TemplateError::Unclosed(i))?;
                    let source = parse_placeholder(&text[i + 1..i + 1 + len])?;
                    flush_literal(&mut parts, &mut literal);
                    parts.push(Part::Placeholder(source));
                    i += len + 2;
                }
                (b'}', _) => return Err(TemplateError::UnmatchedClose(i)),
                _ => {
                    // Braces are ASCII, so the next one is always a char boundary.
                    let end = text[i..].find(['{', '}']).map_or(text.len(), |n| i + n);
                    literal.push_str(&text[i..end]);
                    i = end;
                }
            }
        }
        flush_literal(&mut parts, &mut literal);
        Ok(Template {
            parts,
            source: text.to_owned(),
        })
    }

    /// The empty template (an unset `scope`).
    pub fn empty() -> Template {
        Template {
            parts: Vec::new(),
            source: String::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The text it was parsed from.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether rendering needs the request body (`{body.*}` or `{body_hash}`).
    pub fn uses_body(&self) -> bool {
        self.parts.iter().any(|p| {
            matches!(
                p,
                Part::Placeholder(
                    Source::Body(_) | Source::BodyHash | Source::McpTool | Source::McpArgsHash
                )
            )
        })
    }

    /// Names used in `{path.NAME}` placeholders (for validation against the route).
    pub fn path_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Placeholder(Source::Path(name)) => Some(name.as_str()),
            _ => None,
        })
    }

    /// Render against a request. `Ok(None)`: a placeholder did not resolve.
    ///
    /// Every placeholder is evaluated, so an error (`BodyNotJson`, `Invalid`) is reported
    /// even when another placeholder of the same template is missing: it tells the
    /// caller more than "no key".
    pub fn render(&self, req: &RequestView<'_>) -> Result<Option<String>, RenderError> {
        self.render_with(req, String::push_str)
    }

    /// As [`Template::render`], each placeholder's value written by `push` (a URL
    /// encoder, for a reconciliation lookup's path).
    pub fn render_with(
        &self,
        req: &RequestView<'_>,
        push: impl Fn(&mut String, &str),
    ) -> Result<Option<String>, RenderError> {
        let mut out = String::with_capacity(self.source.len() + 32);
        let mut resolved = true;
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Placeholder(source) => match resolve(source, req)? {
                    Some(value) => push(&mut out, &value),
                    None => resolved = false,
                },
            }
        }
        Ok(resolved.then_some(out))
    }
}

impl FieldPath {
    /// Parse a dotted path such as `a.b.0.c`.
    /// `None` for an empty path or an empty segment (`a..b`, `.a`, `a.`). Object keys
    /// that themselves contain `.` cannot be addressed.
    pub fn parse(text: &str) -> Option<FieldPath> {
        let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return None;
        }
        Some(FieldPath(segments))
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

// === rendering ===
//
// Value rules (SPEC §2): a JSON string is used as is, a number or boolean as its JSON
// text, an object or array as canonical JSON; null or missing means unresolved. An empty
// value (header, query parameter, JSON string, zero-segment wildcard) is no identity
// either and also counts as unresolved — except a present-but-empty `Idempotency-Key`,
// which is invalid.

/// The one header with its own syntax (bare token or RFC 8941 sf-string).
const IDEMPOTENCY_KEY: &str = "idempotency-key";

fn resolve<'a>(
    source: &Source,
    req: &RequestView<'a>,
) -> Result<Option<Cow<'a, str>>, RenderError> {
    let value = match source {
        Source::Path(name) => req.captures.get(name).map(Cow::Borrowed),
        Source::Body(path) => body_field(req.body, path)?,
        Source::Query(name) => req.query.and_then(|q| query_param(q, name)),
        Source::Header(name) if name.as_str() == IDEMPOTENCY_KEY => {
            idempotency_key(req.headers)?.map(Cow::Owned)
        }
        Source::Header(name) => header(req.headers, name).map(Cow::Borrowed),
        Source::Method => Some(Cow::Borrowed(req.method.as_str())),
        Source::Route => Some(Cow::Borrowed(req.route)),
        Source::BodyHash => Some(Cow::Owned(body_hash(req.body)?)),
        Source::McpTool => req.mcp.map(|call| Cow::Borrowed(call.tool.as_str())),
        Source::McpArgsHash => req.mcp.map(|call| Cow::Borrowed(call.args_hash.as_str())),
    };
    Ok(value.filter(|v| !v.is_empty()))
}

/// `{body.a.b.0}`. Errors if the body is not JSON, or if the field holds a number the
/// parse rounded (see [`BodyView::is_exact`]): two different requests would share a key.
fn body_field<'a>(
    body: &'a BodyView,
    path: &FieldPath,
) -> Result<Option<Cow<'a, str>>, RenderError> {
    let json = body.json().ok_or(RenderError::BodyNotJson)?;
    let Some(value) = lookup(json, path) else {
        return Ok(None);
    };
    if !body.is_exact() && has_float(value) {
        return Err(RenderError::Invalid(format!(
            "the JSON body has a number with more digits than a 64-bit float holds, and \
             `{{body.{path}}}` contains a non-integer or very large number; send such \
             numbers as JSON strings"
        )));
    }
    Ok(json_text(value))
}

/// Walk a field path; numeric segments index arrays and are ordinary keys in objects.
pub(crate) fn lookup<'v>(root: &'v Value, path: &FieldPath) -> Option<&'v Value> {
    path.0.iter().try_fold(root, |value, segment| match value {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => items.get(array_index(segment)?),
        _ => None,
    })
}

/// A canonical decimal index: digits only, no sign, no leading zero (`0` itself is fine).
fn array_index(segment: &str) -> Option<usize> {
    let canonical = segment.bytes().all(|b| b.is_ascii_digit())
        && !(segment.len() > 1 && segment.starts_with('0'));
    canonical.then(|| segment.parse().ok()).flatten()
}

fn json_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        Value::Array(_) | Value::Object(_) => Some(Cow::Owned(canonical::to_string(value))),
    }
}

/// Whether `value` contains a number stored as `f64` (the only kind that can be rounded).
fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// Lowercase hex SHA-256 of the canonical JSON body (of the raw bytes when the body has
/// a number the parse would round; see [`BodyView::is_exact`]).
fn body_hash(body: &BodyView) -> Result<String, RenderError> {
    body.json().ok_or(RenderError::BodyNotJson)?;
    let (_, bytes) = body.identity_bytes();
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    Ok(crate::fast_hex::encode(digest.as_ref()))
}

/// First occurrence of `name` in an `application/x-www-form-urlencoded` query: names and
/// values percent-decoded, `+` as space.
fn query_param<'q>(query: &'q str, name: &str) -> Option<Cow<'q, str>> {
    query
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .find(|(n, _)| form_decode(n) == name)
        .map(|(_, value)| form_decode(value))
}

/// Form decoding. Invalid UTF-8 becomes U+FFFD, which key validation then rejects.
fn form_decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['+', '%']) {
        return Cow::Borrowed(text);
    }
    let spaced = text.replace('+', " ");
    Cow::Owned(percent_decode_str(&spaced).decode_utf8_lossy().into_owned())
}

/// First value, trimmed of optional whitespace; unresolved unless printable ASCII.
fn header<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    let value = trim_ows(headers.get(name)?.as_bytes());
    is_printable(value)
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// `Idempotency-Key`: absent → unresolved; present but empty, not printable ASCII, or
/// a malformed sf-string → invalid. A value starting with `"` is an sf-string.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, RenderError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let value = trim_ows(value.as_bytes());
    let key = match value.first() {
        Some(b'"') => parse_sf_string(value)?,
        _ if is_printable(value) => String::from_utf8_lossy(value).into_owned(),
        _ => {
            return Err(RenderError::Invalid(
                "the Idempotency-Key header is not printable ASCII".to_owned(),
            ))
        }
    };
    if key.is_empty() {
        return Err(RenderError::Invalid(
            "the Idempotency-Key header is present but empty".to_owned(),
        ));
    }
    Ok(Some(key))
}

/// RFC 8941 §3.3.3 sf-string: `"` then printable ASCII with `\"` and `\\` escapes, then
/// `"` and nothing after it.
fn parse_sf_string(value: &[u8]) -> Result<String, RenderError> {
    let malformed = |why: &str| {
        RenderError::Invalid(format!(
            "the Idempotency-Key header is a malformed sf-string: {why}"
        ))
    };
    let mut out = String::with_capacity(value.len());
    let mut bytes = value.iter().skip(1);
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(char::from(e)),
                _ => return Err(malformed("`\\` must escape `\"` or `\\`")),
            },
            b'"' if bytes.len() == 0 => return Ok(out),
            b'"' => return Err(malformed("text after the closing quote")),
            0x20..=0x7E => out.push(char::from(b)),
            _ => return Err(malformed("a character that is not printable ASCII")),
        }
    }
    Err(malformed("no closing quote"))
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// Printable ASCII, 0x20..=0x7E (what a rendered key may contain).
fn is_printable(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| (0x20..=0x7E).contains(b))
}

// === parsing helpers ===

fn flush_literal(parts: &mut Vec<Part>, literal: &mut String) {
    if !literal.is_empty() {
        parts.push(Part::Literal(std::mem::take(literal)));
    }
}

/// The text between `{` and `}`.
fn parse_placeholder(inner: &str) -> Result<Source, TemplateError> {
    match inner {
        "method" => return Ok(Source::Method),
        "route" => return Ok(Source::Route),
        "body_hash" => return Ok(Source::BodyHash),
        "mcp.tool" => return Ok(Source::McpTool),
        "mcp.args_hash" => return Ok(Source::McpArgsHash),
        _ => {}
    }
    let Some((kind, name)) = inner.split_once('.') else {
        return Err(TemplateError::Unknown(inner.to_owned()));
    };
    if name.is_empty() && matches!(kind, "path" | "body" | "query" | "header") {
        return Err(TemplateError::EmptyName(inner.to_owned()));
    }
    let invalid = |reason| TemplateError::InvalidName {
        placeholder: inner.to_owned(),
        reason,
    };
    match kind {
        "path" if crate::path::is_valid_name(name) => Ok(Source::Path(name.to_owned())),
        "path" => Err(invalid(
            "a path capture name has only letters, digits and `_`",
        )),
        "body" => FieldPath::parse(name)
            .map(Source::Body)
            .ok_or_else(|| invalid("a field path has no empty segments (`a.b.0`)")),
        "query" => Ok(Source::Query(name.to_owned())),
        "header" => HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map(Source::Header)
            .map_err(|_| invalid("not a valid HTTP header name")),
        _ => Err(TemplateError::Unknown(inner.to_owned())),
    }
}

#[cfg(test)]
mod tests;
