//! `GET /`: the operators' console (SPEC §1 "Unknown outcomes"). One HTML file with its
//! CSS and JS inline (`console.html`), compiled into the binary: no build step, nothing
//! fetched from anywhere. The page holds no data; it reads `/v1/unknown` and posts
//! resolutions with the same token rules as any other client.
//!
//! A strict Content-Security-Policy allows exactly the page's own script and style (by
//! their SHA-256, computed once from the file) and requests to this listener; nothing
//! may frame it.

use std::sync::LazyLock;

use base64::Engine;
use http::{header, HeaderValue, StatusCode};

use super::reply::{text, AdminResponse};

const PAGE: &str = include_str!("console.html");

static CSP: LazyLock<HeaderValue> = LazyLock::new(|| {
    let policy = format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; \
         img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash(inline(PAGE, "script")),
        hash(inline(PAGE, "style")),
    );
    HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
});

pub(super) fn page() -> AdminResponse {
    let mut r = text(StatusCode::OK, PAGE);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CONTENT_SECURITY_POLICY, CSP.clone());
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The text between `<tag>` and `</tag>` (the page has one of each).
fn inline<'a>(page: &'a str, tag: &str) -> &'a str {
    let open = format!("<{tag}>");
    let start = page.find(&open).map_or(0, |i| i + open.len());
    let end = page[start..]
        .find(&format!("</{tag}>"))
        .map_or(start, |i| start + i);
    &page[start..end]
}

fn hash(source: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, source.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_the_inline_script_and_style() {
        let script = inline(PAGE, "script");
        let style = inline(PAGE, "style");
        assert!(script.contains("/v1/unknown") && style.contains("dialog"));
        let policy = CSP.to_str().unwrap();
        assert!(policy.contains(&hash(script)) && policy.contains(&hash(style)));
        assert!(
            !PAGE.contains("style=\""),
            "inline style attributes are blocked by the policy"
        );
        assert!(
            !PAGE.contains("http://") && !PAGE.contains("https://"),
            "nothing external"
        );
        assert_eq!(PAGE.matches("<script").count(), 1);
    }
}
