//! The policy over HTTP with a real YAML policy (WIRE.md §9.2, §9.4, §12.2, §14): approvals
//! granted and denied for local and remote steps, `approval.resolved` on the original
//! session, a wrong step id refused without a trace; deny rules and rate limits answering 200
//! `accepted:false` with an `intent.denied` event, and the decision metrics (`denials.rs`);
//! pending approvals and rate-limit counters across a kernel restart (`restart.rs`).

mod denials;
mod escalation;
mod keyed;
mod objects;
mod offered;
mod restart;
mod terms;

use std::time::Duration;

use chrono::{DateTime, Utc};
use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{
    Assignment, Options, TestAgent, TestKernel, TestRunner, assert_error, running_execution,
};

/// Step deadline of the test kernels (long enough never to fire, distinct from the default).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// The policy under test: deploys need a human, `rm` is refused, other shell commands are
/// allowed twice an hour, everything else is allowed.
const POLICY: &str = r#"
rules:
  - id: deploy-needs-human
    priority: 10
    when:
      tool_id: "deploy.*"
    then:
      decision: require_approval
      reason: deploys need a human
  - id: no-rm
    priority: 20
    when:
      tool_id: shell.exec
      arguments:
        command:
          pattern: '^rm( .*)?$'
    then:
      decision: deny
      reason: rm is not allowed
  - id: shell-limited
    priority: 30
    when:
      tool_id: shell.exec
    then:
      decision: allow
    rate_limit:
      max: 2
      window: 1h
  - id: allow-rest
    priority: 100
    when:
      tool_id: "*"
    then:
      decision: allow
"#;

/// Installs [`POLICY`] (loaded from a file like `--policy` does) and [`STEP_TIMEOUT`].
fn yaml_policy(config: &mut KernelConfig) {
    keyed::install_policy(config, POLICY);
}

/// Options of a kernel running [`POLICY`].
fn policy_options() -> Options {
    Options {
        kernel: yaml_policy,
        ..Options::default()
    }
}

/// Returns the payloads of the events of `kind` in an execution's log.
async fn payloads(kernel: &TestKernel, execution_id: &str, kind: &str) -> Vec<Value> {
    events_of(kernel, execution_id, kind)
        .await
        .into_iter()
        .map(|event| event["payload"].clone())
        .collect()
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

/// Parses an RFC 3339 time from a JSON string.
fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("time string"))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

