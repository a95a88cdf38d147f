//! Issue 33 over HTTP: a local call of a re-run whose outcome an earlier run recorded is
//! answered with `replay` for an agent that sends `Keel-Capabilities: replay` (the kernel
//! records the replay; the agent posts no step result), and runs again for one that does not.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Assignment, TestAgent, TestKernel, running_execution};

/// Submits `intent` for `run` with `Keel-Capabilities: replay`.
async fn intent_replay(
    kernel: &TestKernel,
    run: &Assignment,
    intent: Value,
) -> (StatusCode, Value) {
    let body =
        json!({"execution_id": run.execution_id, "session_id": run.session_id, "intent": intent});
    let request = reqwest::Client::new()
        .post(kernel.url("/v0/agents/intent"))
        .header("Keel-Capabilities", "replay")
        .json(&body);
    kernel.send(request).await
}

fn read_clock() -> Value {
    json!({"type": "invoke_tool", "tool_id": "clock.read", "arguments": {"tz": "UTC", "n": 1}})
}

#[tokio::test]
async fn a_rerun_local_call_is_answered_from_the_journal_for_an_agent_that_replays() {
    let kernel = TestKernel::start().await;
    let (agent, first) = running_execution(&kernel, "journaled").await;
    let (status, body) = first.intent(&kernel, read_clock()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let recorded = body["step_id"].as_str().expect("step").to_owned();
    let (status, _) = first
        .step_result(&kernel, &recorded, true, json!("12:00"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = first
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "clock.read", "arguments": {"tz": "CET"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let failed = body["step_id"].as_str().expect("step").to_owned();
    let (status, _) = first
        .step_result(&kernel, &failed, false, json!(null))
        .await;
    assert_eq!(status, StatusCode::OK);

    // The agent is lost; the execution is re-run on another consumer.
    let mut standby = TestAgent::connect(&kernel, "journaled").await;
    drop(agent);
    let again = standby.assignment().await;
    assert_eq!(again.execution_id, first.execution_id);

    // Same call (key order and number spelling aside): the recorded outcome, no tool run.
    let (status, body) = intent_replay(
        &kernel,
        &again,
        json!({"type": "invoke_tool", "tool_id": "clock.read", "arguments": {"n": 1.0, "tz": "UTC"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["replay"],
        json!({"of_step_id": recorded, "status": "succeeded", "result": "12:00", "error": null}),
        "{body}"
    );
    let replayed = body["step_id"].as_str().expect("step").to_owned();
    assert_ne!(replayed, recorded);
    // A recorded failure comes back as that failure.
    let (status, body) = intent_replay(
        &kernel,
        &again,
        json!({"type": "invoke_tool", "tool_id": "clock.read", "arguments": {"tz": "CET"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["replay"]["status"], "failed", "{body}");
    assert_eq!(body["replay"]["of_step_id"], json!(failed));
    assert!(
        body["replay"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{body}"
    );

    // The kernel recorded both: nothing is active, so the run can complete at once.
    let events = kernel.events(&first.execution_id).await;
    let replays: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "step.created" && e["payload"]["replay_of"].is_string())
        .collect();
    assert_eq!(replays.len(), 2);
    assert_eq!(replays[0]["step_id"], json!(replayed));
    assert_eq!(replays[0]["payload"]["replay_of"], json!(recorded));
    let (status, body) = again.intent(&kernel, json!({"type": "complete"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Without the capability (the rebuno SDK) the same call is accepted to run again.
    let kernel2 = TestKernel::start().await;
    let (agent, first) = running_execution(&kernel2, "plain").await;
    let (_, body) = first.intent(&kernel2, read_clock()).await;
    let recorded = body["step_id"].as_str().expect("step").to_owned();
    first
        .step_result(&kernel2, &recorded, true, json!("12:00"))
        .await;
    let mut standby = TestAgent::connect(&kernel2, "plain").await;
    drop(agent);
    let again = standby.assignment().await;
    let (status, body) = again.intent(&kernel2, read_clock()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("replay").is_none(), "{body}");
    let events = kernel2.events(&first.execution_id).await;
    let repeated = events
        .iter()
        .find(|e| e["type"] == "step.created" && e["step_id"] == body["step_id"])
        .expect("step.created");
    assert_eq!(repeated["payload"]["repeats"], json!(recorded));
    kernel.shutdown().await;
    kernel2.shutdown().await;
}

#[tokio::test]
async fn a_rerun_matches_a_remote_call_a_hook_rewrote_by_the_agents_own_arguments() {
    use crate::harness::TestRunner;
    use crate::hooks::{Behaviour, HookServer, kernel_with_hooks};
    let (hooks, base) = HookServer::start().await;
    // The pre_tool hook fills in a currency: the tool runs with other arguments than the
    // agent proposed.
    hooks.set(
        "pre",
        Behaviour::Answer(
            json!({"decision": "modify", "arguments": {"amount": 100, "currency": "EUR"}}),
        ),
    );
    let kernel = kernel_with_hooks(&base, "fail_closed").await;
    let mut runner = TestRunner::connect(&kernel, "pay-runner", &["pay.charge"]).await;
    let (agent, first) = running_execution(&kernel, "payer").await;
    let charge = json!({"type": "invoke_tool", "tool_id": "pay.charge", "remote": true,
        "arguments": {"amount": 100}});
    let (status, body) = first.intent(&kernel, charge.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let recorded = body["step_id"].as_str().expect("step").to_owned();
    let job = runner.job().await;
    assert_eq!(job["arguments"], json!({"amount": 100, "currency": "EUR"}));
    let (status, _) = runner
        .result(&kernel, &job, true, json!({"charge": "ch_1"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let events = kernel.events(&first.execution_id).await;
    let created = events
        .iter()
        .find(|e| e["type"] == "step.created" && e["step_id"] == json!(recorded))
        .expect("step.created");
    assert_eq!(
        created["payload"]["arguments"],
        json!({"amount": 100, "currency": "EUR"})
    );
    assert_eq!(
        created["payload"]["proposed_arguments"],
        json!({"amount": 100})
    );

    // The agent is lost; the re-run proposes the same call: answered from the journal.
    let mut standby = TestAgent::connect(&kernel, "payer").await;
    drop(agent);
    let again = standby.assignment().await;
    assert_eq!(again.execution_id, first.execution_id);
    let (status, body) = again.intent(&kernel, charge).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let result = standby.stream.next_of("tool.result").await;
    assert_eq!(result.data["step_id"], body["step_id"]);
    assert_eq!(result.data["result"], json!({"charge": "ch_1"}));
    let events = kernel.events(&first.execution_id).await;
    let replay = events
        .iter()
        .find(|e| e["type"] == "step.created" && e["step_id"] == body["step_id"])
        .expect("step.created");
    assert_eq!(replay["payload"]["replay_of"], json!(recorded));
    // One job, one hook call: the replay ran neither the tool nor the hook.
    let jobs = events
        .iter()
        .filter(|e| e["type"] == "step.dispatched")
        .count();
    assert_eq!(jobs, 1);
    assert_eq!(hooks.requests("pre").len(), 1);
    kernel.shutdown().await;
}
