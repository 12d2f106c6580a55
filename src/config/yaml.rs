//! YAML text → a small tree of nodes that remember where they were written.
//!
//! We parse with `granit-parser` (the event parser under `serde-saphyr`, re-exported by
//! it) rather than deserialising with serde, because serde stops at the first error:
//! walking our own positioned tree lets `walk.rs` report unknown fields, type errors and
//! semantic errors together, each with its line and column.
//!
//! Every scalar stays text here (YAML's `30s`, `404` and `true` are all strings); the
//! walker decides what a field's text means. Anchors and aliases are resolved by copying,
//! within a node budget and a depth limit, so hostile input (alias bombs, deep nesting)
//! gets an error, never exhausted memory or a stack overflow.

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Options, Parser, ScalarStyle, Span};

use super::error::{ConfigError, Pos};

/// Most a document may expand to, aliases included, counting one per node plus the bytes
/// of its text (a config weighs a few kilobytes; this is 16 MiB).
const MAX_WEIGHT: usize = 16 << 20;
/// Deepest nesting accepted, aliases included; a config needs about 5.
const MAX_DEPTH: usize = 64;

/// A YAML node and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub pos: Pos,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// An empty value, `~` or `null`: the walker treats it as "not set".
    Null,
    Scalar(String),
    Seq(Vec<Node>),
    /// Entries in file order; duplicates are kept so the walker can report them.
    Map(Vec<(Key, Node)>),
}

/// A mapping key: always a string in idem's files.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Key {
    pub name: String,
    pub pos: Pos,
}

impl Value {
    /// What a node is, for "expected a map, found a list" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "nothing",
            Value::Scalar(_) => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a map",
        }
    }
}

/// A collection being built: its position, its anchor, and its children so far.
enum Frame {
    Seq(Pos, usize, Vec<Node>),
    Map(Pos, usize, Vec<(Key, Node)>, Option<Node>),
}

/// Parse one YAML document. An empty document is an empty map.
pub(crate) fn parse(text: &str) -> Result<Node, ConfigError> {
    let mut options = Options::default();
    options.emit_comments = false;
    options.flow_nesting_limit = MAX_DEPTH;
    options.block_nesting_limit = MAX_DEPTH;
    Builder::default().run(Parser::new_from_str_with_options(text, options))
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    /// Anchor id → (node, its weight, its depth).
    anchors: HashMap<usize, (Node, usize, usize)>,
    weight: usize,
    root: Option<Node>,
    documents: usize,
}

fn pos_of(span: &Span) -> Pos {
    Pos::new(span.start.line(), span.start.col() + 1)
}

fn err(pos: Pos, message: impl Into<String>) -> ConfigError {
    ConfigError::new(Some(pos), "", message)
}

impl Builder {
    fn run<'a, I>(mut self, events: I) -> Result<Node, ConfigError>
    where
        I: Iterator<Item = Result<(Event<'a>, Span), serde_saphyr::granit_parser::ScanError>>,
    {
        for event in events {
            let (event, span) = event.map_err(|e| {
                let m = e.marker();
                err(
                    Pos::new(m.line(), m.col() + 1),
                    format!("invalid YAML: {}", e.info()),
                )
            })?;
            let pos = pos_of(&span);
            match event {
                Event::DocumentStart(..) => {
                    self.documents += 1;
                    if self.documents > 1 {
                        return Err(err(pos, "a second YAML document; idem reads one"));
                    }
                }
                Event::Scalar(text, style, anchor, _tag) => {
                    let null = style == ScalarStyle::Plain
                        && matches!(&*text, "" | "~" | "null" | "Null" | "NULL");
                    let value = if null {
                        Value::Null
                    } else {
                        Value::Scalar(text.into_owned())
                    };
                    let node = Node { pos, value };
                    let weight = measure(&node).0;
                    self.finish(node, anchor, weight)?;
                }
                Event::SequenceStart(_, anchor, _) => {
                    self.open(pos)?;
                    self.stack.push(Frame::Seq(pos, anchor, Vec::new()));
                }
                Event::MappingStart(_, anchor, _) => {
                    self.open(pos)?;
                    self.stack.push(Frame::Map(pos, anchor, Vec::new(), None));
                }
                Event::SequenceEnd | Event::MappingEnd => self.close()?,
                Event::Alias(id) => {
                    let Some((weight, depth)) = self.anchors.get(&id).map(|a| (a.1, a.2)) else {
                        return Err(err(pos, "alias to an unknown anchor"));
                    };
                    if self.stack.len() + depth > MAX_DEPTH {
                        return Err(err(pos, "aliases nest too deeply"));
                    }
                    self.charge(pos, weight)?;
                    let node = Node {
                        pos,
                        ..self.anchors[&id].0.clone()
                    };
                    self.finish(node, 0, 0)?;
                }
                _ => {}
            }
        }
        Ok(self.root.unwrap_or(Node {
            pos: Pos::new(1, 1),
            value: Value::Map(Vec::new()),
        }))
    }

    fn open(&mut self, pos: Pos) -> Result<(), ConfigError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(err(pos, "the document nests too deeply"));
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConfigError> {
        let (node, anchor) = match self.stack.pop() {
            Some(Frame::Seq(pos, anchor, items)) => (
                Node {
                    pos,
                    value: Value::Seq(items),
                },
                anchor,
            ),
            Some(Frame::Map(pos, anchor, entries, _)) => (
                Node {
                    pos,
                    value: Value::Map(entries),
                },
                anchor,
            ),
            None => return Ok(()),
        };
        // Only the collection itself is new: its children were counted as they came.
        self.finish(node, anchor, 1)
    }

    /// Count `weight` against the budget, before anything is copied.
    fn charge(&mut self, pos: Pos, weight: usize) -> Result<(), ConfigError> {
        self.weight = self.weight.saturating_add(weight);
        if self.weight > MAX_WEIGHT {
            return Err(err(
                pos,
                "the document is too large (aliases expand too far)",
            ));
        }
        Ok(())
    }

    /// A node is complete: charge its new `weight`, remember its anchor, give it to its
    /// parent.
    fn finish(&mut self, node: Node, anchor: usize, weight: usize) -> Result<(), ConfigError> {
        self.charge(node.pos, weight)?;
        if anchor != 0 {
            let (size, depth) = measure(&node);
            self.anchors.insert(anchor, (node.clone(), size, depth));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq(_, _, items)) => items.push(node),
            Some(Frame::Map(_, _, entries, key)) => match key.take() {
                None => *key = Some(node),
                Some(k) => {
                    let name = match k.value {
                        Value::Scalar(s) => s,
                        Value::Null => String::new(),
                        _ => return Err(err(k.pos, "a map key must be a plain string")),
                    };
                    entries.push((Key { name, pos: k.pos }, node));
                }
            },
        }
        Ok(())
    }
}

