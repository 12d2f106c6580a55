//! Shared helpers for integration tests: real processes on free loopback ports.
//! Each test binary uses a subset.
#![allow(dead_code)]

pub mod agents;
pub mod env;
pub mod faulty;
pub mod harness;
pub mod mcp;
pub mod otlp;
pub mod panics;
pub mod poll;
pub mod postgres;
pub mod raw_store;
pub mod redis;
pub mod redis_acl;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod store;
pub mod tls;
pub mod upstream;

/// `target/<name>` (or under `CARGO_TARGET_DIR`): where the tests install their real
/// peers (the MCP SDKs, Playwright) once, outside the sources.
pub fn peers_dir(name: &str) -> std::path::PathBuf {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        repo.join(target)
    };
    target.join(name)
}

/// Runs `cmd` to completion (installing a real peer: pip, npm); panics with its output
/// when it fails, so an install that did not work is never a silent skip.
pub fn run_ok(what: &str, cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Panics unless `tool --version` runs: `who` says which tests need it, `hint` how to
/// install it.
pub fn require_tool(tool: &str, who: &str, hint: &str) {
    let found = std::process::Command::new(tool)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "`{tool}` not found: {who}. {hint}");
}

/// A Python venv at `dir/venv`, made once; returns its `python`.
pub fn venv_python(dir: &std::path::Path) -> std::path::PathBuf {
    let python = dir.join("venv/bin/python");
    if !python.exists() {
        run_ok(
            "python3 -m venv",
            std::process::Command::new("python3")
                .args(["-m", "venv"])
                .arg(dir.join("venv")),
        );
    }
    python
}
