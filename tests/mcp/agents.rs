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
//! The runtimes are installed once into `target/agent-peers/` (support/agents.rs). DBOS,
//! LangGraph and Vercel AI are here; `agents/openai_agents.rs`, `agents/mcp_client.rs`.
//!
//! Checked once that these tests catch a key taken from the call id: with the OpenAI
//! example's route keyed by `{header.x-tool-call-id}`, the re-run got a second execution
//! instead of the replay and the shared `call_0` became one key for two intents; with the
//! Vercel helper keyed by `toolCallId`, the resumed step was executed again. Both failed.
//! `a_route_keyed_by_the_tool_call_id_charges_twice_and_loses_an_intent` keeps that
//! failure mode under test. Also checked once, each failing: the MCP client sending
//! `job:charge_card` without the step (job-8's second step got the first's replay: 2
//! charges, not 3); LangGraph keyed by the task id (the early resume executed again);
//! the LangGraph or Vercel route without its `fingerprint` (the reworded resume got 422
//! `idempotency_key_reused`); `LOSE_PLAN_CHECKPOINT` ignored (the early task id stayed);
//! the OpenAI model numbering `call_N` per turn (the SDK ran the one run to its end).

mod mcp_client;
mod openai_agents;

use crate::support;

use serde_json::Value;
use support::agents::{self, crash_after_charge, finish, node_agent, python_agent};
use support::harness::{self, Idem};
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
