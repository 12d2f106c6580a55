//! Key templates: `Template::parse` on any text, and `render` of what parses against
//! an arbitrary request (path captures from a fuzzed path template, query, headers,
//! body). Never a panic; parsing is stable (`as_str` round-trips); rendering is
//! deterministic.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use idem::body::BodyView;
use idem::path::PathTemplate;
use idem::template::{RequestView, Template};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    template: &'a str,
    path_template: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    headers: Vec<(&'a [u8], &'a [u8])>,
    body: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let Ok(template) = Template::parse(input.template) else {
        return;
    };
    assert_eq!(template.as_str(), input.template);
    assert_eq!(Template::parse(template.as_str()).as_ref(), Ok(&template));
    let _ = template.uses_body();
    let _ = template.path_names().count();

    let captures = PathTemplate::parse(input.path_template)
        .ok()
        .and_then(|t| t.matches(input.path))
        .unwrap_or_default();
    let mut headers = HeaderMap::new();
    for (name, value) in input.headers.iter().take(16) {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    let body = BodyView::new(Bytes::copy_from_slice(input.body));
    let view = RequestView {
        method: &Method::POST,
        route: "fuzz",
        captures: &captures,
        query: input.query,
        headers: &headers,
        body: &body,
        mcp: None,
    };
    let first = template.render(&view);
    assert_eq!(first, template.render(&view), "rendering is deterministic");
});