/// Reads one sample of the metrics exposition (0 when absent).
async fn metric(kernel: &TestKernel, sample: &str) -> u64 {
    let response = kernel
        .client
        .get(kernel.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    let text = response.text().await.expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map_or(0, |value| value.trim().parse().expect("counter value"))
}

/// Asks for `tool_id` with `arguments` and returns the 200 answer.
async fn invoke(
    kernel: &TestKernel,
    assignment: &Assignment,
    tool_id: &str,
    arguments: Value,
    remote: bool,
) -> Value {
    let intent = json!({"type": "invoke_tool", "tool_id": tool_id, "arguments": arguments, "remote": remote});
    let (status, body) = assignment.intent(kernel, intent).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Asks for a tool that needs approval; checks the answer and returns the step id.
async fn invoke_gated(
    kernel: &TestKernel,
    assignment: &Assignment,
    tool_id: &str,
    arguments: Value,
    remote: bool,
) -> String {
    let body = invoke(kernel, assignment, tool_id, arguments, remote).await;
    let step_id = body["step_id"].as_str().expect("step_id").to_owned();
    assert_eq!(
        body,
        json!({"accepted": true, "step_id": step_id, "pending_approval": true})
    );
    step_id
}

/// Answers the approval of `step_id`.
async fn approve(kernel: &TestKernel, execution_id: &str, payload: Value) -> (StatusCode, Value) {
    let body = json!({"signal_type": "step.approve", "payload": payload});
    kernel
        .post(&format!("/v0/executions/{execution_id}/signal"), &body)
        .await
}

#[tokio::test]
async fn a_granted_local_approval_dispatches_with_a_fresh_deadline_on_the_original_session() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let (mut agent, assignment) = running_execution(&kernel, "deployer").await;
    let id = assignment.execution_id.clone();
    let arguments = json!({"env": "prod", "version": 7});
    let step_id = invoke_gated(&kernel, &assignment, "deploy.web", arguments.clone(), false).await;
    assert_eq!(kernel.status(&id).await, "blocked");
    let types = kernel.event_types(&id).await;
    assert_eq!(
        types[types.len() - 4..],
        [
            "step.created",
            "step.approval_required",
            "execution.blocked",
            "approval.requested"
        ],
        "no intent.accepted on the approval path: {types:?}"
    );
    assert_eq!(
        payloads(&kernel, &id, "step.approval_required").await,
        [
            json!({"tool_id": "deploy.web", "arguments": arguments, "remote": false, "reason": "deploys need a human",
                   "rule_id": "deploy-needs-human",
                   "arguments_digest": "sha256:6d7b60388c2a85ec2f6e24daffcbb6e6c0fe668f8367a64afc2ec40acaa7e82e"})
        ]
    );
    assert_eq!(
        payloads(&kernel, &id, "execution.blocked").await,
        [
            json!({"reason": "approval", "ref": step_id, "tool_id": "deploy.web", "arguments": arguments, "remote": false})
        ]
    );

    // A second consumer of the same agent connects while the approval is pending.
    let mut other = TestAgent::connect(&kernel, "deployer").await;
    // A wrong step id is refused, records nothing and leaves the execution blocked.
    let count = kernel.events(&id).await.len();
    let response = approve(&kernel, &id, json!({"step_id": "nope", "approved": true})).await;
    let message = format!(
        r#"validation error: approval step_id "nope" does not match blocked ref "{step_id}""#
    );
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some(&message),
    );
    assert_eq!(kernel.events(&id).await.len(), count);
    assert_eq!(kernel.status(&id).await, "blocked");

    let (status, _) = approve(&kernel, &id, json!({"step_id": step_id, "approved": true})).await;
    assert_eq!(status, StatusCode::OK);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        resolved,
        json!({"execution_id": id, "step_id": step_id, "approved": true, "session_id": assignment.session_id})
    );
    let events = kernel.events(&id).await;
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types[count..],
        [
            "signal.received",
            "step.dispatched",
            "execution.resumed",
            "execution.blocked",
            "approval.resolved"
        ]
    );
    assert_eq!(
        events[count + 2]["payload"],
        json!({"reason": "approval granted"})
    );
    assert_eq!(events[count + 3]["payload"]["reason"], "tool");
    let dispatched = &events[count + 1];
    assert_eq!(
        (
            &dispatched["payload"]["runner_id"],
            &dispatched["payload"]["job_id"]
        ),
        (&json!(""), &json!(""))
    );
    let created = &events_of(&kernel, &id, "step.created").await[0];
    let fresh = time(&dispatched["payload"]["deadline"]);
    assert!(
        fresh > time(&created["payload"]["deadline"]),
        "a fresh deadline"
    );
    // The deadline is the grant time plus the step timeout (the event time is taken a few
    // microseconds after the deadline's).
    let budget = fresh - time(&dispatched["timestamp"]);
    let step_timeout = chrono::Duration::from_std(STEP_TIMEOUT).expect("timeout");
    assert!(
        (budget - step_timeout).abs() < chrono::Duration::seconds(1),
        "deadline = grant + step timeout, got {budget}"
    );
    assert_eq!(
        kernel.status(&id).await,
        "blocked",
        "blocked by the tool step now"
    );

    // The step runs on the original session; the other consumer got nothing of it.
    let (status, body) = assignment
        .step_result(&kernel, &step_id, true, json!("deployed"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assignment.complete(&kernel, json!("done")).await;
    kernel.create("deployer", json!("next")).await;
    kernel.create("deployer", json!("after")).await;
    let first = other
        .stream
        .next()
        .await
        .expect("a message for the other consumer");
    assert_eq!(first.event, "execution.assigned", "{first:?}");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_granted_remote_approval_creates_the_job_only_then_with_a_fresh_deadline() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let mut runner = TestRunner::connect(&kernel, "ops-runner", &["deploy.db"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "dba").await;
    let id = assignment.execution_id.clone();
    let step_id = invoke_gated(
        &kernel,
        &assignment,
        "deploy.db",
        json!({"db": "main"}),
        true,
    )
    .await;
    assert!(
        events_of(&kernel, &id, "step.dispatched").await.is_empty(),
        "no job yet"
    );
    let created = &events_of(&kernel, &id, "step.created").await[0];
    assert_eq!(created["payload"]["max_attempts"], 1);

    let (status, _) = approve(&kernel, &id, json!({"step_id": step_id, "approved": true})).await;
    assert_eq!(status, StatusCode::OK);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(resolved["approved"], true);
    assert_eq!(resolved["session_id"], *assignment.session_id);
    let dispatched = &events_of(&kernel, &id, "step.dispatched").await[0];
    let job_id = dispatched["payload"]["job_id"].as_str().expect("job id");
    assert!(!job_id.is_empty());
    // The runner's first job is the one created by the grant, with the grant's deadline.
    let job = runner.job().await;
    assert_eq!(
        (
            &job["id"],
            &job["step_id"],
            &job["tool_id"],
            &job["arguments"]
        ),
        (
            &json!(job_id),
            &json!(step_id),
            &json!("deploy.db"),
            &json!({"db": "main"})
        )
    );
    assert_eq!(
        time(&job["deadline"]),
        time(&dispatched["payload"]["deadline"])
    );
    assert!(time(&job["deadline"]) > time(&created["payload"]["deadline"]));

    let (status, _) = runner.result(&kernel, &job, true, json!({"rows": 3})).await;
    assert_eq!(status, StatusCode::OK);
    let result = agent.stream.next_of("tool.result").await.data;
    assert_eq!(
        (&result["step_id"], &result["status"], &result["result"]),
        (&json!(step_id), &json!("succeeded"), &json!({"rows": 3}))
    );
    assignment.complete(&kernel, json!("migrated")).await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_denied_approval_fails_the_step_resumes_and_never_reaches_a_runner() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let mut runner = TestRunner::connect(&kernel, "ops-runner", &["deploy.db", "other"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "dba").await;
    let id = assignment.execution_id.clone();

    // Remote, denied without a reason: the default text.
    let step_id = invoke_gated(&kernel, &assignment, "deploy.db", json!({}), true).await;
    let (status, _) = approve(&kernel, &id, json!({"step_id": step_id, "approved": false})).await;
    assert_eq!(status, StatusCode::OK);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        resolved,
        json!({"execution_id": id, "step_id": step_id, "approved": false, "session_id": assignment.session_id})
    );
    assert_eq!(kernel.status(&id).await, "running");
    assert_eq!(
        payloads(&kernel, &id, "step.failed").await,
        [json!({"error": "approval denied by human", "retryable": false})]
    );
    assert_eq!(
        payloads(&kernel, &id, "execution.resumed").await,
        [json!({"reason": "approval denied"})]
    );
    assert!(events_of(&kernel, &id, "step.dispatched").await.is_empty());

    // Local, denied with a reason.
    let step_id = invoke_gated(&kernel, &assignment, "deploy.web", json!({}), false).await;
    let deny = json!({"step_id": step_id, "approved": false, "reason": "not on a Friday"});
    assert_eq!(approve(&kernel, &id, deny).await.0, StatusCode::OK);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["step_id"], &resolved["approved"]),
        (&json!(step_id), &json!(false))
    );
    // The deny reason reaches the agent with the answer (an extra field rebuno ignores).
    assert_eq!(resolved["reason"], "not on a Friday");
    let failed = payloads(&kernel, &id, "step.failed").await;
    assert_eq!(
        failed[1],
        json!({"error": "not on a Friday", "retryable": false})
    );

    // The first job the runner ever gets is a later, allowed call: the denied one never ran.
    let allowed = invoke(&kernel, &assignment, "other", json!({}), true).await;
    let job = runner.job().await;
    assert_eq!(job["step_id"], allowed["step_id"]);
    kernel.shutdown().await;
}
