//! A rule's approval terms (docs/policy.md `then.approval`): only the approvers it names may
//! answer, on either path; an approval past its `expires_in` is denied by the kernel
//! (`on_expiry: deny`), also when it expired while the kernel was down; the terms are shown
//! by `GET /v0/approvals`.

use std::time::Duration;

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::json;

use super::keyed::{install_policy, key, keyed, post_as};
use super::{events_of, invoke_gated, payloads, time};
use crate::harness::{Options, TestAgent, TestKernel, assert_error};

/// Prod deploys: only the key `lead` or an operator, within a second; staging deploys wait an
/// hour for any approver.
const POLICY: &str = r#"
rules:
  - id: prod-deploys
    priority: 10
    when:
      tool_id: deploy.prod
    then:
      decision: require_approval
      reason: prod deploys need the lead
      approval:
        approvers:
          roles: [operator]
          keys: [lead]
        expires_in: 1s
        on_expiry: deny
  - id: staging-deploys
    priority: 20
    when:
      tool_id: deploy.staging
    then:
      decision: require_approval
      approval:
        expires_in: 1h
  - id: rest
    priority: 100
    when: {}
    then:
      decision: allow
"#;

fn policy(config: &mut KernelConfig) {
    install_policy(config, POLICY);
}

fn options() -> Options {
    keyed(policy)
}

async fn created_id(kernel: &TestKernel) -> String {
    let created = kernel.create("deployer", json!("ship")).await;
    created["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn only_the_approvers_the_rule_names_answer_and_the_terms_are_listed() {
    let kernel = TestKernel::start_with(options()).await;
    let alice = key(&kernel, "alice", "approver").await;
    let lead = key(&kernel, "lead", "approver").await;
    let mut agent = TestAgent::connect(&kernel, "deployer").await;
    let id = created_id(&kernel).await;
    let assignment = agent.assignment().await;
    let step = invoke_gated(
        &kernel,
        &assignment,
        "deploy.staging",
        json!({"v": 1}),
        false,
    )
    .await;
    // Staging names nobody: any approver answers (alice), within the hour.
    let (_, listed) = kernel.get("/v0/approvals").await;
    let record = &listed["approvals"][0];
    assert_eq!(record["rule_id"], "staging-deploys");
    assert_eq!(record.get("approvers"), None, "{record}");
    let waits = time(&record["expires_at"]) - time(&record["requested_at"]);
    // `expires_at` is counted from the decision, a moment before the event's time.
    let waits = waits.num_milliseconds();
    assert!((3_599_000..=3_600_000).contains(&waits), "{waits} {record}");
    assert_eq!(record["on_expiry"], "deny");
    let answer = json!({"decision": "approve"});
    let path = format!("/v0/approvals/{id}.{step}");
    assert_eq!(
        post_as(&kernel, &alice, &path, &answer).await.0,
        StatusCode::OK
    );
    agent.stream.next_of("approval.resolved").await;
    assignment
        .step_result(&kernel, &step, true, json!("staged"))
        .await;

    // Prod names the key `lead` and operators: alice is refused on both paths, nothing changes.
    let step = invoke_gated(&kernel, &assignment, "deploy.prod", json!({"v": 2}), false).await;
    let (_, listed) = kernel.get("/v0/approvals").await;
    let record = &listed["approvals"][0];
    assert_eq!(
        record["approvers"],
        json!({"roles": ["operator"], "keys": ["lead"]})
    );
    let path = format!("/v0/approvals/{id}.{step}");
    let signal_path = format!("/v0/executions/{id}/signal");
    let signal =
        json!({"signal_type": "step.approve", "payload": {"step_id": step, "approved": true}});
    let events_before = kernel.events(&id).await.len();
    let refused = post_as(&kernel, &alice, &path, &answer).await;
    assert_error(&refused, StatusCode::FORBIDDEN, "FORBIDDEN", None);
    let refused = post_as(&kernel, &alice, &signal_path, &signal).await;
    assert_error(&refused, StatusCode::FORBIDDEN, "FORBIDDEN", None);
    assert_eq!(kernel.events(&id).await.len(), events_before);
    assert_eq!(kernel.status(&id).await, "blocked");
    // The named key answers (through the rebuno signal), in time.
    let (status, body) = post_as(&kernel, &lead, &signal_path, &signal).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["step_id"], &resolved["approved"]),
        (&json!(step), &json!(true))
    );
    let signals = payloads(&kernel, &id, "signal.received").await;
    assert_eq!(
        signals.last().expect("answer")["payload"]["answered_by"],
        "lead"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_unanswered_approval_is_denied_when_it_expires() {
    let kernel = TestKernel::start_with(options()).await;
    let lead = key(&kernel, "lead", "approver").await;
    let mut agent = TestAgent::connect(&kernel, "deployer").await;
    let id = created_id(&kernel).await;
    let assignment = agent.assignment().await;
    let step = invoke_gated(&kernel, &assignment, "deploy.prod", json!({"v": 3}), false).await;
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (
            &resolved["step_id"],
            &resolved["approved"],
            &resolved["reason"]
        ),
        (&json!(step), &json!(false), &json!("approval expired"))
    );
    let requested = &payloads(&kernel, &id, "step.approval_required").await[0];
    let failed = &events_of(&kernel, &id, "step.failed").await[0];
    assert_eq!(failed["payload"]["error"], "approval expired");
    assert!(
        time(&failed["timestamp"]) >= time(&requested["expires_at"]),
        "{failed}"
    );
    // Too late now: the answer is refused and changes nothing; the execution runs on.
    let events_before = kernel.events(&id).await.len();
    let late = post_as(
        &kernel,
        &lead,
        &format!("/v0/approvals/{id}.{step}"),
        &json!({"decision": "approve"}),
    )
    .await;
    assert_error(&late, StatusCode::CONFLICT, "CONFLICT", None);
    assert_eq!(kernel.events(&id).await.len(), events_before);
    assert_eq!(kernel.status(&id).await, "running");
    let (_, listed) = kernel.get("/v0/approvals").await;
    assert_eq!(listed["approvals"], json!([]));
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_approval_that_expires_while_the_kernel_is_down_is_denied_at_start() {
    let kernel = TestKernel::start_with(options()).await;
    let mut agent = TestAgent::connect(&kernel, "deployer").await;
    let id = created_id(&kernel).await;
    let assignment = agent.assignment().await;
    let step = invoke_gated(&kernel, &assignment, "deploy.prod", json!({"v": 4}), false).await;
    let requested = payloads(&kernel, &id, "step.approval_required").await[0].clone();

    let kernel = kernel
        .restart_after(options(), Duration::from_millis(1500))
        .await;
    agent.reconnect(&kernel).await;
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (
            &resolved["step_id"],
            &resolved["approved"],
            &resolved["session_id"]
        ),
        (&json!(step), &json!(false), &json!(assignment.session_id))
    );
    let failed = &events_of(&kernel, &id, "step.failed").await[0];
    assert_eq!(failed["payload"]["error"], "approval expired");
    assert!(
        time(&failed["timestamp"]) >= time(&requested["expires_at"]),
        "{failed}"
    );
    assert_eq!(kernel.status(&id).await, "running");
    kernel.shutdown().await;
}
