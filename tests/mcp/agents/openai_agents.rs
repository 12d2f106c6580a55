//! The OpenAI Agents SDK example (`examples/agents/openai_agents/`): the application's
//! run id across a crash, a call id the model reuses, and the natural-key fallback.

use serde_json::json;

use super::{assert_both_executed, assert_replay_of, base, idem_for};
use crate::support::agents::{self, crash_after_charge, finish, python_agent};
use crate::support::harness::{self, post, Idem};
use crate::support::upstream::MockUpstream;

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
