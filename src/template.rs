//! Key templates: `charge:{path.invoice_id}`, `{header.x-task-id}:{header.x-step}`.
//!
//! Parsing happens once, at config load; rendering happens per request and does no I/O.
//! A template renders to `Ok(None)` when one of its placeholders does not resolve, so the
//! caller can move on to the next key alternative.

use http::{HeaderMap, HeaderName, Method};

use crate::body::BodyView;
use crate::route::Captures;

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
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed `{{` at byte {0}")]
    Unclosed(usize),
    #[error("unknown placeholder `{{{0}}}`; valid: {{path.NAME}}, {{body.a.b}}, {{query.NAME}}, {{header.NAME}}, {{method}}, {{route}}, {{body_hash}}")]
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
    /// A present header has an invalid value (e.g. an empty `Idempotency-Key`).
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
                Part::Placeholder(Source::Body(_)) | Part::Placeholder(Source::BodyHash)
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
    pub fn render(&self, req: &RequestView<'_>) -> Result<Option<String>, RenderError> {
        let _ = req;
        unimplemented!("template rendering")
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
        "path" if crate::route::is_valid_name(name) => Ok(Source::Path(name.to_owned())),
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
mod tests {
    use super::*;

    fn parts(text: &str) -> Vec<Part> {
        Template::parse(text).unwrap().parts().to_vec()
    }

    fn lit(s: &str) -> Part {
        Part::Literal(s.to_owned())
    }

    fn ph(source: Source) -> Part {
        Part::Placeholder(source)
    }

    fn field(path: &str) -> Source {
        Source::Body(FieldPath::parse(path).unwrap())
    }

    #[test]
    fn parses_every_placeholder_kind() {
        assert_eq!(
            parts("charge:{path.invoice_id}"),
            [lit("charge:"), ph(Source::Path("invoice_id".into()))]
        );
        assert_eq!(
            parts("{body.a.b.0.c}{query.q}-{header.X-Task-Id}"),
            [
                ph(field("a.b.0.c")),
                ph(Source::Query("q".into())),
                lit("-"),
                ph(Source::Header(HeaderName::from_static("x-task-id"))),
            ]
        );
        assert_eq!(
            parts("{method} {route} {body_hash}"),
            [
                ph(Source::Method),
                lit(" "),
                ph(Source::Route),
                lit(" "),
                ph(Source::BodyHash),
            ]
        );
    }

    #[test]
    fn doubled_braces_are_literal_and_merge() {
        assert_eq!(parts("{{a}}"), [lit("{a}")]);
        assert_eq!(
            parts("x{{{method}}}y"),
            [lit("x{"), ph(Source::Method), lit("}y")]
        );
        assert_eq!(parts("é{{ü"), [lit("é{ü")]);
        assert!(parts("").is_empty());
        assert!(Template::parse("").unwrap().is_empty());
    }

    #[test]
    fn keeps_source_and_reports_uses() {
        let t = Template::parse("t:{body.id}:{path.a}:{path.b}").unwrap();
        assert_eq!(t.as_str(), "t:{body.id}:{path.a}:{path.b}");
        assert!(t.uses_body());
        assert_eq!(t.path_names().collect::<Vec<_>>(), ["a", "b"]);
        assert!(Template::parse("{body_hash}").unwrap().uses_body());
        assert!(!Template::parse("{header.x}").unwrap().uses_body());
    }

    #[test]
    fn rejects_malformed_templates() {
        use TemplateError::*;
        let e = |t: &str| Template::parse(t).unwrap_err();
        assert_eq!(e("a{path.x"), Unclosed(1));
        assert_eq!(e("a}b"), UnmatchedClose(1));
        assert_eq!(e("{nope}"), Unknown("nope".into()));
        assert_eq!(e("{}"), Unknown("".into()));
        assert_eq!(e("{path}"), Unknown("path".into()));
        assert_eq!(e("{cookie.a}"), Unknown("cookie.a".into()));
        assert_eq!(e("{ method }"), Unknown(" method ".into()));
        assert_eq!(e("{path.}"), EmptyName("path.".into()));
        assert_eq!(e("{header.}"), EmptyName("header.".into()));
        assert_eq!(e("{body.}"), EmptyName("body.".into()));
        assert_eq!(e("{query.}"), EmptyName("query.".into()));
        assert!(matches!(e("{path.a-b}"), InvalidName { .. }));
        assert!(matches!(e("{body.a..b}"), InvalidName { .. }));
        assert!(matches!(e("{header.a b}"), InvalidName { .. }));
        assert!(matches!(e("{header.é}"), InvalidName { .. }));
        assert!(e("{nope}").to_string().contains("{path.NAME}"));
        assert!(e("{header.a:b}").to_string().contains("header name"));
    }

    #[test]
    fn field_paths() {
        assert_eq!(
            FieldPath::parse("a.b.0").unwrap().segments(),
            ["a", "b", "0"]
        );
        assert_eq!(FieldPath::parse("a.b.0").unwrap().to_string(), "a.b.0");
        for bad in ["", ".", "a.", ".a", "a..b"] {
            assert_eq!(FieldPath::parse(bad), None, "{bad}");
        }
    }
}
