//! The README's `console` examples, run (issue 34): every `$ command` of a ```console
//! block in "Quick start with curl" and "Configuration" is run by `sh` and its output
//! compared with the lines under it, so that what the README shows stays true.
//!
//! Why a small runner of our own rather than `trycmd` (which also reads `console`
//! blocks from Markdown): the quick start's examples talk to a running idem and to the
//! example payments API on the ports the README names (8080, 9901, 3000). This runner
//! starts both exactly as the README's `sh` block says (`examples/payments_api.py`,
//! `serve --config config/idem.yaml`), moved to free ports, and rewrites those ports in
//! each command; `trycmd` runs commands against fixed files and cannot start servers or
//! rewrite ports, and it would be one more crate to build on a shared 2-core CI.
//!
//! The rules, kept few so that the README stays the reference:
//! - `idem` and `cargo run --release --` both run the binary under test, and `keys`
//!   commands are given `--admin` with the test's admin port (the default is 9901);
//! - the output compared is stdout, or stderr when stdout is empty (an error);
//! - the test's ports in the output are shown as the README's;
//! - timestamps (`2026-12-02T16:32:27.335Z`) compare as `<time>`, and the `loadtest`
//!   report's run id, timings, latencies and replay/conflict split (which vary with
//!   scheduling) as `N`;
//!   an HTTP `date:` header as `date: <time>`; every other character must match, line
//!   by line, trailing spaces aside.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::harness::{free_port, try_send};
use support::poll::eventually;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of `## title` up to the next `## `.
fn section(title: &str) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("README has no section {title:?}"));
    let rest = &readme[start + 4..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
}

/// The bodies of the section's fenced blocks of `lang`.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```\n").expect("an unclosed block");
        out.push(body[..end].to_owned());
        rest = &body[end..];
    }
    out
}

/// `$ command` (with `\` continuation lines) and the output under it.
fn steps(block: &str) -> Vec<(String, String)> {
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut continued = false;
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push((command.to_owned(), String::new()));
        } else if let Some((command, expected)) = steps.last_mut() {
            if continued {
                command.push('\n');
                command.push_str(line);
            } else {
                expected.push_str(line);
                expected.push('\n');
            }
        }
        continued = line.ends_with('\\') && steps.last().is_some_and(|s| s.1.is_empty());
    }
    steps
}

/// Timestamps as `<time>`; in `loadtest`'s report, the numbers that vary run to run.
fn normalized(text: &str) -> String {
    let mut out = String::new();
    for line in text.replace('\r', "").lines() {
        // The HTTP `Date` header hyper adds to every answer.
        if line.to_ascii_lowercase().starts_with("date: ") {
            out.push_str("date: <time>\n");
            continue;
        }
        let words: Vec<String> = line.split(' ').map(timestamps).collect();
        let varying = |i: usize| match words[0].as_str() {
            "requests:" | "latency:" => words[i].chars().any(|c| c.is_ascii_digit()),
            "intent" => words[i].starts_with("lt-"),
            "responses:" => i > 0 && (words[i - 1] == "replayed" || words[i - 1] == "(409)"),
            _ => false,
        };
        let words: Vec<&str> = (0..words.len())
            .map(|i| if varying(i) { "N" } else { words[i].as_str() })
            .collect();
        out.push_str(words.join(" ").trim_end());
        out.push('\n');
    }
    out.trim_end().to_owned()
}

/// Every `YYYY-MM-DDTHH:MM:SS[.fff]Z` in `word` as `<time>`.
fn timestamps(word: &str) -> String {
    let bytes = word.as_bytes();
    let shape = |at: usize| -> Option<usize> {
        let digits = |r: std::ops::Range<usize>| {
            bytes
                .get(r.clone())
                .is_some_and(|b| b.iter().all(u8::is_ascii_digit))
        };
        let ok = digits(at..at + 4)
            && bytes.get(at + 4) == Some(&b'-')
            && digits(at + 5..at + 7)
            && bytes.get(at + 10) == Some(&b'T')
            && digits(at + 11..at + 13)
            && digits(at + 17..at + 19);
        let mut end = at + 19;
        if ok && bytes.get(end) == Some(&b'.') {
            end += 1;
            while bytes.get(end).is_some_and(u8::is_ascii_digit) {
                end += 1;
            }
        }
        (ok && bytes.get(end) == Some(&b'Z')).then_some(end + 1)
    };
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        match shape(i) {
            Some(end) => {
                out.push_str("<time>");
                i = end;
            }
            None => {
                out.push(bytes[i] as char);
                i += 1;
            }
        }
    }
    out
}

/// A folder whose `idem` is the binary under test, for `PATH`.
fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idem"), dir.path().join("idem")).unwrap();
    dir
}

