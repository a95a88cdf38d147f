//! Approvals answered by accountable principals (docs/security.md): who may answer (roles, never
//! the execution's creator), once (409), the answerer and the reason recorded and pushed, a
//! retry with other arguments asking again, several answers in one request; and the creator
//! and `on_behalf_of` on `execution.created`.

use reqwest::StatusCode;
use serde_json::json;

use super::keyed::{install_policy, key, keyed, post_as};
use super::{events_of, invoke_gated, payloads, yaml_policy};
use crate::harness::{TestAgent, TestKernel, assert_error};

/// `sha256:<hex>` of canonical JSON text, as the kernel records an approval's arguments.
fn digest(canonical: &str) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(canonical.as_bytes()))
    )
}

#[tokio::test]
async fn approvals_are_answered_once_by_someone_allowed_and_the_answer_is_recorded() {
    let kernel = TestKernel::start_with(keyed(yaml_policy)).await;
    let ops = key(&kernel, "ops", "operator").await;
    let alice = key(&kernel, "alice", "approver").await;
    let agent_key = key(&kernel, "deployer-agent", "agent").await;
    let mut agent = TestAgent::connect(&kernel, "deployer").await;
    // Created by the operator key for an end user.
    let bad = post_as(
        &kernel,
        &ops,
        "/v0/executions",
        &json!({"agent_id": "deployer", "on_behalf_of": 42}),
    )
    .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    let (status, created) = post_as(
        &kernel,
        &ops,
        "/v0/executions",
        &json!({"agent_id": "deployer", "on_behalf_of": "user-42"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let first = &payloads(&kernel, &id, "execution.created").await[0];
    assert_eq!(
        (&first["created_by"], &first["on_behalf_of"]),
        (&json!("ops"), &json!("user-42"))
    );
    let assignment = agent.assignment().await;
    let step_id = invoke_gated(&kernel, &assignment, "deploy.web", json!({"v": 1}), false).await;
    let (_, listed) = kernel.get("/v0/approvals").await;
    let approval_id = listed["approvals"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(approval_id, format!("{id}.{step_id}"));
    // The record: the rule and its reason, and the digest of exactly these arguments.
    let record = &listed["approvals"][0];
    assert_eq!(
        (&record["rule_id"], &record["reason"]),
        (&json!("deploy-needs-human"), &json!("deploys need a human"))
    );
    assert_eq!(record["arguments_digest"], digest(r#"{"v":1}"#));
    assert_eq!(
        payloads(&kernel, &id, "step.approval_required").await[0]["arguments_digest"],
        record["arguments_digest"]
    );
    let path = format!("/v0/approvals/{approval_id}");
    let signal_path = format!("/v0/executions/{id}/signal");
    let approve_signal =
        json!({"signal_type": "step.approve", "payload": {"step_id": step_id, "approved": true}});

    // Refused, changing nothing: the creator (both paths), the agent's own key, bad input.
    let refused = [
        (
            post_as(&kernel, &ops, &path, &json!({"decision": "approve"})).await,
            StatusCode::FORBIDDEN,
        ),
        (
            post_as(&kernel, &ops, &signal_path, &approve_signal).await,
            StatusCode::FORBIDDEN,
        ),
        (
            post_as(&kernel, &agent_key, &path, &json!({"decision": "approve"})).await,
            StatusCode::FORBIDDEN,
        ),
        (
            post_as(&kernel, &agent_key, &signal_path, &approve_signal).await,
            StatusCode::FORBIDDEN,
        ),
        (
            post_as(&kernel, &alice, &path, &json!({"decision": "maybe"})).await,
            StatusCode::BAD_REQUEST,
        ),
        (
            post_as(
                &kernel,
                &alice,
                "/v0/approvals/no-dot",
                &json!({"decision": "deny"}),
            )
            .await,
            StatusCode::BAD_REQUEST,
        ),
        (
            post_as(
                &kernel,
                &alice,
                &signal_path,
                &json!({"signal_type": "nudge"}),
            )
            .await,
            StatusCode::FORBIDDEN,
        ),
    ];
    for (answer, status) in &refused {
        assert_eq!(answer.0, *status, "{answer:?}");
    }
    assert_eq!(kernel.status(&id).await, "blocked");
    assert!(events_of(&kernel, &id, "signal.received").await.is_empty());

    // The approver denies with a reason: recorded with who answered, pushed to the agent.
    let (status, answered) = post_as(
        &kernel,
        &alice,
        &path,
        &json!({"decision": "deny", "reason": "not on a Friday"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(answered["approval"]["answered_by"], "alice");
    assert_eq!(answered["approval"]["approved"], false);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["approved"], &resolved["reason"]),
        (&json!(false), &json!("not on a Friday"))
    );
    let signal = &payloads(&kernel, &id, "signal.received").await[0];
    assert_eq!(signal["payload"]["answered_by"], "alice");
    assert_eq!(signal["sent_by"], "alice");
    assert_eq!(
        payloads(&kernel, &id, "step.failed").await[0]["error"],
        "not on a Friday"
    );

    // Answered once: a second answer is 409 on both paths and changes nothing.
    let events_before = kernel.events(&id).await.len();
    let again = post_as(&kernel, &alice, &path, &json!({"decision": "approve"})).await;
    assert_error(&again, StatusCode::CONFLICT, "CONFLICT", None);
    let again = post_as(&kernel, &alice, &signal_path, &approve_signal).await;
    assert_error(&again, StatusCode::CONFLICT, "CONFLICT", None);
    assert_eq!(kernel.events(&id).await.len(), events_before);

    // A retry with other arguments asks again; a batch answers it (and reports the bad id).
    let retry = invoke_gated(&kernel, &assignment, "deploy.web", json!({"v": 2}), false).await;
    assert_ne!(retry, step_id);
    let (_, listed) = kernel.get("/v0/approvals").await;
    assert_eq!(listed["approvals"][0]["step_id"], json!(retry));
    assert_eq!(
        listed["approvals"][0]["arguments_digest"],
        digest(r#"{"v":2}"#)
    );
    let batch = json!({"answers": [
        {"id": format!("{id}.{retry}"), "decision": "approve", "reason": "ok"},
        {"id": format!("{id}.{step_id}"), "decision": "approve"},
    ]});
    let (status, results) = post_as(&kernel, &alice, "/v0/approvals", &batch).await;
    assert_eq!(status, StatusCode::OK, "{results}");
    assert_eq!(results["results"][0]["status"], 200, "{results}");
    assert_eq!(results["results"][1]["status"], 409, "{results}");
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["step_id"], &resolved["approved"]),
        (&json!(retry), &json!(true))
    );
    let (_, listed) = kernel.get("/v0/approvals").await;
    assert_eq!(listed["approvals"], json!([]));
    kernel.shutdown().await;
}

/// Refunds only in executions the billing service created for a customer.
fn refund_policy(config: &mut keel_actors::kernel::KernelConfig) {
    install_policy(
        config,
        "rules:\n  - id: refunds-by-billing\n    priority: 1\n    when:\n      tool_id: payments.refund\n      created_by: \"billing-*\"\n      on_behalf_of: \"customer-*\"\n    then:\n      decision: allow\n  - id: no-refunds\n    priority: 2\n    when:\n      tool_id: payments.refund\n    then:\n      decision: deny\n      reason: refunds are the billing service's\ndefault:\n  decision: allow\n",
    );
}

#[tokio::test]
async fn policy_sees_who_created_the_execution_and_for_whom() {
    let kernel = TestKernel::start_with(keyed(refund_policy)).await;
    let billing = key(&kernel, "billing-svc", "operator").await;
    let ops = key(&kernel, "ops", "operator").await;
    let mut agent = TestAgent::connect(&kernel, "payer").await;
    let mut decisions = Vec::new();
    for (secret, for_whom) in [
        (&billing, "customer-7"),
        (&ops, "customer-7"),
        (&billing, "staff-1"),
    ] {
        let body = json!({"agent_id": "payer", "on_behalf_of": for_whom});
        let (status, created) = post_as(&kernel, secret, "/v0/executions", &body).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let assignment = agent.assignment().await;
        let intent = json!({"type": "invoke_tool", "tool_id": "payments.refund", "arguments": {}});
        let (status, answer) = assignment.intent(&kernel, intent).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        decisions.push(answer["accepted"].clone());
        let done = json!({"type": "complete", "output": {}});
        let _ = assignment.intent(&kernel, done).await;
    }
    assert_eq!(decisions, [json!(true), json!(false), json!(false)]);
    kernel.shutdown().await;
}
