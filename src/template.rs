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
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let _ = text;
        unimplemented!("template parsing")
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
    pub fn parse(text: &str) -> Option<FieldPath> {
        let _ = text;
        unimplemented!("field path parsing")
    }
}
