//! The configuration's tests: whole documents (defaults, inheritance, and every
//! validation rule with the place it reports; variables injected through
//! `from_yaml_str_with_env`), and the types it builds, as loaded. A section's own unit
//! tests sit in its file.
//!
//! - `fields.rs`: what each field becomes, defaults and inheritance, `${VAR}`, the table.
//! - `rules.rs`: each validation rule, the error or warning it gives and where.
//! - `mcp.rs`: the `mcp:` section of a route.

mod fields;
mod mcp;
mod rules;

pub(super) use super::*;
pub(super) use http::Method;

pub(super) const MINIMAL: &str = "upstream:\n  url: http://127.0.0.1:3000\n";

pub(super) fn env(name: &str) -> Option<String> {
    match name {
        "REDIS_PASSWORD" => Some("hunter2".into()),
        "LEASE" => Some("45s".into()),
        _ => None,
    }
}

pub(super) fn load(text: &str) -> Result<Config, ConfigErrors> {
    Config::from_yaml_str_with_env(text, Some(std::path::Path::new("t.yaml")), env)
}

/// The warnings but the one every file with routes and no `default: reject` gets
/// (issue 46 §6), which the tests of other warnings leave aside.
pub(super) fn other_warnings(c: &Config) -> Vec<&String> {
    c.warnings
        .iter()
        .filter(|w| !w.contains("passthrough beside protected routes"))
        .collect()
}

pub(super) fn ok(text: &str) -> Config {
    load(text).unwrap_or_else(|e| panic!("expected a valid config, got:\n{e}"))
}

/// The errors as `line:col path` plus message, for assertions.
pub(super) fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e
            .errors()
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.pos.map_or("-".into(), |p| p.to_string()),
                    e.path,
                    e.message
                )
            })
            .collect(),
    }
}

pub(super) fn has(errors: &[String], needle: &str) {
    assert!(
        errors.iter().any(|e| e.contains(needle)),
        "no {needle:?} in {errors:#?}"
    );
}

pub(super) fn route(text: &str) -> String {
    format!("{MINIMAL}routes:\n  - name: r\n    path: /items/{{id}}\n{text}")
}

#[test]
fn status_set_never_stores_retryable_4xx() {
    let set = StatusSet::default();
    assert!(set.contains(200));
    assert!(set.contains(402));
    assert!(!set.contains(409));
    assert!(!set.contains(429));
    assert!(!set.contains(503));
}
