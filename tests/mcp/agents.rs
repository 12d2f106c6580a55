//! Agent runtimes (issue 47): one side effect across a crash and a resume, with the real
//! frameworks. Each test runs a program of `examples/agents/` (the real DBOS, LangGraph,
//! OpenAI Agents SDK, Vercel AI SDK, MCP SDK; a scripted model where the framework needs
//! one: its own fake or model class, never a network LLM) against idem, configured by
//! that example's own `idem.yaml`, and a charge API that counts executions per key.
//!
//! The crash: with `IDEM_CRASH_AFTER_CHARGE=1` the program SIGKILLs itself right after
//! the charge answered, before the runtime recorded the step (DBOS's step output, a
//! LangGraph checkpoint, the application's saved run); the MCP client is killed by the
//! test while the server is still running the call. Then the runtime resumes, and the
//! resumed step must get the first execution's answer as a replay: one charge.
//!
//! The runtimes are installed once into `target/agent-peers/` (support/agents.rs).
//!
//! Checked once that these tests catch a key taken from the call id: with the OpenAI
//! example's route keyed by `{header.x-tool-call-id}`, the re-run got a second execution
//! instead of the replay and the shared `call_0` became one key for two intents; with the
//! Vercel helper keyed by `toolCallId`, the resumed step was executed again. Both failed.
//! `a_route_keyed_by_the_tool_call_id_charges_twice_and_loses_an_intent` keeps that
//! failure mode under test.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::agents::{self, crash_after_charge, finish, node_agent, python_agent};
use support::harness::{self, post, Idem};
use support::poll::eventually;
use support::postgres::PgServer;
use support::upstream::MockUpstream;

async fn idem_for(runtime: &str, upstream: &MockUpstream) -> Idem {
    harness::start(&agents::idem_yaml(runtime, &upstream.url())).await
}

fn base(idem: &Idem) -> String {
    harness::url(idem, "")
}

const ONE_CHARGE: &str = r#"[{"customer": "cus_1", "amount": 500}]"#;
const TWO_CHARGES: &str =
    r#"[{"customer": "cus_1", "amount": 500}, {"customer": "cus_2", "amount": 700}]"#;

/// The resumed step got the first execution's answer, replayed, under the same intent.
#[track_caller]
fn assert_replay_of(resumed: &Value, first: &Value) {
    assert_eq!(first["status"], 201, "{first}");
    assert_eq!(first["replayed"], false, "{first}");
    assert_eq!(
        resumed["intent"], first["intent"],
        "the intent changed: {resumed}"
    );
    assert_eq!(resumed["replayed"], true, "not a replay: {resumed}");
    assert_eq!(
        resumed["body"], first["body"],
        "the resumed step got another answer"
    );
}

/// Two results of two intents: each executed for itself (its own key, a fresh answer).
#[track_caller]
fn assert_both_executed(a: &Value, b: &Value, upstream: &MockUpstream) {
    for r in [a, b] {
        assert_eq!(r["status"], 201, "{r}");
        assert_eq!(r["replayed"], false, "a replay of another intent: {r}");
        let intent = r["intent"].as_str().expect("an intent");
        assert_eq!(r["body"]["key"], intent, "{r}");
        assert_eq!(upstream.executions(intent), 1, "{intent}");
    }
    assert_ne!(a["intent"], b["intent"]);
    assert_ne!(
        a["body"]["id"], b["body"]["id"],
        "one got the other's result"
    );
}

/// DBOS (system database on a private PostgreSQL): the worker dies after the charge,
/// before the step's output is recorded; DBOS recovers the workflow on the next launch
/// and re-runs the step with the same workflow id and step id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dbos_recovery_gets_the_charge_made_before_the_crash() {
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let idem = idem_for("dbos", &upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = |workflow: &str| {
        let mut cmd = python_agent("dbos/agent.py", dir.path(), &[workflow, "cus_1", "500"]);
        cmd.env("IDEM_URL", base(&idem))
            .env("DBOS_SYSTEM_DATABASE_URL", pg.url());
        cmd
    };
    let first = crash_after_charge(agent("checkout-1")).await;
    assert_eq!(first["intent"], "checkout-1:1", "workflow id + step id");
    assert_eq!(upstream.total_executions(), 1);
    let resumed = finish(agent("checkout-1")).await;
    assert_replay_of(&resumed, &first);
    assert_eq!(upstream.total_executions(), 1, "charged again on recovery");
    // Another workflow is another intent.
    let other = finish(agent("checkout-2")).await;
    assert_both_executed(&first, &other, &upstream);
    assert_eq!(upstream.total_executions(), 2);
}

