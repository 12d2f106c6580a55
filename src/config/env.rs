//! `${NAME}` and `${NAME:-default}` in string values, so secrets (Redis passwords, the
//! admin token) stay out of the file.
//!
//! Expansion goes through a lookup function instead of reading the process environment
//! directly (linkerd's `Strings` seam): tests inject their variables and never call
//! `std::env::set_var`, which races with every other test thread.
//!
//! Rules, as in POSIX shells and docker compose:
//! - `${NAME}`: the variable's value; unset is an error (so a missing secret is caught
//!   at load time, not at the first Redis AUTH).
//! - `${NAME:-default}`: the default when the variable is unset *or empty*.
//! - `$${` is a literal `${`; any other `$` is literal.
//! - Expansion happens once: a value containing `${...}` is not expanded again.

/// Why a value could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvError {
    /// `${NAME}` with `NAME` unset and no default.
    Unset(String),
    /// `${` without `}`, or a name that is not `[A-Za-z_][A-Za-z0-9_]*`.
    Malformed(String),
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvError::Unset(name) => write!(
                f,
                "environment variable {name} is not set; set it, or give a default with ${{{name}:-default}}"
            ),
            EnvError::Malformed(why) => write!(f, "{why}"),
        }
    }
}

/// The process environment, for [`expand`] outside tests.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Expand every `${NAME}` / `${NAME:-default}` in `text`.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, EnvError> {
    if !text.contains('$') {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(inner) = tail.strip_prefix("${") {
            let end = inner.find('}').ok_or_else(|| {
                EnvError::Malformed(format!(
                    "unclosed `${{` in {text:?}; write `${{NAME}}`, or `$${{` for a literal `${{`"
                ))
            })?;
            out.push_str(&substitute(&inner[..end], lookup)?);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of one `NAME` or `NAME:-default` (the text between `${` and `}`).
fn substitute(body: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, EnvError> {
    let (name, default) = match body.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (body, None),
    };
    if !valid_name(name) {
        return Err(EnvError::Malformed(format!(
            "invalid variable reference `${{{body}}}`; use `${{NAME}}` or `${{NAME:-default}}` \
             with NAME made of letters, digits and `_`"
        )));
    }
    match (lookup(name), default) {
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_string()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_string()),
        (None, None) => Err(EnvError::Unset(name.to_string())),
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            "LOOP" => Some("${TOKEN}".into()),
            _ => None,
        }
    }

    fn x(text: &str) -> Result<String, EnvError> {
        expand(text, &env)
    }

    #[test]
    fn plain_text_is_untouched() {
        assert_eq!(
            x("charge:{path.invoice_id}").unwrap(),
            "charge:{path.invoice_id}"
        );
        assert_eq!(x("cost $5 or $").unwrap(), "cost $5 or $");
    }

    #[test]
    fn variables_and_defaults() {
        assert_eq!(x("${TOKEN}").unwrap(), "s3cret");
        assert_eq!(
            x("redis://:${TOKEN}@h:6379").unwrap(),
            "redis://:s3cret@h:6379"
        );
        assert_eq!(
            x("${MISSING:-redis://127.0.0.1}").unwrap(),
            "redis://127.0.0.1"
        );
        assert_eq!(x("${EMPTY:-fallback}").unwrap(), "fallback");
        assert_eq!(x("${EMPTY}").unwrap(), "");
        assert_eq!(x("${MISSING:-}").unwrap(), "");
        assert_eq!(x("${TOKEN:-unused}").unwrap(), "s3cret");
    }

    #[test]
    fn expansion_is_not_recursive_and_can_be_escaped() {
        assert_eq!(x("${LOOP}").unwrap(), "${TOKEN}");
        assert_eq!(x("$${TOKEN}").unwrap(), "${TOKEN}");
    }

    #[test]
    fn unset_variable_is_named() {
        let e = x("a${NOPE}b").unwrap_err();
        assert_eq!(e, EnvError::Unset("NOPE".into()));
        assert!(e.to_string().contains("NOPE is not set"));
    }

    #[test]
    fn malformed_references() {
        for bad in ["${TOKEN", "${}", "${1A}", "${A B}", "${A-b}", "${é}"] {
            assert!(matches!(x(bad), Err(EnvError::Malformed(_))), "{bad}");
        }
    }
}
