//! Text from the store, made safe to print on an operator's terminal.
//!
//! Keys, scopes and stored bodies come from callers (a scope can be any JSON string of
//! a request body) or from a store someone else can write to. Printed raw, an ESC
//! (`\x1b`) starts a terminal escape sequence: it can recolour or hide lines, move the
//! cursor over the table, set the window title, and on some terminals write to the
//! clipboard or answer back as if typed. So every `idem keys` output goes through here:
//! control characters (C0, DEL, C1, which includes the one-byte CSI `\u{9b}`) and the
//! Unicode bidirectional overrides (which reorder what is shown, "Trojan Source") are
//! written as visible `\u{…}` escapes. JSON output escapes C0 itself but passes DEL,
//! C1 and the overrides through.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control and bidi-override character escaped, newlines included
/// (one table cell, one value).
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_except(text, |_| false)
}

/// `text` with every control and bidi-override character escaped but its line breaks
/// and tabs (a whole output).
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_except(text, |c| c == '\n' || c == '\t')
}

fn escape_except(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| !keep(c) && (c.is_control() || is_bidi_control(c));
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The explicit embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069) and
/// the marks (U+200E, U+200F, U+061C): invisible, they change the order text shows in.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        assert!(matches!(escape("charge:inv_1"), Cow::Borrowed(_)));
        assert_eq!(escape("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("\x7f\u{9b}31m\r\0"), "\\u{7f}\\u{9b}31m\\u{d}\\u{0}");
        assert_eq!(escape("x\u{202e}gpj.exe"), "x\\u{202e}gpj.exe");
        assert_eq!(escape("two\nlines"), "two\\u{a}lines");
        assert_eq!(
            escape_lines("two\nlines\t\x1b]0;t\x07"),
            "two\nlines\t\\u{1b}]0;t\\u{7}"
        );
        assert_eq!(
            escape("Zürich €"),
            "Zürich €",
            "printable text is left alone"
        );
    }
}
