//! Configuration errors: every problem in a file, each with its place.
//!
//! Loading never stops at the first problem (vector's `compile`): each check pushes a
//! [`ConfigError`] and the caller gets them all in one [`ConfigErrors`], so an operator
//! fixes a file in one pass instead of one error per `idem check`. Each error names the
//! file, the 1-based line and column, and the field's path (`routes[1].on_concurrent`),
//! and its message says what is valid (sozu's `ConfigError`).

use std::fmt;
use std::path::{Path, PathBuf};

/// A 1-based line and column in the configuration text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    pub fn new(line: usize, col: usize) -> Pos {
        Pos { line, col }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// One problem in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, when the text came from one.
    pub file: Option<PathBuf>,
    /// Where in the text; `None` for problems with no place (e.g. an unreadable file).
    pub pos: Option<Pos>,
    /// The field's path, e.g. `routes[1].on_concurrent`; empty for the document itself.
    pub path: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl ConfigError {
    pub fn new(pos: Option<Pos>, path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            file: None,
            pos,
            path: path.into(),
            message: message.into(),
        }
    }

    /// The line, if the error has a place (handy in tests).
    pub fn line(&self) -> Option<usize> {
        self.pos.map(|p| p.line)
    }
}

impl fmt::Display for ConfigError {
    /// `file:line:col: path: message`; parts that are unknown are left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_place(f, self.file.as_deref(), self.pos)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Writes `file:line:col: ` (or as much of it as is known).
pub(crate) fn write_place(
    f: &mut impl fmt::Write,
    file: Option<&Path>,
    pos: Option<Pos>,
) -> fmt::Result {
    match (file, pos) {
        (Some(file), Some(pos)) => write!(f, "{}:{pos}: ", file.display()),
        (Some(file), None) => write!(f, "{}: ", file.display()),
        (None, Some(pos)) => write!(f, "{pos}: "),
        (None, None) => Ok(()),
    }
}

/// Every error found in one configuration, in the order of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// A single error without a place, e.g. an unreadable file.
    pub fn single(file: Option<&Path>, message: impl Into<String>) -> Self {
        let mut error = ConfigError::new(None, "", message);
        error.file = file.map(Path::to_path_buf);
        ConfigErrors(vec![error])
    }

    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Attach the file to every error, sort by position (output reads like the file) and
    /// drop repeats (a bad value in `defaults:` is found once per route that inherits it).
    pub(crate) fn finish(mut errors: Vec<ConfigError>, file: Option<&Path>) -> Self {
        for e in &mut errors {
            e.file = file.map(Path::to_path_buf);
        }
        errors.sort_by(|a, b| {
            (a.pos.unwrap_or_default(), &a.path, &a.message).cmp(&(
                b.pos.unwrap_or_default(),
                &b.path,
                &b.message,
            ))
        });
        errors.dedup();
        ConfigErrors(errors)
    }
}

impl fmt::Display for ConfigErrors {
    /// One error per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_line_column_and_path() {
        let e = ConfigError::new(
            Some(Pos::new(14, 7)),
            "routes[1].on_concurrent",
            "invalid value \"wiat\"; valid values: conflict, wait",
        );
        let errors = ConfigErrors::finish(vec![e], Some(Path::new("config/idem.yaml")));
        assert_eq!(
            errors.to_string(),
            "config/idem.yaml:14:7: routes[1].on_concurrent: invalid value \"wiat\"; valid values: conflict, wait"
        );
    }

    #[test]
    fn errors_are_sorted_one_per_line() {
        let errors = ConfigErrors::finish(
            vec![
                ConfigError::new(Some(Pos::new(9, 1)), "b", "second"),
                ConfigError::new(Some(Pos::new(2, 3)), "a", "first"),
            ],
            None,
        );
        assert_eq!(errors.to_string(), "2:3: a: first\n9:1: b: second");
    }

    #[test]
    fn placeless_error_has_only_the_file() {
        let errors = ConfigErrors::single(Some(Path::new("x.yaml")), "cannot read: gone");
        assert_eq!(errors.to_string(), "x.yaml: cannot read: gone");
    }
}
