//! Reading typed values out of the positioned YAML tree while collecting every error.
//!
//! Each getter returns `None` after pushing an error (or when the field is absent), so
//! the section builders read straight down their fields and one bad value never hides
//! the next. A getter's error carries the value's position and the field's path.
//! String values pass through `${VAR}` expansion here, so a variable can supply any
//! value (`lease: ${LEASE:-30s}`) and an unset one is reported with its field path.
//!
//! A field's name is written once, where it is read: a map accepts the names its reader
//! asks for, and [`Walker::unknown_fields`], at the end of the walk, reports every field
//! of every map that nobody asked for (with the closest asked name as a suggestion) and
//! every field written twice. So a reader must ask for each of its fields whatever the
//! values of the others, as every section here does.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::choice::Choice;
use super::env::expand;
use super::error::{ConfigError, Pos};
use super::yaml::{Node, Value};
use crate::units::{parse_duration, parse_size};

/// A value, where it was written and the path of its field (so a check that runs later,
/// such as `lease` < `retention`, can point at the right line even for inherited values).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct At<T> {
    pub value: T,
    pub pos: Pos,
    pub path: String,
}

impl<T> At<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> At<U> {
        At {
            value: f(self.value),
            pos: self.pos,
            path: self.path,
        }
    }
}

/// The walk's state: the environment and everything found so far.
pub(crate) struct Walker<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigError>,
    /// Every map opened, to check its fields against the names its reader asked for.
    opened: Vec<Opened>,
}

/// The names a map's reader asked for, shared by its [`Fields`] and the walker.
type Asked = Rc<RefCell<Vec<&'static str>>>;

/// A map opened during the walk: its fields as written, and the names asked of it.
struct Opened {
    path: String,
    /// (name, where the name is written), in the file's order.
    written: Vec<(String, Pos)>,
    asked: Asked,
}

/// The fields of one map; the names read from it are the names it accepts.
pub(crate) struct Fields<'n> {
    path: String,
    pos: Pos,
    /// (name, where the name is written, value)
    entries: Vec<(&'n str, Pos, &'n Node)>,
    asked: Asked,
}

/// `a.b` / `b` for the root.
pub(crate) fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

impl<'n> Fields<'n> {
    /// The field's node, unless it is absent or null (null means "use the default").
    /// Asking for a name is what makes it a field of this map.
    pub fn get(&self, name: &'static str) -> Option<&'n Node> {
        let mut asked = self.asked.borrow_mut();
        if !asked.contains(&name) {
            asked.push(name);
        }
        drop(asked);
        self.entries
            .iter()
            .find(|(n, _, node)| *n == name && node.value != Value::Null)
            .map(|(_, _, node)| *node)
    }

    pub fn path(&self, name: &str) -> String {
        join(&self.path, name)
    }

    /// Where the map itself starts (for errors about a missing field).
    pub fn pos(&self) -> Pos {
        self.pos
    }
}

impl<'e> Walker<'e> {
    pub fn new(env: &'e dyn Fn(&str) -> Option<String>) -> Self {
        Walker {
            env,
            errors: Vec::new(),
            warnings: Vec::new(),
            opened: Vec::new(),
        }
    }

    pub fn error(&mut self, pos: Pos, path: &str, message: impl Into<String>) {
        self.errors.push(ConfigError::new(Some(pos), path, message));
    }

    pub fn warn(&mut self, pos: Pos, path: &str, message: impl Into<String>) {
        self.warnings
            .push(ConfigError::new(Some(pos), path, message));
    }

