//! Parsers for single route-setting values: methods, status entries, header names,
//! fingerprint parts, templates. Each turns one string into a typed value or a message
//! saying what would be valid; `policy_fields.rs` applies them to lists and maps.

use http::{HeaderName, Method};

use crate::path::PathTemplate;
use crate::template::{FieldPath, Template};

/// An HTTP method, written in upper case as on the wire (`post` would never match).
pub fn method(text: &str) -> Result<Method, String> {
    let method = Method::from_bytes(text.as_bytes())
        .map_err(|_| format!("invalid method {text:?}; e.g. POST, PUT, PATCH, DELETE"))?;
    if text.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(format!(
            "invalid method {text:?}; methods are case-sensitive, write {:?}",
            text.to_ascii_uppercase()
        ));
    }
    Ok(method)
}

/// One `store_statuses` entry: a class (`2xx`) or a code (`404`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusEntry {
    Class(u8),
    Code(u16),
}

pub fn status_entry(text: &str) -> Result<StatusEntry, String> {
    let t = text.trim();
    let bytes = t.as_bytes();
    if bytes.len() == 3
        && bytes[1..].eq_ignore_ascii_case(b"xx")
        && (b'1'..=b'5').contains(&bytes[0])
    {
        return Ok(StatusEntry::Class(bytes[0] - b'0'));
    }
    match t.parse::<u16>() {
        Ok(code) if (100..=599).contains(&code) => Ok(StatusEntry::Code(code)),
        _ => Err(format!(
            "invalid status {text:?}; use a class 1xx to 5xx or a code 100 to 599"
        )),
    }
}

/// Headers idem must own itself: forwarding the key in one of them would corrupt framing
/// or routing.
const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
];

/// A header name, lower-cased (as `HeaderName` stores it).
pub fn header_name(text: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(text.trim().as_bytes())
        .map_err(|_| format!("invalid header name {text:?}; e.g. Idempotency-Key"))
}

/// The header the upstream receives the key in.
pub fn forward_header(text: &str) -> Result<HeaderName, String> {
    let name = header_name(text)?;
    if RESERVED_HEADERS.contains(&name.as_str()) {
        return Err(format!(
            "{text:?} is a connection-level header and cannot carry the key; use e.g. \
             Idempotency-Key or the provider's own (PayPal-Request-Id)"
        ));
    }
    Ok(name)
}

/// One part of a list-form `fingerprint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FingerprintPart {
    Method,
    Path,
    Body,
}

pub fn fingerprint_part(text: &str) -> Result<FingerprintPart, String> {
    match text {
        "method" => Ok(FingerprintPart::Method),
        "path" => Ok(FingerprintPart::Path),
        "body" => Ok(FingerprintPart::Body),
        _ => Err(format!(
            "invalid value {text:?}; valid values: method, path, body"
        )),
    }
}

/// A dotted JSON field path for `fingerprint: {body: [...]}`.
pub fn field_path(text: &str) -> Result<FieldPath, String> {
    FieldPath::parse(text.trim()).ok_or_else(|| {
        format!("invalid field path {text:?}; e.g. amount or customer.id or items.0.sku")
    })
}

/// A key or scope template; the parser's message says what is wrong.
pub fn template(text: &str) -> Result<Template, String> {
    Template::parse(text).map_err(|e| format!("invalid template {text:?}: {e}"))
}

/// A route path template; the parser's message says what is wrong.
pub fn path_template(text: &str) -> Result<PathTemplate, String> {
    PathTemplate::parse(text).map_err(|e| format!("invalid path: {e}"))
}

/// Route names appear in metrics labels, logs and admin URLs (`/v1/keys/{route}/…`).
pub fn route_name(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        // `.` and `..` would be dot segments in admin URLs.
        && !matches!(text, "." | "..");
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!(
            "invalid route name {text:?}; use 1 to 64 letters, digits, `_`, `-` or `.` \
             (names appear in metrics and admin URLs)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_upper_case_tokens() {
        assert_eq!(method("POST"), Ok(Method::POST));
        assert_eq!(method("M-SEARCH").unwrap().as_str(), "M-SEARCH");
        assert!(method("post").unwrap_err().contains("write \"POST\""));
        assert!(method("PO ST").is_err());
        assert!(method("").is_err());
    }

    #[test]
    fn status_entries() {
        assert_eq!(status_entry("2xx"), Ok(StatusEntry::Class(2)));
        assert_eq!(status_entry("4XX"), Ok(StatusEntry::Class(4)));
        assert_eq!(status_entry("404"), Ok(StatusEntry::Code(404)));
        for bad in ["6xx", "0xx", "99", "600", "2x", "abc", "x2x", "é"] {
            assert!(status_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_names_are_lower_cased_and_reserved_ones_refused() {
        assert_eq!(header_name("X-API-Key").unwrap().as_str(), "x-api-key");
        assert_eq!(
            forward_header("PayPal-Request-Id").unwrap().as_str(),
            "paypal-request-id"
        );
        assert!(header_name("bad header").is_err());
        assert!(forward_header("Content-Length")
            .unwrap_err()
            .contains("connection-level"));
    }

    #[test]
    fn fingerprint_parts_and_route_names() {
        assert_eq!(fingerprint_part("body"), Ok(FingerprintPart::Body));
        assert!(fingerprint_part("headers")
            .unwrap_err()
            .contains("method, path, body"));
        assert_eq!(
            route_name("charge_invoice.v2").unwrap(),
            "charge_invoice.v2"
        );
        assert!(route_name("charge invoice").is_err());
        assert!(route_name("").is_err());
        assert!(path_template("invoices")
            .unwrap_err()
            .contains("start with `/`"));
        assert!(path_template("/a/{id}/{id}").unwrap_err().contains("twice"));
    }
}
