//! Failure paths over HTTP/SSE: a cancel reaching the runner holding the job (and its late
//! result refused), a runner that disconnects mid-job (job re-queued to another runner as
//! attempt 2 of the same step), an agent that reconnects inside its grace (session kept, a
//! `tool.result` produced while it was away flushed), and retries running out (the agent gets
//! the failure).

use std::time::Duration;

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{
    Options, SseClient, TestKernel, TestRunner, assert_error, eventually, running_execution,
};

/// Invokes remote tool `tool` and returns the step id.
async fn invoke_remote(
    kernel: &TestKernel,
    assignment: &crate::harness::Assignment,
    tool: &str,
) -> String {
    let intent =
        json!({"type": "invoke_tool", "tool_id": tool, "arguments": {"n": 1}, "remote": true});
    let (status, body) = assignment.intent(kernel, intent).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    body["step_id"].as_str().expect("step_id").to_owned()
}

/// Returns the events of `kind` in an execution's log.
async fn events_of(kernel: &TestKernel, execution_id: &str, kind: &str) -> Vec<Value> {
    kernel
        .events(execution_id)
        .await
        .into_iter()
        .filter(|event| event["type"] == kind)
        .collect()
}

/// Waits until the kernel counts `count` open SSE connections of `kind`.
async fn wait_connections(kernel: &TestKernel, kind: &str, count: usize) {
    let needle = format!("keel_sse_connections{{kind=\"{kind}\"}} {count}");
    eventually(&needle.clone(), || {
        let found = kernel.kernel.encode_metrics().contains(&needle);
        async move { found.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_cancel_reaches_the_runner_holding_the_job_and_its_late_result_is_refused() {
    let kernel = TestKernel::start().await;
    let mut runner = TestRunner::connect(&kernel, "worker", &["slow"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "canceller").await;
    let step_id = invoke_remote(&kernel, &assignment, "slow").await;
    let job = runner.job().await;
    assert_eq!(job["step_id"], *step_id);

    let path = format!("/v0/executions/{}/cancel", assignment.execution_id);
    let (status, body) = kernel.post_raw(&path, "").await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &json!("cancelled"))
    );
    let notice = runner.stream.next_of("job.cancelled").await.data;
    assert_eq!(
        notice,
        json!({"job_id": job["id"], "execution_id": assignment.execution_id, "step_id": step_id,
            "reason": "execution cancelled"})
    );
    let pushed = agent.stream.next_of("execution.cancelled").await.data;
    assert_eq!(pushed["execution_id"], *assignment.execution_id);

    let count = kernel.events(&assignment.execution_id).await.len();
    let late = runner.result(&kernel, &job, true, json!("too late")).await;
    assert_error(&late, StatusCode::CONFLICT, "CONFLICT", None);
    assert_eq!(
        kernel.events(&assignment.execution_id).await.len(),
        count,
        "nothing recorded"
    );
    let cancelled = events_of(&kernel, &assignment.execution_id, "step.cancelled").await;
    assert_eq!(cancelled[0]["payload"]["reason"], "execution cancelled");

    // The notice freed the runner: the next job goes to it.
    let (_other_agent, next) = running_execution(&kernel, "canceller-2").await;
    let next_step = invoke_remote(&kernel, &next, "slow").await;
    assert_eq!(runner.job().await["step_id"], *next_step);
    kernel.shutdown().await;
}

fn quick_runner_grace(config: &mut KernelConfig) {
    config.runner_grace = Duration::from_millis(300);
    config.execution.retry_base_delay = Duration::from_millis(50);
}

#[tokio::test]
async fn a_runner_gone_mid_job_loses_it_to_another_runner_as_attempt_two() {
    let kernel = TestKernel::start_with(Options {
        kernel: quick_runner_grace,
        ..Options::default()
    })
    .await;
    let mut first = TestRunner::connect(&kernel, "first", &["fetch"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "requeue").await;
    let step_id = invoke_remote(&kernel, &assignment, "fetch").await;
    let original = first.job().await;
    let mut second = TestRunner::connect(&kernel, "second", &["fetch"]).await;
    drop(first);

    let retry = second.job().await;
    assert_eq!(
        (&retry["step_id"], &retry["attempt"]),
        (&json!(step_id), &json!(2))
    );
    assert_ne!(retry["id"], original["id"], "a fresh job id");
    let failed = events_of(&kernel, &assignment.execution_id, "step.failed").await;
    assert_eq!(
        failed[0]["payload"],
        json!({"error": "runner disconnected", "retryable": true})
    );
    let retried = events_of(&kernel, &assignment.execution_id, "step.retried").await;
    assert_eq!(retried[0]["payload"]["next_attempt"], 2);

    let (status, _) = second.result(&kernel, &retry, true, json!({"ok": 1})).await;
    assert_eq!(status, StatusCode::OK);
    let result = agent.stream.next_of("tool.result").await.data;
    assert_eq!(
        (&result["step_id"], &result["status"], &result["result"]),
        (&json!(step_id), &json!("succeeded"), &json!({"ok": 1}))
    );
    kernel.shutdown().await;
}

fn long_agent_grace(config: &mut KernelConfig) {
    config.agent_grace = Duration::from_secs(30);
}

#[tokio::test]
async fn an_agent_back_inside_its_grace_keeps_its_session_and_gets_what_it_missed() {
    let kernel = TestKernel::start_with(Options {
        kernel: long_agent_grace,
        ..Options::default()
    })
    .await;
    let mut runner = TestRunner::connect(&kernel, "tools", &["lookup"]).await;
    let (agent, assignment) = running_execution(&kernel, "flaky-net").await;
    let step_id = invoke_remote(&kernel, &assignment, "lookup").await;
    let job = runner.job().await;
    let (agent_id, consumer_id) = (agent.agent_id.clone(), agent.consumer_id.clone());
    drop(agent);
    wait_connections(&kernel, "agent", 0).await;

    let (status, _) = runner.result(&kernel, &job, true, json!("answer")).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the result is recorded while the agent is away"
    );
    let mut back: SseClient = kernel
        .sse(&format!(
            "/v0/agents/stream?agent_id={agent_id}&consumer_id={consumer_id}"
        ))
        .await;
    let flushed = back.next_of("tool.result").await.data;
    assert_eq!(
        (&flushed["step_id"], &flushed["result"]),
        (&json!(step_id), &json!("answer"))
    );
    assignment.complete(&kernel, json!("done")).await;
    let types = kernel.event_types(&assignment.execution_id).await;
    for absent in ["agent.timeout", "execution.reset"] {
        assert!(!types.contains(&absent.to_owned()), "{absent} in {types:?}");
    }
    assert_eq!(
        types
            .iter()
            .filter(|kind| *kind == "execution.started")
            .count(),
        1
    );
    kernel.shutdown().await;
}

fn fast_retries(config: &mut KernelConfig) {
    config.execution.retry_base_delay = Duration::from_millis(20);
    config.execution.retry_max_delay = Duration::from_millis(40);
}

#[tokio::test]
async fn when_retries_run_out_the_agent_gets_the_failure() {
    let kernel = TestKernel::start_with(Options {
        kernel: fast_retries,
        ..Options::default()
    })
    .await;
    let mut runner = TestRunner::connect(&kernel, "broken", &["flaky"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "persistent").await;
    let step_id = invoke_remote(&kernel, &assignment, "flaky").await;
    for attempt in 1..=3 {
        let job = runner.job().await;
        assert_eq!(
            (&job["step_id"], &job["attempt"]),
            (&json!(step_id), &json!(attempt))
        );
        let failure = json!({"job_id": job["id"], "execution_id": job["execution_id"], "step_id": step_id,
            "success": false, "error": format!("attempt {attempt} broke"), "retryable": true,
            "consumer_id": runner.consumer_id});
        let (status, body) = kernel.post("/v0/runners/broken/results", &failure).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let result = agent.stream.next_of("tool.result").await.data;
    assert_eq!(
        (&result["step_id"], &result["status"], &result["error"]),
        (&json!(step_id), &json!("failed"), &json!("attempt 3 broke"))
    );
    let failed = events_of(&kernel, &assignment.execution_id, "step.failed").await;
    let retryable: Vec<&Value> = failed
        .iter()
        .map(|event| &event["payload"]["retryable"])
        .collect();
    assert_eq!(retryable, [&json!(true), &json!(true), &json!(false)]);
    assert_eq!(
        events_of(&kernel, &assignment.execution_id, "step.retried")
            .await
            .len(),
        2
    );
    assert_eq!(kernel.status(&assignment.execution_id).await, "running");
    kernel.shutdown().await;
}