    /// Open a map (null is an empty map); its fields are checked at the walk's end by
    /// [`Walker::unknown_fields`].
    pub fn fields<'n>(&mut self, node: &'n Node, path: &str) -> Fields<'n> {
        let mut fields = Fields {
            path: path.to_string(),
            pos: node.pos,
            entries: Vec::new(),
            asked: Asked::default(),
        };
        let entries = match &node.value {
            Value::Map(entries) => entries,
            Value::Null => return fields,
            other => {
                self.error(
                    node.pos,
                    path,
                    format!("expected a map, found {}", other.kind()),
                );
                return fields;
            }
        };
        let mut written = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            written.push((key.name.clone(), key.pos));
            // The first of a repeated name is the one read.
            if !fields.entries.iter().any(|(n, _, _)| *n == key.name) {
                fields.entries.push((&key.name, key.pos, value));
            }
        }
        self.opened.push(Opened {
            path: path.to_string(),
            written,
            asked: fields.asked.clone(),
        });
        fields
    }

    /// Report, for every map opened, the fields its reader never asked for and the
    /// fields written twice. Called once, when the whole document has been read.
    pub fn unknown_fields(&mut self) {
        for map in std::mem::take(&mut self.opened) {
            let asked = map.asked.borrow();
            for (i, (name, pos)) in map.written.iter().enumerate() {
                let field_path = join(&map.path, name);
                if !asked.contains(&name.as_str()) {
                    let message = unknown_field(name, &asked);
                    self.error(*pos, &field_path, message);
                } else if let Some((_, first)) = map.written[..i].iter().find(|(n, _)| n == name) {
                    let message = format!("repeated field (first set at line {})", first.line);
                    self.error(*pos, &field_path, message);
                }
            }
        }
    }

    /// The items of a list (null is empty), with their paths.
    pub fn list<'n>(&mut self, node: &'n Node, path: &str) -> Vec<(String, &'n Node)> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| (format!("{path}[{i}]"), item))
                .collect(),
            Value::Null => Vec::new(),
            other => {
                self.error(
                    node.pos,
                    path,
                    format!("expected a list, found {}", other.kind()),
                );
                Vec::new()
            }
        }
    }

    /// A scalar's text after `${VAR}` expansion.
    pub fn text(&mut self, node: &Node, path: &str) -> Option<At<String>> {
        match &node.value {
            Value::Scalar(raw) => match expand(raw, self.env) {
                Ok(value) => Some(At {
                    value,
                    pos: node.pos,
                    path: path.to_string(),
                }),
                Err(e) => {
                    self.error(node.pos, path, e.to_string());
                    None
                }
            },
            Value::Null => None,
            other => {
                let message = format!("expected a single value, found {}", other.kind());
                self.error(node.pos, path, message);
                None
            }
        }
    }

    /// A scalar parsed by `parse`, whose error message is reported as is.
    pub fn parsed<T>(
        &mut self,
        node: &Node,
        path: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<At<T>> {
        let text = self.text(node, path)?;
        match parse(&text.value) {
            Ok(value) => Some(At {
                value,
                pos: text.pos,
                path: text.path,
            }),
            Err(message) => {
                self.error(text.pos, path, message);
                None
            }
        }
    }

    /// Field `name` of `f`, parsed by `parse`; `None` when absent or invalid.
    pub fn field<T>(
        &mut self,
        f: &Fields<'_>,
        name: &'static str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<At<T>> {
        let node = f.get(name)?;
        self.parsed(node, &f.path(name), parse)
    }

    pub fn string(&mut self, f: &Fields<'_>, name: &'static str) -> Option<At<String>> {
        self.field(f, name, |s| Ok(s.to_string()))
    }

    pub fn duration(&mut self, f: &Fields<'_>, name: &'static str) -> Option<At<Duration>> {
        self.field(f, name, parse_duration)
    }

    pub fn size(&mut self, f: &Fields<'_>, name: &'static str) -> Option<At<usize>> {
        self.field(f, name, parse_size)
    }

    pub fn count<T: std::str::FromStr>(
        &mut self,
        f: &Fields<'_>,
        name: &'static str,
    ) -> Option<At<T>> {
        self.field(f, name, |s| {
            s.trim()
                .parse()
                .map_err(|_| format!("invalid value {s:?}; expected a whole number"))
        })
    }

    pub fn flag(&mut self, f: &Fields<'_>, name: &'static str) -> Option<At<bool>> {
        self.field(f, name, |s| match s {
            "true" | "True" | "TRUE" => Ok(true),
            "false" | "False" | "FALSE" => Ok(false),
            _ => Err(format!("invalid value {s:?}; valid values: true, false")),
        })
    }

    pub fn choice<T: Choice>(&mut self, f: &Fields<'_>, name: &'static str) -> Option<At<T>> {
        self.field(f, name, T::from_name)
    }
}

/// "unknown field", with the closest valid name when there is one, else all of them.
fn unknown_field(name: &str, allowed: &[&str]) -> String {
    let closest = allowed
        .iter()
        .map(|a| (strsim::levenshtein(name, a), *a))
        .filter(|(d, a)| *d <= 2 && *d < a.len())
        .min();
    match closest {
        Some((_, suggestion)) => format!("unknown field {name:?}; did you mean {suggestion:?}?"),
        None => format!(
            "unknown field {name:?}; valid fields: {}",
            allowed.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::parse;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn unknown_fields_suggest_the_closest_name() {
        assert_eq!(
            unknown_field("leese", &["lease", "retention"]),
            "unknown field \"leese\"; did you mean \"lease\"?"
        );
        assert_eq!(
            unknown_field("zzz", &["lease", "retention"]),
            "unknown field \"zzz\"; valid fields: lease, retention"
        );
    }

    #[test]
    fn every_problem_is_collected_with_its_place() {
        let root = parse("a: 5\nbogus: 1\na: 6\nd: [1]\n").unwrap();
        let mut w = Walker::new(&no_env);
        let f = w.fields(&root, "top");
        assert!(w.duration(&f, "a").is_none());
        assert!(w.duration(&f, "d").is_none());
        w.unknown_fields();
        let places: Vec<String> = w
            .errors
            .iter()
            .map(|e| format!("{} {}", e.pos.unwrap(), e.path))
            .collect();
        assert_eq!(
            places,
            ["1:4 top.a", "4:4 top.d", "2:1 top.bogus", "3:1 top.a"]
        );
    }
}
