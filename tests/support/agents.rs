//! Real agent runtimes for tests/mcp/agents.rs: the programs of `examples/agents/` (DBOS,
//! LangGraph, the OpenAI Agents SDK, the Vercel AI SDK, an MCP client and server), run as
//! child processes with the real packages. Never a mock of a framework: where one needs a
//! model, the program scripts the framework's own fake or model class.
//!
//! The packages are installed once into `target/agent-peers/` (a Python venv and a
//! `node_modules`) from PyPI and npm, at the versions pinned in `examples/agents/`:
//! `requirements.txt` (the runtimes) with `constraints.txt` (everything they pull in) and
//! `package.json` with `package-lock.json` (run.sh installs the same there); a missing
//! `python3` or `node` fails with an install hint.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `examples/agents/<rest>`.
pub fn example(rest: &str) -> PathBuf {
    repo().join("examples/agents").join(rest)
}

fn peers_dir() -> PathBuf {
    super::peers_dir("agent-peers")
}

pub fn python() -> PathBuf {
    peers_dir().join("venv/bin/python")
}

/// Install the pinned runtimes into `target/agent-peers/` unless the same pins are
/// there already (once per process; the stamp holds the pin files' contents).
pub fn ensure_peers() -> &'static Path {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY.get_or_init(|| {
        let dir = peers_dir();
        std::fs::create_dir_all(&dir).expect("create target/agent-peers");
        let requirements = std::fs::read_to_string(example("requirements.txt"))
            .expect("read examples/agents/requirements.txt");
        let constraints = std::fs::read_to_string(example("constraints.txt"))
            .expect("read examples/agents/constraints.txt");
        let package = std::fs::read_to_string(example("package.json"))
            .expect("read examples/agents/package.json");
        let lock = std::fs::read_to_string(example("package-lock.json"))
            .expect("read examples/agents/package-lock.json");
        let pins = format!("{requirements}\n{constraints}\n{package}\n{lock}");
        let stamp = dir.join("installed.pins");
        if std::fs::read_to_string(&stamp).ok().as_deref() != Some(pins.as_str()) {
            super::require_tool(
                "python3",
                "the agent runtime tests run the real frameworks",
                "Install Python 3.10+ with venv (Debian: apt-get install python3 python3-venv).",
            );
            super::require_tool(
                "node",
                "the agent runtime tests run the real frameworks",
                "Install Node.js 18+ and npm (Debian: apt-get install nodejs npm).",
            );
            super::venv_python(&dir);
            super::run_ok(
                "pip install the agent runtimes (examples/agents/requirements.txt)",
                Command::new(python())
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--disable-pip-version-check",
                        "-r",
                    ])
                    .arg(example("requirements.txt"))
                    .arg("-c")
                    .arg(example("constraints.txt")),
            );
            std::fs::write(dir.join("package.json"), &package).expect("write package.json");
            std::fs::write(dir.join("package-lock.json"), &lock).expect("write package-lock.json");
            super::run_ok(
                "npm install the Vercel AI SDK (examples/agents/package.json)",
                Command::new("npm")
                    .args(["install", "--silent", "--no-audit", "--no-fund"])
                    .current_dir(&dir),
            );
            std::fs::write(&stamp, &pins).expect("write install stamp");
        }
        // ES modules resolve packages next to the script, not through NODE_PATH.
        std::fs::copy(
            example("vercel_ai/agent.mjs"),
            dir.join("vercel-ai-agent.mjs"),
        )
        .expect("copy agent.mjs next to node_modules");
        dir
    })
}

/// An example's route config with the charge API at `upstream` instead of its
/// loopback default (idem's listeners are moved to free ports by the harness).
pub fn idem_yaml(runtime: &str, upstream: &str) -> String {
    let yaml = std::fs::read_to_string(example(&format!("{runtime}/idem.yaml")))
        .unwrap_or_else(|e| panic!("read examples/agents/{runtime}/idem.yaml: {e}"));
    let from = ["http://127.0.0.1:3002", "http://127.0.0.1:3003"]
        .into_iter()
        .find(|u| yaml.contains(u))
        .expect("the example's upstream url");
    yaml.replace(from, upstream)
}

/// A Python program of the examples (`dbos/agent.py`, ...) run in `dir`.
pub fn python_agent(script: &str, dir: &Path, args: &[&str]) -> tokio::process::Command {
    ensure_peers();
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(example(script)).args(args).current_dir(dir);
    cmd.kill_on_drop(true);
    cmd
}

/// The Vercel AI SDK program (`vercel_ai/agent.mjs`), its saved steps in `dir`.
pub fn node_agent(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let peers = ensure_peers();
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(peers.join("vercel-ai-agent.mjs"))
        .args(args)
        .current_dir(dir);
    cmd.kill_on_drop(true);
    cmd
}

/// How an agent program ended: its JSON lines, and whether it was SIGKILLed.
#[derive(Debug)]
pub struct Outcome {
    pub killed: bool,
    pub success: bool,
    pub lines: Vec<Value>,
    pub stderr: String,
}

impl Outcome {
    /// The last JSON line (the result, or `{"crashed_after": ...}`).
    pub fn last(&self) -> &Value {
        self.lines
            .last()
            .unwrap_or_else(|| panic!("the agent printed no JSON line; stderr:\n{}", self.stderr))
    }
}

/// Runs an agent program to its end (or its SIGKILL).
pub async fn outcome(mut cmd: tokio::process::Command) -> Outcome {
    let out = cmd.output().await.expect("run the agent program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    Outcome {
        killed: out.status.signal() == Some(9),
        success: out.status.success(),
        lines: stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the program with `IDEM_CRASH_AFTER_CHARGE=1`: it must SIGKILL itself right after
/// its first charge answered; returns that answer (`crashed_after`).
pub async fn crash_after_charge(mut cmd: tokio::process::Command) -> Value {
    cmd.env("IDEM_CRASH_AFTER_CHARGE", "1");
    let out = outcome(cmd).await;
    assert!(
        out.killed,
        "the agent was not SIGKILLed after the charge: {:?}\n{}",
        out.lines, out.stderr
    );
    out.last()["crashed_after"].clone()
}

/// Runs the program to a successful end; its last JSON line.
pub async fn finish(cmd: tokio::process::Command) -> Value {
    let out = outcome(cmd).await;
    assert!(
        out.success && !out.lines.is_empty(),
        "the agent did not finish: {:?}\n{}",
        out.lines,
        out.stderr
    );
    out.last().clone()
}