/// LangGraph (SqliteSaver), killed in the charging node at the two timings of the issue:
/// before the previous step's checkpoint was written (`durability=exit`: the resume
/// re-runs that step, and the node gets a new task id) and after it (`sync`: the same
/// task id). Thread + step + node + call index is the same intent either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_resume_from_the_checkpoint_gets_the_charge_at_both_kill_timings() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("langgraph", &upstream).await;
    for (n, durability) in ["exit", "sync"].into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let thread = format!("thread-{durability}");
        let agent = || {
            let mut cmd = python_agent(
                "langgraph/agent.py",
                dir.path(),
                &[thread.as_str(), ONE_CHARGE],
            );
            cmd.env("IDEM_URL", base(&idem))
                .env("LANGGRAPH_DURABILITY", durability);
            cmd
        };
        let first = crash_after_charge(agent()).await;
        assert_eq!(first["intent"], format!("{thread}:2:charge:0"));
        assert_eq!(upstream.total_executions(), n as u64 + 1);
        let resumed = finish(agent()).await;
        let resumed = &resumed["results"][0];
        assert_replay_of(resumed, &first);
        assert_eq!(
            upstream.total_executions(),
            n as u64 + 1,
            "{durability}: charged again on resume"
        );
        // Why the task id is not the key: it changes when the resume starts earlier.
        if durability == "exit" {
            assert_ne!(resumed["task_id"], first["task_id"], "{durability}");
        } else {
            assert_eq!(resumed["task_id"], first["task_id"], "{durability}");
        }
    }
}

/// LangGraph: one node makes two charges that the model gave the same call id (as
/// Gemini does): the call's index keeps them apart; both run, neither is replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_two_intents_with_one_call_id_both_run() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("langgraph", &upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = python_agent(
        "langgraph/agent.py",
        dir.path(),
        &["thread-same", TWO_CHARGES],
    );
    cmd.env("IDEM_URL", base(&idem)).env("SAME_CALL_ID", "1");
    let out = finish(cmd).await;
    assert_both_executed(&out["results"][0], &out["results"][1], &upstream);
    assert_eq!(upstream.total_executions(), 2);
}

fn openai_agent(
    idem: &Idem,
    dir: &std::path::Path,
    run: &str,
    invoice: &str,
) -> tokio::process::Command {
    let charges = json!([{"customer": "cus_1", "amount": 500, "invoice": invoice}]).to_string();
    let mut cmd = python_agent("openai_agents/agent.py", dir, &[run, charges.as_str()]);
    cmd.env("IDEM_URL", base(idem));
    cmd
}

/// OpenAI Agents SDK: the application re-runs the run with its run id after the crash;
/// the scripted model mints a new call id and a new idempotency_key of its own and
/// rewords the note: still the run's intent, one charge, the first answer replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_rerun_with_the_run_id_gets_the_charge_made_before_the_crash() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("openai_agents", &upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let first = crash_after_charge(openai_agent(&idem, dir.path(), "run-1", "inv_1")).await;
    assert_eq!(first["intent"], "run-1:charge_card:inv_1");
    let mut rerun = openai_agent(&idem, dir.path(), "run-1", "inv_1");
    rerun.env("REWORD", "1");
    let out = finish(rerun).await;
    let resumed = &out["results"][0];
    assert_replay_of(resumed, &first);
    assert_ne!(
        resumed["tool_call_id"], first["tool_call_id"],
        "the model re-minted its call id"
    );
    assert_eq!(upstream.total_executions(), 1);
}

/// OpenAI Agents SDK: two runs whose model calls its (different) charge `call_0` both
/// execute. (Within one run the SDK 0.24 refuses a reused call id itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_two_intents_with_one_call_id_both_run() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("openai_agents", &upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for (run, invoice) in [("run-a", "inv_a"), ("run-b", "inv_b")] {
        let mut cmd = openai_agent(&idem, dir.path(), run, invoice);
        cmd.env("SAME_CALL_ID", "1");
        let out = finish(cmd).await;
        assert_eq!(out["results"][0]["tool_call_id"], "call_0");
        results.push(out["results"][0].clone());
    }
    assert_both_executed(&results[0], &results[1], &upstream);
}