/// Weight (nodes plus text bytes) and depth (a scalar has depth 1) of a finished subtree.
fn measure(node: &Node) -> (usize, usize) {
    match &node.value {
        Value::Null => (1, 1),
        Value::Scalar(text) => (1 + text.len(), 1),
        Value::Seq(items) => items.iter().fold((1, 1), |(n, d), c| {
            let (cn, cd) = measure(c);
            (n + cn, d.max(cd + 1))
        }),
        Value::Map(entries) => entries.iter().fold((1, 1), |(n, d), (k, c)| {
            let (cn, cd) = measure(c);
            (n + 1 + k.name.len() + cn, d.max(cd + 1))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(node: &Node) -> &str {
        match &node.value {
            Value::Scalar(s) => s,
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn keys_and_values_carry_one_based_positions() {
        let root = parse("a: 1\nb:\n  c: [x, \"y\"]\n").unwrap();
        let Value::Map(entries) = &root.value else {
            panic!()
        };
        assert_eq!(entries[1].0.name, "b");
        assert_eq!(entries[1].0.pos, Pos::new(2, 1));
        let Value::Map(inner) = &entries[1].1.value else {
            panic!()
        };
        assert_eq!(inner[0].0.pos, Pos::new(3, 3));
        let Value::Seq(items) = &inner[0].1.value else {
            panic!()
        };
        assert_eq!(scalar(&items[1]), "y");
        assert_eq!(items[1].pos, Pos::new(3, 10));
    }

    #[test]
    fn empty_document_is_an_empty_map_and_blank_values_are_null() {
        assert_eq!(parse("").unwrap().value, Value::Map(Vec::new()));
        let root = parse("a:\nb: ~\nc: ''\n").unwrap();
        let Value::Map(entries) = root.value else {
            panic!()
        };
        assert_eq!(entries[0].1.value, Value::Null);
        assert_eq!(entries[1].1.value, Value::Null);
        assert_eq!(entries[2].1.value, Value::Scalar(String::new()));
    }

    #[test]
    fn aliases_are_copied() {
        let root = parse("a: &x {k: v}\nb: *x\n").unwrap();
        let Value::Map(entries) = root.value else {
            panic!()
        };
        assert_eq!(entries[0].1.value, entries[1].1.value);
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.message.starts_with("invalid YAML"), "{e}");
        assert!(e.pos.is_some());
    }

    #[test]
    fn hostile_documents_are_refused() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..8 {
            bomb.push_str(&format!(
                "b{i}: &b{i} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
                p = if i == 0 {
                    "a".to_string()
                } else {
                    format!("b{}", i - 1)
                }
            ));
        }
        assert!(parse(&bomb).unwrap_err().message.contains("too large"));
        let big = format!(
            "a: &a {}\nb: [{}]\n",
            "x".repeat(1 << 20),
            ["*a"; 20].join(", ")
        );
        assert!(parse(&big).unwrap_err().message.contains("too large"));
        assert!(parse(&"[".repeat(1000)).is_err());
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
        assert!(parse("? [a]\n: 1\n").is_err());
    }
}
