//! The MCP example (`examples/agents/mcp/`): the official Python SDK's server and an
//! agent's client, killed mid-call and run again; two steps of one job.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::base;
use crate::support::agents::{self, finish, python_agent};
use crate::support::harness;
use crate::support::poll::eventually;

/// The MCP example's server (the MCP Python SDK's MCPServer, formerly FastMCP), killed
/// with its port's listeners on drop.
struct McpServer(Child);

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn charges_logged(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// MCP: the agent's client is killed while the server runs the charge, and the job runs
/// again (a new process and session, whose JSON-RPC ids start over; the same intent,
/// job id + step + tool): it gets the one charge. Then a job whose two steps charge the
/// same customer the same amount: two intents (the arguments alone could not tell), both
/// charged, neither answered with the other's (or the first job's) charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_restarted_mid_call_gets_the_one_charge() {
    agents::ensure_peers();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("charges.log");
    let port = harness::free_port();
    let _server = McpServer(
        Command::new(agents::python())
            .arg(agents::example("mcp/server.py"))
            .arg(port.to_string())
            .arg(&log)
            .env("CHARGE_SECONDS", "2")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the MCP server"),
    );
    eventually(
        Duration::from_secs(30),
        "the MCP server listening",
        async || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    )
    .await;
    let upstream = format!("http://127.0.0.1:{port}");
    let idem = harness::start(&agents::idem_yaml("mcp", &upstream)).await;
    let client = |args: &[&str]| {
        let mut cmd = python_agent("mcp/client.py", dir.path(), args);
        cmd.env("IDEM_URL", base(&idem));
        cmd
    };
    let mut gone = client(&["job-7", "cus_1", "500"])
        .spawn()
        .expect("start the MCP client");
    eventually(Duration::from_secs(30), "the charge running", async || {
        charges_logged(&log).len() == 1
    })
    .await;
    gone.kill().await.expect("kill the client mid-call");
    let out = finish(client(&["job-7", "cus_1", "500"])).await;
    let charged = charges_logged(&log);
    assert_eq!(charged.len(), 1, "charged again: {charged:?}");
    let first = &out["results"][0];
    assert_eq!(
        first["intent"], "job-7:0:charge_card",
        "job id + step + tool"
    );
    assert_eq!(first["isError"], false, "{out}");
    let charge = charged[0]["charge"].as_str().unwrap();
    assert_eq!(first["text"], format!("charged cus_1 500 as {charge}"));

    let out = finish(client(&["job-8", "cus_1", "500", "cus_1", "500"])).await;
    let charged = charges_logged(&log);
    assert_eq!(charged.len(), 3, "a step was not charged: {charged:?}");
    for step in 0..2 {
        let r = &out["results"][step];
        assert_eq!(r["intent"], format!("job-8:{step}:charge_card"));
        let own = charged[step + 1]["charge"].as_str().unwrap();
        assert_eq!(r["text"], format!("charged cus_1 500 as {own}"), "{out}");
    }
}
