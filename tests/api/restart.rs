//! Kernel restarts mid-flight over HTTP/SSE: the in-process kernel is stopped and a new one
//! started on the same SQLite file while work is outstanding. Signal waits and approvals stay
//! blocked and resume when answered after the restart, a job a runner held is delivered again
//! to a runner that connects afterwards, and deadlines and retry timers armed before the
//! restart fire at their original times.

use std::time::Duration;

use chrono::{DateTime, Utc};
use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Options, TestKernel, TestRunner, eventually, running_execution};

fn options(kernel: fn(&mut KernelConfig)) -> Options {
    Options {
        kernel,
        ..Options::default()
    }
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

/// Parses an event timestamp or a timestamp payload field.
fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("timestamp string"))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

async fn signal(kernel: &TestKernel, execution_id: &str, signal_type: &str, payload: Value) {
    let body = json!({"signal_type": signal_type, "payload": payload});
    let (status, body) = kernel
        .post(&format!("/v0/executions/{execution_id}/signal"), &body)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn signal_waits_and_approvals_stay_blocked_across_a_restart_and_resume_after_it() {
    let kernel = TestKernel::start().await;
    let (mut agent, waiting) = running_execution(&kernel, "patient").await;
    let (status, _) = waiting
        .intent(&kernel, json!({"type": "wait", "signal_type": "go"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    kernel.create("patient", json!("second")).await;
    let approving = agent.assignment().await;
    let (_, body) = approving
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "approve_deploy", "arguments": {}}),
        )
        .await;
    assert_eq!(body["pending_approval"], true, "{body}");
    let step_id = body["step_id"].as_str().expect("step").to_owned();

    let kernel = kernel.restart(Options::default()).await;
    for execution in [&waiting, &approving] {
        assert_eq!(kernel.status(&execution.execution_id).await, "blocked");
    }
    agent.reconnect(&kernel).await;

    signal(&kernel, &waiting.execution_id, "go", json!({"n": 1})).await;
    let pushed = agent.stream.next_of("signal.received").await.data;
    assert_eq!(
        (&pushed["execution_id"], &pushed["payload"]),
        (&json!(waiting.execution_id), &json!({"n": 1}))
    );
    waiting.complete(&kernel, json!("signalled")).await;

    let approval = json!({"step_id": step_id, "approved": true});
    signal(&kernel, &approving.execution_id, "step.approve", approval).await;
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["step_id"], &resolved["approved"]),
        (&json!(step_id), &json!(true))
    );
    let (status, body) = approving
        .step_result(&kernel, &step_id, true, json!("deployed"))
        .await;
    assert_eq!(status, StatusCode::OK, "the original session works: {body}");
    approving.complete(&kernel, json!("approved")).await;
    for execution in [&waiting, &approving] {
        let types = kernel.event_types(&execution.execution_id).await;
        assert!(!types.contains(&"execution.reset".to_owned()), "{types:?}");
        assert_eq!(kernel.status(&execution.execution_id).await, "completed");
    }
    kernel.shutdown().await;
}

fn short_runner_grace(config: &mut KernelConfig) {
    config.runner_grace = Duration::from_millis(300);
    config.agent_grace = Duration::from_secs(30);
}

#[tokio::test]
async fn a_job_a_runner_held_is_delivered_again_to_a_runner_connecting_after_the_restart() {
    let kernel = TestKernel::start_with(options(short_runner_grace)).await;
    let mut runner = TestRunner::connect(&kernel, "before", &["index"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "indexer").await;
    let (_, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "index", "remote": true}),
        )
        .await;
    let step_id = body["step_id"].as_str().expect("step").to_owned();
    let job = runner.job().await;

    let kernel = kernel.restart(options(short_runner_grace)).await;
    assert!(runner.stream.ends().await, "the old kernel's stream ended");
    agent.reconnect(&kernel).await;
    let mut after = TestRunner::connect(&kernel, "after", &["index"]).await;
    let again = after.job().await;
    assert_eq!(
        (&again["id"], &again["step_id"], &again["attempt"]),
        (&job["id"], &json!(step_id), &json!(1)),
        "the same job"
    );
    let (status, _) = after.result(&kernel, &again, true, json!("indexed")).await;
    assert_eq!(status, StatusCode::OK);
    let result = agent.stream.next_of("tool.result").await.data;
    assert_eq!(
        (&result["step_id"], &result["result"]),
        (&json!(step_id), &json!("indexed"))
    );
    kernel.shutdown().await;
}

