//! Real MCP peers for the MCP tests: a server made with the official Python SDK
//! (`tests/mcp/server.py`) and clients made with the official Python and TypeScript
//! SDKs (`tests/mcp/client.py`, `tests/mcp/client.mjs`). Never a mock of the protocol.
//!
//! The SDKs are installed once into `target/mcp-peers/` (a Python venv and a
//! `node_modules`), from PyPI and npm, at the versions pinned below; a missing `python3`
//! or `node` fails with an install hint.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The Python SDK: 2.x speaks both eras (`ClientSession`: session era; `Client`: probes
/// `server/discover`, the 2026-07-28 era).
pub const PYTHON_SDK: &str = "mcp==2.3.0";
/// The TypeScript SDK (session era).
pub const TYPESCRIPT_SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn peers_dir() -> PathBuf {
    super::peers_dir("mcp-peers")
}

fn python() -> PathBuf {
    peers_dir().join("venv/bin/python")
}

/// Install the SDKs into `target/mcp-peers/` unless they are there (once per process).
pub fn ensure_peers() -> &'static Path {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY.get_or_init(|| {
        let dir = peers_dir();
        std::fs::create_dir_all(&dir).expect("create target/mcp-peers");
        let stamp = dir.join(format!("installed {PYTHON_SDK} {TYPESCRIPT_SDK}").replace('/', "_"));
        if !stamp.exists() {
            super::require_tool(
                "python3",
                "the MCP tests run the official SDKs",
                "Install Python 3.10+ with venv (Debian: apt-get install python3 python3-venv).",
            );
            super::require_tool(
                "node",
                "the MCP tests run the official SDKs",
                "Install Node.js 18+ and npm (Debian: apt-get install nodejs npm).",
            );
            super::venv_python(&dir);
            super::run_ok(
                "pip install the MCP Python SDK",
                Command::new(python()).args(["-m", "pip", "install", "-q", PYTHON_SDK]),
            );
            if !dir.join("package.json").exists() {
                std::fs::write(
                    dir.join("package.json"),
                    "{\"private\": true, \"type\": \"module\"}\n",
                )
                .expect("write package.json");
            }
            super::run_ok(
                "npm install the MCP TypeScript SDK",
                Command::new("npm")
                    .args([
                        "install",
                        "--silent",
                        "--no-audit",
                        "--no-fund",
                        TYPESCRIPT_SDK,
                    ])
                    .current_dir(&dir),
            );
            std::fs::write(&stamp, "").expect("write install stamp");
        }
        // ES modules resolve packages next to the script, not through NODE_PATH.
        std::fs::copy(repo().join("tests/mcp/client.mjs"), dir.join("client.mjs"))
            .expect("copy client.mjs next to node_modules");
        dir
    })
}

/// The Python SDK server (`tests/mcp/server.py`) on a free port, killed on drop.
pub struct McpServer {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl McpServer {
    /// `answers`: `json` (one `application/json` answer per call) or `sse` (event
    /// streams, progress notifications included).
    pub fn start(answers: &str) -> McpServer {
        ensure_peers();
        let dir = tempfile::tempdir().expect("temp dir");
        // Created here, so that a log the server never wrote to reads as no executions,
        // and one that cannot be read at all fails the test rather than reading as zero.
        std::fs::write(dir.path().join("executions.log"), "").expect("create executions.log");
        let port = super::harness::free_port();
        let child = Command::new(python())
            .arg(repo().join("tests/mcp/server.py"))
            .arg(port.to_string())
            .arg(dir.path().join("executions.log"))
            .arg(answers)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log")).expect("log"))
            .spawn()
            .expect("start the MCP test server");
        let server = McpServer { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "MCP server did not start:\n{}",
                server.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A closed gate: a `charge_customer` call with `"gate": <this path>` in its
    /// arguments runs until [`McpServer::open_gate`] (a slow call without a race against
    /// the clock).
    pub fn gate(&self) -> String {
        let path = self.dir.path().join("gate");
        std::fs::write(&path, "").expect("create gate");
        path.to_string_lossy().into_owned()
    }

    pub fn open_gate(&self) {
        let _ = std::fs::remove_file(self.dir.path().join("gate"));
    }

    /// How many times the server ran `event` (a tool name, or `confirm_refund_asked`).
    /// Fails if the log cannot be read or holds a line that is not an entry (a line
    /// still being written, without its newline yet, is not counted).
    pub fn executions(&self, event: &str) -> usize {
        let path = self.dir.path().join("executions.log");
        let log = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let complete = log.rfind('\n').map_or("", |end| &log[..end]);
        complete
            .lines()
            .map(|line| {
                serde_json::from_str::<Value>(line)
                    .unwrap_or_else(|e| panic!("executions.log: {line:?} is not JSON: {e}"))
            })
            .filter(|entry| entry["event"] == event)
            .count()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python SDK client: `era` is `session` (`ClientSession`) or `modern` (`Client`).
pub fn python_client(era: &str, url: &str, steps: &[&str]) -> tokio::process::Command {
    ensure_peers();
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(repo().join("tests/mcp/client.py"))
        .arg(era)
        .arg(url)
        .args(steps);
    cmd.kill_on_drop(true);
    cmd
}

/// The TypeScript SDK client (session era).
pub fn typescript_client(url: &str, steps: &[&str]) -> tokio::process::Command {
    let dir = ensure_peers();
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(dir.join("client.mjs"))
        .arg(url)
        .args(steps)
        .current_dir(dir);
    cmd.kill_on_drop(true);
    cmd
}

/// Run a client to the end; its one line of JSON output. A client that raised (an SDK
/// that turned an answer into an exception) fails the test with its stderr.
pub async fn outcome(mut client: tokio::process::Command) -> Value {
    let out = client.output().await.expect("run MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "MCP client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|_| panic!("client output is not JSON: {stdout}"))
}

/// A `call:TOOL:ARGS` step.
pub fn call(tool: &str, args: &Value) -> String {
    format!("call:{tool}:{args}")
}
