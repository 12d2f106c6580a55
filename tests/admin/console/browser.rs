//! A real browser for the console tests: Debian's `chromium`, driven by Playwright for
//! Python (`tests/admin/console/console.py`). Playwright is installed once into
//! `target/browser-peers/venv` from PyPI at the version pinned below, the way the MCP
//! tests install their SDKs (`support/mcp.rs`); Playwright's own browser download is
//! never used (`executable_path` is the system chromium). A missing `python3` or
//! `chromium` fails with an install hint: these tests never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub const PLAYWRIGHT: &str = "playwright==1.65.2";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn peers_dir() -> PathBuf {
    super::support::peers_dir("browser-peers")
}

fn found(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Where `name` is on `PATH` (Playwright wants a path, not a name).
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The venv's python and the chromium binary, installing Playwright if needed (once
/// per process).
pub fn ensure() -> &'static (PathBuf, PathBuf) {
    static READY: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    READY.get_or_init(|| {
        let chromium = ["chromium", "chromium-browser"]
            .into_iter()
            .find_map(on_path)
            .unwrap_or_else(|| {
                panic!(
                    "`chromium` not found: the console tests drive a real browser. \
                     Install Debian's chromium (apt-get install chromium), or run scripts/test.sh, \
                     which does."
                )
            });
        let dir = peers_dir();
        let python = dir.join("venv/bin/python");
        let stamp = dir.join(format!("installed {PLAYWRIGHT}"));
        if !stamp.exists() {
            assert!(
                found("python3"),
                "`python3` not found: the console tests run Playwright for Python. Install \
                 Python 3.10+ with venv (Debian: apt-get install python3 python3-venv)."
            );
            std::fs::create_dir_all(&dir).expect("create target/browser-peers");
            crate::support::venv_python(&dir);
            crate::support::run_ok(
                "pip install playwright (PyPI)",
                Command::new(&python).args(["-m", "pip", "install", "-q", PLAYWRIGHT]),
            );
            std::fs::write(&stamp, "").expect("write install stamp");
        }
        (python, chromium)
    })
}

/// Runs `console.py SCENARIO ADMIN_URL ARGS…`; panics with its output unless it passed.
pub async fn scenario(name: &str, admin_url: &str, args: &[&str]) {
    let (python, chromium) = tokio::task::spawn_blocking(ensure).await.unwrap();
    let script: &Path = &repo().join("tests/admin/console/console.py");
    let out: Output = tokio::process::Command::new(python)
        .arg(script)
        .arg(name)
        .arg(admin_url)
        .args(args)
        .env("IDEM_TEST_CHROMIUM", chromium)
        .output()
        .await
        .expect("run tests/admin/console/console.py");
    assert!(
        out.status.success(),
        "console scenario {name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
