//! Per-intent text templates for `idem loadtest`: `{i}` (the intent's index), `{key}`
//! (its key, `lt-<run>-<i>`) and `{run}` (the run id), in the path, body, header values
//! and `--check-url`.

use std::fmt::Write;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// RFC 3986 unreserved characters stay as they are; everything else is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Index,
    Key,
    Run,
}

/// A parsed template. Unknown `{...}` groups are kept as text (a JSON body is full of
/// braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadTemplate {
    parts: Vec<Part>,
    /// URL-encode `{key}` and `{run}` (for `--check-url`).
    encode: bool,
}

/// What one intent fills a template with.
#[derive(Debug, Clone, Copy)]
pub struct IntentVars<'a> {
    pub index: u64,
    pub key: &'a str,
    pub run: &'a str,
}

impl LoadTemplate {
    pub fn parse(text: &str) -> LoadTemplate {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('{') {
            literal.push_str(&rest[..at]);
            rest = &rest[at..];
            let placeholder = [
                ("{i}", Part::Index),
                ("{key}", Part::Key),
                ("{run}", Part::Run),
            ]
            .into_iter()
            .find(|(p, _)| rest.starts_with(p));
            match placeholder {
                Some((p, part)) => {
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                    rest = &rest[p.len()..];
                }
                None => {
                    literal.push('{');
                    rest = &rest[1..];
                }
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        LoadTemplate {
            parts,
            encode: false,
        }
    }

    /// A template whose `{key}` and `{run}` are URL-encoded when rendered.
    pub fn url_encoded(mut self) -> LoadTemplate {
        self.encode = true;
        self
    }

    /// Whether the template has no placeholder (the same text for every intent).
    pub fn is_constant(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    pub fn render(&self, intent: IntentVars<'_>) -> String {
        let mut out = String::with_capacity(64);
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Index => {
                    let _ = write!(out, "{}", intent.index);
                }
                Part::Key => self.push(&mut out, intent.key),
                Part::Run => self.push(&mut out, intent.run),
            }
        }
        out
    }

    fn push(&self, out: &mut String, value: &str) {
        if self.encode {
            let _ = write!(out, "{}", utf8_percent_encode(value, COMPONENT));
        } else {
            out.push_str(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTENT: IntentVars<'static> = IntentVars {
        index: 7,
        key: "lt-ab:c-7",
        run: "ab:c",
    };

    #[test]
    fn placeholders_render_and_other_braces_stay() {
        let t = LoadTemplate::parse(r#"{"invoice":"inv-{i}","key":"{key}","x":{"y":1}}"#);
        assert_eq!(
            t.render(INTENT),
            r#"{"invoice":"inv-7","key":"lt-ab:c-7","x":{"y":1}}"#
        );
        assert!(!t.is_constant());
        assert!(LoadTemplate::parse("{}{ {i").is_constant());
        assert_eq!(LoadTemplate::parse("{}{ {i").render(INTENT), "{}{ {i");
    }

    #[test]
    fn url_encoding_applies_to_key_and_run_only() {
        let t = LoadTemplate::parse("http://h/count?key={key}&run={run}&i={i}").url_encoded();
        assert_eq!(
            t.render(INTENT),
            "http://h/count?key=lt-ab%3Ac-7&run=ab%3Ac&i=7"
        );
    }
}