fn four_second_steps(config: &mut KernelConfig) {
    config.execution.step_timeout = Duration::from_secs(4);
    config.agent_grace = Duration::from_secs(30);
}

#[tokio::test]
async fn a_step_deadline_armed_before_a_restart_fires_at_its_original_time() {
    let kernel = TestKernel::start_with(options(four_second_steps)).await;
    let (mut agent, assignment) = running_execution(&kernel, "slowpoke").await;
    let step_id = assignment.invoke(&kernel, "slow_tool").await;
    let created = events_of(&kernel, &assignment.execution_id, "step.created").await;
    let deadline = time(&created[0]["payload"]["deadline"]);
    // Only positions the restart halfway to the deadline; nothing is asserted on it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopped = Utc::now();

    let kernel = kernel.restart(options(four_second_steps)).await;
    agent.reconnect(&kernel).await;
    let pushed = agent.stream.next_of("execution.cancelled").await.data;
    assert_eq!(pushed["execution_id"], *assignment.execution_id);
    let timed_out = events_of(&kernel, &assignment.execution_id, "step.timed_out").await;
    assert_eq!(timed_out[0]["step_id"], *step_id);
    let fired = time(&timed_out[0]["timestamp"]);
    assert!(fired >= deadline, "never early: {fired} < {deadline}");
    let rearmed = stopped + chrono::Duration::seconds(4);
    assert!(
        fired < rearmed,
        "fired at the original deadline {deadline}, not a fresh one from the restart ({fired})"
    );
    let failed = events_of(&kernel, &assignment.execution_id, "execution.failed").await;
    assert_eq!(failed[0]["payload"]["error"], "step timed out");
    kernel.shutdown().await;
}

fn two_second_retries(config: &mut KernelConfig) {
    config.execution.retry_base_delay = Duration::from_secs(2);
    config.execution.retry_max_delay = Duration::from_secs(2);
    config.execution.retry_jitter = false;
    config.agent_grace = Duration::from_secs(30);
}

#[tokio::test]
async fn a_retry_timer_armed_before_a_restart_still_fires() {
    let kernel = TestKernel::start_with(options(two_second_retries)).await;
    let mut runner = TestRunner::connect(&kernel, "flaky", &["fetch"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "retrier").await;
    let (_, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "fetch", "remote": true}),
        )
        .await;
    let step_id = body["step_id"].as_str().expect("step").to_owned();
    let job = runner.job().await;
    let failure = json!({"job_id": job["id"], "execution_id": job["execution_id"], "step_id": step_id,
        "success": false, "error": "503", "retryable": true, "consumer_id": runner.consumer_id});
    let (status, _) = kernel.post("/v0/runners/flaky/results", &failure).await;
    assert_eq!(status, StatusCode::OK);
    let retried = events_of(&kernel, &assignment.execution_id, "step.retried").await;
    let not_before = time(&retried[0]["payload"]["not_before"]);

    let kernel = kernel.restart(options(two_second_retries)).await;
    agent.reconnect(&kernel).await;
    let mut runner = TestRunner::connect(&kernel, "flaky", &["fetch"]).await;
    let retry = runner.job().await;
    assert_eq!(
        (&retry["step_id"], &retry["attempt"]),
        (&json!(step_id), &json!(2))
    );
    let dispatched = eventually("the retry's step.dispatched", || async {
        let events = events_of(&kernel, &assignment.execution_id, "step.dispatched").await;
        events.get(1).cloned()
    })
    .await;
    assert!(
        time(&dispatched["timestamp"]) >= not_before,
        "the retry waited for its not_before {not_before}: {dispatched}"
    );
    let (status, _) = runner.result(&kernel, &retry, true, json!("ok")).await;
    assert_eq!(status, StatusCode::OK);
    let result = agent.stream.next_of("tool.result").await.data;
    assert_eq!(result["status"], "succeeded");
    kernel.shutdown().await;
}

/// A restart finds the database free at once, on both backends, even while something (here a
/// stray handle of the old kernel) still holds the old store: `Kernel::shutdown` closes it,
/// which releases the one-kernel lock rather than leaving it to whenever the last handle is
/// dropped and, on PostgreSQL, to when the server ends the dropped session.
#[tokio::test]
async fn a_restart_finds_the_database_free_while_a_handle_of_the_old_kernel_lingers() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("agent-a", json!("before")).await;
    let lingering = kernel.kernel.clone();
    let kernel = kernel.restart(Options::default()).await;
    let (status, body) = kernel
        .get(&format!(
            "/v0/executions/{}",
            created["id"].as_str().expect("id")
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    drop(lingering);
    kernel.shutdown().await;
}
