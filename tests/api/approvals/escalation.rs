//! Approvals as objects on the feed (`approval.requested`, `approval.resolved`, docs/events.md),
//! a principal on every event (docs/security.md, "Who did what"), and `on_expiry: escalate`
//! (docs/policy.md): an expired approval is asked again of the escalation's approvers, also
//! when it expired while the kernel was down.

use std::time::Duration;

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::invoke_gated;
use super::keyed::{install_policy, key, keyed, post_as, view_as};
use crate::harness::{
    Assignment, Options, SseClient, TestAgent, TestKernel, assert_error, eventually,
};

/// Staging deploys: any approver, no expiry. Prod deploys: the key `lead` within a second,
/// then the key `boss` within the hour.
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
          keys: [lead]
        expires_in: 1s
        on_expiry: escalate
        escalate_to:
          approvers:
            keys: [boss]
          expires_in: 1h
  - id: staging-deploys
    priority: 20
    when:
      tool_id: deploy.staging
    then:
      decision: require_approval
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

/// Posts an `invoke_tool` intent with the agent's key; returns the pending step.
async fn invoke_as(kernel: &TestKernel, secret: &str, at: &Assignment, tool: &str) -> String {
    let intent = json!({"type": "invoke_tool", "tool_id": tool, "arguments": {"tool": tool}});
    let body =
        json!({"execution_id": at.execution_id, "session_id": at.session_id, "intent": intent});
    let (status, body) = post_as(kernel, secret, "/v0/agents/intent", &body).await;
    assert_eq!(
        (status, &body["pending_approval"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    body["step_id"].as_str().expect("step").to_owned()
}

/// The execution's `approval.*` events from the kernel-wide feed.
async fn approval_feed(kernel: &TestKernel, id: &str) -> Vec<Value> {
    let path = format!("/v0/events?types=approval.*&execution_id={id}&limit=100");
    let (status, body) = kernel.get(&path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["events"].as_array().cloned().unwrap_or_default()
}

/// Waits until the feed holds `count` `approval.*` events of the execution.
async fn approval_events(kernel: &TestKernel, id: &str, count: usize) -> Vec<Value> {
    eventually("the approval events", || async {
        let events = approval_feed(kernel, id).await;
        (events.len() >= count).then_some(events)
    })
    .await
}

/// The execution's one pending approval as `GET /v0/approvals` lists it.
async fn listed(kernel: &TestKernel, id: &str) -> Value {
    let (status, body) = kernel.get("/v0/approvals").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mine: Vec<&Value> = body["approvals"]
        .as_array()
        .expect("approvals")
        .iter()
        .filter(|approval| approval["execution_id"] == id)
        .collect();
    assert_eq!(mine.len(), 1, "{body}");
    mine[0].clone()
}

#[tokio::test]
async fn approvals_are_objects_on_the_feed_and_every_event_names_its_principal() {
    let kernel = TestKernel::start_with(options()).await;
    let ops = key(&kernel, "ops", "operator").await;
    let bot = key(&kernel, "bot", "agent").await;
    let alice = key(&kernel, "alice", "approver").await;
    let lead = key(&kernel, "lead", "approver").await;
    let boss = key(&kernel, "boss", "approver").await;
    let stream = kernel
        .client
        .get(kernel.url("/v0/agents/stream?agent_id=deployer&consumer_id=deployer-1"))
        .bearer_auth(&bot)
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), StatusCode::OK);
    let mut stream = SseClient::new(stream);
    let (status, created) = post_as(
        &kernel,
        &ops,
        "/v0/executions",
        &json!({"agent_id": "deployer", "input": "ship"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let message = stream.next_of("execution.assigned").await.data;
    let at = Assignment {
        execution_id: id.clone(),
        session_id: message["session_id"].as_str().expect("session").to_owned(),
        data: message,
    };

    // Staging: alice approves with a reason.
    let staging = invoke_as(&kernel, &bot, &at, "deploy.staging").await;
    let answer = json!({"decision": "approve", "reason": "change CHG-1"});
    let answered = post_as(
        &kernel,
        &alice,
        &format!("/v0/approvals/{id}.{staging}"),
        &answer,
    )
    .await;
    assert_eq!(answered.0, StatusCode::OK, "{}", answered.1);
    stream.next_of("approval.resolved").await;
    let result = json!({"execution_id": id, "session_id": at.session_id, "step_id": staging, "success": true, "data": "staged"});
    assert_eq!(
        post_as(&kernel, &bot, "/v0/agents/step-result", &result)
            .await
            .0,
        StatusCode::OK
    );

    // Prod: nobody answers within the second, so the kernel asks the boss instead; the lead
    // may no longer answer.
    let prod = invoke_as(&kernel, &bot, &at, "deploy.prod").await;
    let events = approval_events(&kernel, &id, 4).await;
    let escalated = &events[3];
    assert_eq!(escalated["type"], "approval.requested");
    assert_eq!(escalated["principal"], "system", "{escalated}");
    let payload = &escalated["payload"];
    assert_eq!(
        (&payload["escalated"], &payload["on_expiry"]),
        (&json!(true), &json!("deny")),
        "{payload}"
    );
    assert_eq!(payload["approvers"], json!({"keys": ["boss"]}));
    assert_eq!(
        kernel.status(&id).await,
        "blocked",
        "escalation does not deny"
    );
    let path = format!("/v0/approvals/{id}.{prod}");
    let before = kernel.events(&id).await.len();
    let refused = post_as(&kernel, &lead, &path, &json!({"decision": "approve"})).await;
    assert_error(&refused, StatusCode::FORBIDDEN, "FORBIDDEN", None);
    assert_eq!(
        kernel.events(&id).await.len(),
        before,
        "a refused answer records nothing"
    );
    let denied = post_as(
        &kernel,
        &boss,
        &path,
        &json!({"decision": "deny", "reason": "not today"}),
    )
    .await;
    assert_eq!(denied.0, StatusCode::OK, "{}", denied.1);
    let pushed = stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&pushed["approved"], &pushed["reason"]),
        (&json!(false), &json!("not today"))
    );
    let complete = json!({"execution_id": id, "session_id": at.session_id, "intent": {"type": "complete", "output": "done"}});
    assert_eq!(
        post_as(&kernel, &bot, "/v0/agents/intent", &complete)
            .await
            .0,
        StatusCode::OK
    );

    // The feed tells the whole story, with who decided.
    let events = approval_events(&kernel, &id, 5).await;
    let summary: Vec<(String, Value, Value)> = events
        .iter()
        .map(|event| {
            let payload = &event["payload"];
            let what = if event["type"] == "approval.requested" {
                payload["escalated"].clone()
            } else {
                json!([payload["decision"], payload["approver"], payload["reason"]])
            };
            (
                event["type"].as_str().unwrap_or("").to_owned(),
                what,
                event["principal"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("approval.requested".to_owned(), Value::Null, json!("bot")),
            (
                "approval.resolved".to_owned(),
                json!(["approved", "alice", "change CHG-1"]),
                json!("alice")
            ),
            ("approval.requested".to_owned(), Value::Null, json!("bot")),
            (
                "approval.requested".to_owned(),
                json!(true),
                json!("system")
            ),
            (
                "approval.resolved".to_owned(),
                json!(["denied", "boss", "not today"]),
                json!("boss")
            ),
        ]
    );
    let first = &events[2]["payload"];
    assert_eq!(first["approval_id"], json!(format!("{id}.{prod}")));
    assert_eq!(
        (&first["rule_id"], &first["on_expiry"]),
        (&json!("prod-deploys"), &json!("escalate"))
    );
    assert_eq!(first["approvers"], json!({"keys": ["lead"]}));
    assert!(
        first["arguments_digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );

    // Every event of the execution names who caused it.
    let log = kernel.events(&id).await;
    assert!(log.len() > 15, "{}", log.len());
    let by = |kind: &str| -> Vec<String> {
        log.iter()
            .filter(|event| event["type"] == kind)
            .map(|event| event["principal"].as_str().unwrap_or("NONE").to_owned())
            .collect()
    };
    for event in &log {
        assert!(
            event["principal"].as_str().is_some_and(|p| !p.is_empty()),
            "{event}"
        );
    }
    assert_eq!(by("execution.created"), ["ops"]);
    assert_eq!(by("execution.started"), ["system"], "the kernel assigns");
    assert_eq!(by("step.created"), ["bot", "bot"]);
    assert_eq!(by("signal.received"), ["alice", "boss"]);
    assert_eq!(by("step.completed"), ["bot"]);
    assert_eq!(by("execution.completed"), ["bot"]);
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_approval_that_expires_while_the_kernel_is_down_is_escalated_at_start() {
    let kernel = TestKernel::start_with(options()).await;
    let boss = key(&kernel, "boss", "approver").await;
    let lead = key(&kernel, "lead", "approver").await;
    let mut agent = TestAgent::connect(&kernel, "deployer").await;
    let created = kernel.create("deployer", json!("ship")).await;
    let id = created["id"].as_str().expect("id").to_owned();
    let at = agent.assignment().await;
    let step = invoke_gated(&kernel, &at, "deploy.prod", json!({"v": 1}), false).await;
    assert_eq!(approval_feed(&kernel, &id).await.len(), 1);
    // The first round: the lead may answer, until the second passes.
    let first = listed(&kernel, &id).await;
    assert_eq!(
        (&first["approvers"], &first["on_expiry"]),
        (&json!({"keys": ["lead"]}), &json!("escalate")),
        "{first}"
    );
    assert!(
        first.get("escalated").is_none() && first.get("escalated_from").is_none(),
        "{first}"
    );
    let first_expiry = first["expires_at"].clone();
    assert!(first_expiry.is_string(), "{first}");

    let kernel = kernel
        .restart_after(options(), Duration::from_millis(1500))
        .await;
    agent.reconnect(&kernel).await;
    let events = approval_events(&kernel, &id, 2).await;
    assert_eq!(
        (
            &events[1]["type"],
            &events[1]["payload"]["escalated"],
            &events[1]["principal"]
        ),
        (&json!("approval.requested"), &json!(true), &json!("system"))
    );
    assert_eq!(kernel.status(&id).await, "blocked", "escalated, not denied");
    // The list shows who may answer now, and the first round as history.
    let now = listed(&kernel, &id).await;
    assert_eq!(
        (
            &now["approvers"],
            &now["on_expiry"],
            &now["escalated"],
            &now["step_id"]
        ),
        (
            &json!({"keys": ["boss"]}),
            &json!("deny"),
            &json!(true),
            &json!(step)
        ),
        "{now}"
    );
    assert_eq!(
        now["escalated_from"],
        json!({"approvers": {"keys": ["lead"]}, "expires_at": first_expiry, "on_expiry": "escalate"})
    );
    assert!(
        super::time(&now["expires_at"]) > super::time(&first_expiry),
        "{now}"
    );
    // The console offers the answer to the boss only, and says whom it was first asked of.
    let boss_view = view_as(&kernel, &boss, "/console/view/approvals").await;
    assert!(boss_view.contains("data-decision"), "{boss_view}");
    assert!(
        boss_view.contains("first asked of keys: lead"),
        "{boss_view}"
    );
    let lead_view = view_as(&kernel, &lead, "/console/view/approvals").await;
    assert!(
        !lead_view.contains("data-decision") && lead_view.contains("not among its approvers"),
        "{lead_view}"
    );
    // The escalated approval is answered after the restart, and the agent is told.
    let path = format!("/v0/approvals/{id}.{step}");
    let (status, body) = post_as(&kernel, &boss, &path, &json!({"decision": "approve"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["step_id"], &resolved["approved"]),
        (&json!(step), &json!(true))
    );
    let events = approval_events(&kernel, &id, 3).await;
    assert_eq!(events[2]["payload"]["decision"], "approved");
    assert_eq!(events[2]["payload"]["approver"], "boss");
    // A second answer is 409 and changes nothing.
    let again = post_as(
        &kernel,
        &boss,
        &path,
        &json!({"decision": "deny", "reason": "x"}),
    )
    .await;
    assert_error(&again, StatusCode::CONFLICT, "CONFLICT", None);
    assert_eq!(approval_feed(&kernel, &id).await.len(), 3);
    kernel.shutdown().await;
}