/// Runs `command` with `sh` in `cwd`, `idem` on the `PATH`; what it printed.
fn run(command: &str, cwd: &Path, bin: &Path) -> String {
    let command = command.replace("cargo run --release -- ", "idem ");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new("sh")
        .args(["-c", &command])
        .current_dir(cwd)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("REDIS_PASSWORD")
        .env_remove("IDEM_ADMIN_TOKEN")
        .env_remove("IDEM_STORE")
        .output()
        .expect("run sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match stdout.trim().is_empty() {
        true => String::from_utf8_lossy(&out.stderr).into_owned(),
        false => stdout,
    }
}

#[track_caller]
fn check(command: &str, expected: &str, actual: &str) {
    assert_eq!(
        normalized(actual),
        normalized(expected),
        "README example `{command}` printed something else (left: actual)"
    );
}

/// Configuration: the file the section shows, saved as `idem.yaml`, checked with and
/// without `REDIS_PASSWORD`.
#[test]
fn configuration_examples_print_what_the_readme_shows() {
    let text = section("Configuration");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("idem.yaml"), &blocks(&text, "yaml")[0]).unwrap();
    let bin = bin_dir();
    let all: Vec<(String, String)> = blocks(&text, "console")
        .iter()
        .flat_map(|b| steps(b))
        .collect();
    assert!(all.len() >= 2, "{all:?}");
    for (command, expected) in &all {
        check(command, expected, &run(command, dir.path(), bin.path()));
    }
}

/// Kills a child process on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The quick start: the payments API and idem started as its `sh` block says (on free
/// ports), then every `console` example in order, against them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_start_examples_print_what_the_readme_shows() {
    let text = section("Quick start with curl");
    let start = &blocks(&text, "sh")[0];
    assert!(
        start.contains("python3 examples/payments_api.py &")
            && start.contains("cargo run --release -- serve --config config/idem.yaml &"),
        "{start}"
    );
    let (api, proxy, admin) = (free_port(), free_port(), free_port());
    let sample = std::fs::read_to_string(repo().join("config/idem.yaml")).unwrap();
    let moved = [
        ("listen: 0.0.0.0:8080", format!("listen: 127.0.0.1:{proxy}")),
        (
            "listen: 127.0.0.1:9901",
            format!("listen: 127.0.0.1:{admin}"),
        ),
        (
            "url: http://127.0.0.1:3000",
            format!("url: http://127.0.0.1:{api}"),
        ),
    ];
    let mut config = sample.clone();
    for (from, to) in &moved {
        assert!(config.contains(from), "config/idem.yaml has no {from:?}");
        config = config.replace(from, to);
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("idem.yaml"), config).unwrap();
    let _api = Running(
        Command::new("python3")
            .arg(repo().join("examples/payments_api.py"))
            .arg(api.to_string())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 examples/payments_api.py"),
    );
    // idem's stderr goes to a file, read at the end: a panic there fails the test.
    let idem_log = dir.path().join("idem.stderr");
    let idem = Running(
        Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["serve", "--config"])
            .arg(dir.path().join("idem.yaml"))
            .env("NO_COLOR", "1")
            .env_remove("IDEM_ADMIN_TOKEN")
            .env_remove("IDEM_STORE")
            .stderr(std::fs::File::create(&idem_log).unwrap())
            .spawn()
            .expect("idem serve"),
    );
    let ready = format!("http://127.0.0.1:{admin}/readyz");
    let counted = format!("http://127.0.0.1:{api}/count?key=x");
    eventually(Duration::from_secs(20), "idem and the API up", async || {
        let idem = try_send("GET", &ready, &[], "").await;
        let api = try_send("GET", &counted, &[], "").await;
        idem.is_ok_and(|r| r.status == 200) && api.is_ok()
    })
    .await;

    let ports = [
        ("localhost:8080", proxy),
        ("127.0.0.1:8080", proxy),
        ("localhost:9901", admin),
        ("127.0.0.1:3000", api),
    ];
    let bin = bin_dir();
    let mut ran = 0;
    for block in blocks(&text, "console") {
        for (command, expected) in steps(&block) {
            let mut local = command.clone();
            for (from, port) in ports {
                local = local.replace(from, &format!("127.0.0.1:{port}"));
            }
            if local.contains(" -- keys ") {
                // The CLI's default admin URL is the README's 127.0.0.1:9901.
                local.push_str(&format!(" --admin http://127.0.0.1:{admin}"));
            }
            let mut printed = tokio::task::block_in_place(|| run(&local, dir.path(), bin.path()));
            for (readme, port) in [("127.0.0.1:8080", proxy), ("127.0.0.1:3000", api)] {
                printed = printed.replace(&format!("127.0.0.1:{port}"), readme);
            }
            check(&command, &expected, &printed);
            ran += 1;
        }
    }
    assert!(ran >= 6, "only {ran} examples found");
    drop(idem);
    let log = std::fs::read_to_string(&idem_log).unwrap_or_default();
    support::panics::assert_no_panic_in_log("idem serve (README examples)", &log);
}
