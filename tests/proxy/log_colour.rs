//! Log colour (issue 34): ANSI escapes only when stderr is a terminal, and never with
//! `NO_COLOR`. The binary is run with stderr to a file, and on a pseudo-terminal made by
//! util-linux's `script`, with and without `NO_COLOR`.

use std::process::{Command, Output};

/// `idem serve` for long enough to log that it listens, stopped by `timeout`.
const SERVE: &str =
    "serve --upstream http://127.0.0.1:9 --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_idem")
}

/// What idem logged within 2 s, and whether that held an escape sequence.
fn escapes(out: &Output) -> (String, bool) {
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("idem listening"), "nothing logged: {text}");
    let escaped = text.contains('\u{1b}');
    (text, escaped)
}

/// On a pseudo-terminal: `script` runs the command with its stdio on one, and copies
/// what it wrote to our stdout.
fn on_a_terminal(no_color: Option<&str>) -> Output {
    let mut cmd = Command::new("script");
    cmd.args([
        "-qec",
        &format!("timeout -s INT 2 {} {SERVE}", bin()),
        "/dev/null",
    ]);
    cmd.env("RUST_LOG", "info").env_remove("NO_COLOR");
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    cmd.output()
        .expect("run script (util-linux) for a pseudo-terminal")
}

#[test]
fn no_colour_in_a_file_or_pipe() {
    let out = Command::new("timeout")
        .args(["-s", "INT", "2", bin()])
        .args(SERVE.split(' '))
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let (text, escaped) = escapes(&out);
    assert!(!escaped, "escape codes in a pipe:\n{text:?}");
}

#[test]
fn colour_on_a_terminal_unless_no_color() {
    let (text, escaped) = escapes(&on_a_terminal(None));
    assert!(escaped, "a terminal gets colour:\n{text:?}");
    let (text, escaped) = escapes(&on_a_terminal(Some("1")));
    assert!(!escaped, "NO_COLOR honoured:\n{text:?}");
}
