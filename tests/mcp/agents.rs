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

/// LangGraph (SqliteSaver, graph `prompt → plan → charge`), killed in `charge` right
/// after the charge answered, at the two timings of the issue. Early: `plan`'s checkpoint
/// was never written (`LOSE_PLAN_CHECKPOINT=1`: `prompt` checkpointed with durability
/// sync, the rest with exit), so the resume starts from `prompt`'s checkpoint, asks the
/// model again (a new call id, a reworded note) and `charge` gets a new task id. Late:
/// every step checkpointed (sync), the resume re-runs `charge` alone, same task id. Either
/// way thread, step and node are the same, and so is the intent: one charge, replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_resume_from_the_checkpoint_gets_the_charge_at_both_kill_timings() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("langgraph", &upstream).await;
    for (n, timing) in ["early", "late"].into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let thread = format!("thread-{timing}");
        let agent = || {
            let mut cmd = python_agent(
                "langgraph/agent.py",
                dir.path(),
                &[thread.as_str(), ONE_CHARGE],
            );
            cmd.env("IDEM_URL", base(&idem)).env(
                "LOSE_PLAN_CHECKPOINT",
                if timing == "early" { "1" } else { "0" },
            );
            cmd
        };
        let first = crash_after_charge(agent()).await;
        assert_eq!(first["intent"], format!("{thread}:3:charge:0"), "{timing}");
        assert_eq!(upstream.total_executions(), n as u64 + 1);
        let mut resume = agent();
        resume.env("REWORD", "1");
        let resumed = finish(resume).await;
        let resumed = &resumed["results"][0];
        assert_replay_of(resumed, &first);
        assert_eq!(
            upstream.total_executions(),
            n as u64 + 1,
            "{timing}: charged again on resume"
        );
        // Why the task id is not the key: it changes when the resume starts earlier.
        if timing == "early" {
            assert_ne!(resumed["task_id"], first["task_id"], "{timing}");
            assert_ne!(
                resumed["note"], first["note"],
                "the model was not asked again"
            );
        } else {
            assert_eq!(resumed["task_id"], first["task_id"], "{timing}");
            assert_eq!(resumed["note"], first["note"], "{timing}");
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

/// OpenAI Agents SDK: within one run, the model gives its second charge (another invoice,
/// in the next response) the call id of the first, `call_0`, as Gemini numbers its calls
/// anew in each response. The SDK 0.24 refuses it before the second tool runs
/// (`ModelBehaviorError`: "reused a completed tool call ID for a different invocation"):
/// the first charge executed once, the second never ran, so it cannot have got the
/// first's result. Across runs nothing refuses `call_0`; the run id keeps them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_two_intents_with_one_call_id_in_one_run_are_refused_by_the_sdk() {
    let upstream = MockUpstream::start().await;
    let idem = idem_for("openai_agents", &upstream).await;
    let dir = tempfile::tempdir().unwrap();
    let charges = json!([
        {"customer": "cus_1", "amount": 500, "invoice": "inv_a"},
        {"customer": "cus_2", "amount": 700, "invoice": "inv_b"},
    ])
    .to_string();
    let mut one_run = python_agent("openai_agents/agent.py", dir.path(), &["run-s", &charges]);
    one_run
        .env("IDEM_URL", base(&idem))
        .env("SAME_CALL_ID", "1");
    let out = agents::outcome(one_run).await;
    assert!(
        !out.success,
        "the SDK ran a reused call id: {:?}",
        out.lines
    );
    assert!(
        out.stderr.contains("ModelBehaviorError")
            && out.stderr.contains("reused a completed tool call ID"),
        "{}",
        out.stderr
    );
    assert_eq!(upstream.executions("run-s:charge_card:inv_a"), 1);
    assert_eq!(upstream.executions("run-s:charge_card:inv_b"), 0);
    assert_eq!(upstream.total_executions(), 1);

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
/// model mints a new call id and rewords the note: one charge, replayed. Then two charges
/// of one step, both `call_0`.
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
    let mut rerun = agent("run-v", ONE_CHARGE);
    rerun.env("REWORD", "1");
    let out = finish(rerun).await;
    assert_replay_of(&out["results"][0], &first);
    assert_ne!(out["results"][0]["note"], first["note"], "not reworded");
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