/// Why the call id is no key: the same two scenarios against a route keyed by the
/// model's call id charge twice across the crash, and refuse the second intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_keyed_by_the_tool_call_id_charges_twice_and_loses_an_intent() {
    let upstream = MockUpstream::start().await;
    let right = r#"key: ["{header.x-idem-intent}", "charge:{body.invoice}"]"#;
    let yaml = agents::idem_yaml("openai_agents", &upstream.url());
    assert!(
        yaml.contains(right),
        "the example's key changed: update this test"
    );
    let idem = harness::start(&yaml.replace(right, r#"key: "{header.x-tool-call-id}""#)).await;
    let dir = tempfile::tempdir().unwrap();
    crash_after_charge(openai_agent(&idem, dir.path(), "run-1", "inv_1")).await;
    let out = finish(openai_agent(&idem, dir.path(), "run-1", "inv_1")).await;
    assert_eq!(out["results"][0]["replayed"], false);
    assert_eq!(
        upstream.total_executions(),
        2,
        "a re-minted call id is a new key"
    );
    let mut statuses = Vec::new();
    for (run, invoice) in [("run-a", "inv_a"), ("run-b", "inv_b")] {
        let mut cmd = openai_agent(&idem, dir.path(), run, invoice);
        cmd.env("SAME_CALL_ID", "1");
        statuses.push(finish(cmd).await["results"][0]["status"].clone());
    }
    assert_eq!(
        statuses,
        [json!(201), json!(422)],
        "the second intent is refused"
    );
    assert_eq!(upstream.total_executions(), 3);
}

/// Without a runtime id, the natural key (the invoice) holds a repeat in which the model
/// re-minted its idempotency key and reworded the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_runtime_id_the_natural_key_holds_a_reworded_repeat() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("openai_agents", &upstream).await;
    let url = harness::url(&idem, "/charges");
    let json = [("content-type", "application/json")];
    let first = post(
        &url,
        &json,
        r#"{"customer": "cus_1", "amount": 500, "invoice": "inv_9", "note": "Renewal of the monthly plan", "idempotency_key": "k-1"}"#,
    )
    .await;
    let again = post(
        &url,
        &json,
        r#"{"idempotency_key": "k-2", "note": "Monthly plan, renewal", "invoice": "inv_9", "amount": 500, "customer": "cus_1"}"#,
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(again.replayed(), "{}", again.text());
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.executions("charge:inv_9"), 1);
    assert_eq!(upstream.total_executions(), 1);
}

/// Vercel AI SDK (MockLanguageModelV3 from `ai/test`): the application re-runs
/// generateText from its saved steps; the unfinished step has the same step id, the
/// model mints a new call id: one charge. Then two charges of one step, both `call_0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vercel_ai_rerun_from_the_saved_steps_gets_the_charge_made_before_the_crash() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("vercel_ai", &upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = |run: &str, charges: &str| {
        let mut cmd = node_agent(dir.path(), &[run, charges]);
        cmd.env("IDEM_URL", base(&idem));
        cmd
    };
    let first = crash_after_charge(agent("run-v", ONE_CHARGE)).await;
    assert_eq!(first["intent"], "run-v:0:0", "run id, step, call's index");
    let out = finish(agent("run-v", ONE_CHARGE)).await;
    assert_replay_of(&out["results"][0], &first);
    assert_eq!(upstream.total_executions(), 1);

    let mut same = agent("run-w", TWO_CHARGES);
    same.env("SAME_CALL_ID", "1");
    let out = finish(same).await;
    assert_both_executed(&out["results"][0], &out["results"][1], &upstream);
    assert_eq!(upstream.total_executions(), 3);
}

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

/// MCP: the agent's client is killed while the server runs the charge, and restarts (a
/// new process, session and JSON-RPC id, the same intent): it gets the one charge.
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
    let client = |job: &str| {
        let mut cmd = python_agent("mcp/client.py", dir.path(), &[job, "cus_1", "500"]);
        cmd.env("IDEM_URL", base(&idem));
        cmd
    };
    let mut gone = client("job-7").spawn().expect("start the MCP client");
    eventually(Duration::from_secs(30), "the charge running", async || {
        charges_logged(&log).len() == 1
    })
    .await;
    gone.kill().await.expect("kill the client mid-call");
    let out = finish(client("job-7")).await;
    let charged = charges_logged(&log);
    assert_eq!(charged.len(), 1, "charged again: {charged:?}");
    let charge = charged[0]["charge"].as_str().unwrap();
    assert_eq!(out["isError"], false, "{out}");
    assert_eq!(out["text"], format!("charged cus_1 500 as {charge}"));
    // Another job charging the same customer the same amount is another intent (the
    // arguments alone could not tell), though its session numbers its JSON-RPC requests
    // as the first one's did: it runs, and gets its own charge.
    let other = finish(client("job-8")).await;
    let charged = charges_logged(&log);
    assert_eq!(charged.len(), 2, "{charged:?}");
    let second = charged[1]["charge"].as_str().unwrap();
    assert_eq!(other["text"], format!("charged cus_1 500 as {second}"));
}
