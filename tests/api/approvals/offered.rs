//! The console offers approve/deny only to the keys the kernel takes an answer from
//! (docs/console.md, "Roles"): the execution page and the approvals inbox show every pending
//! approval and who may answer it, the controls to an approver the rule names, and to the
//! key that created the execution (no self-approval) the reason it has none.

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::json;

use super::invoke_gated;
use super::keyed::{install_policy, key, keyed, post_as};
use crate::harness::{Assignment, TestAgent, TestKernel, assert_error};

/// Prod deploys: operators or the key `boss`; no self-approval (the default).
const POLICY: &str = r#"
rules:
  - id: prod-deploys
    priority: 10
    when:
      tool_id: deploy.prod
    then:
      decision: require_approval
      reason: prod deploys need a second pair of eyes
      approval:
        approvers:
          roles: [operator]
          keys: [boss]
  - id: rest
    priority: 100
    when: {}
    then:
      decision: allow
"#;

fn policy(config: &mut KernelConfig) {
    install_policy(config, POLICY);
}

/// The console view at `path` as `secret` sees it.
async fn view_as(kernel: &TestKernel, secret: &str, path: &str) -> String {
    let response = kernel
        .client
        .get(kernel.url(path))
        .bearer_auth(secret)
        .send()
        .await
        .expect("view");
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.text().await.expect("html")
}

/// What a page offers: (approve/deny controls, "not among its approvers", "you requested this").
fn offered(html: &str) -> (bool, bool, bool) {
    (
        html.contains("data-decision") && html.contains("class=\"approve\""),
        html.contains("data-not-yours"),
        html.contains("data-own-request") && html.contains("you requested this"),
    )
}

#[tokio::test]
async fn approve_and_deny_are_offered_only_to_keys_the_kernel_takes_an_answer_from() {
    let kernel = TestKernel::start_with(keyed(policy)).await;
    let ops = key(&kernel, "ops", "operator").await;
    let boss = key(&kernel, "boss", "approver").await;
    let alice = key(&kernel, "alice", "approver").await;
    let watcher = key(&kernel, "watcher", "reader").await;
    let mut agent = TestAgent::connect(&kernel, "deployer").await;
    let creation = json!({"agent_id": "deployer", "input": "ship"});
    let (status, created) = post_as(&kernel, &ops, "/v0/executions", &creation).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let at: Assignment = agent.assignment().await;
    let step = invoke_gated(&kernel, &at, "deploy.prod", json!({"v": 1}), false).await;
    let page = format!("/console/view/executions/{id}");

    // Everyone sees the approval and who may answer it.
    for secret in [&ops, &boss, &alice, &watcher] {
        let html = view_as(&kernel, secret, &page).await;
        assert!(html.contains("id=\"approval\""), "{html}");
        assert!(html.contains(&format!("data-step-id=\"{step}\"")), "{html}");
        assert!(html.contains("roles: operator; keys: boss"), "{html}");
        assert!(
            html.contains("prod deploys need a second pair of eyes"),
            "{html}"
        );
    }
    // (a) A named approver: approve and deny.
    assert_eq!(
        offered(&view_as(&kernel, &boss, &page).await),
        (true, false, false)
    );
    // (b) An approver the rule does not name: none, and why.
    assert_eq!(
        offered(&view_as(&kernel, &alice, &page).await),
        (false, true, false)
    );
    // (c) The operator that created the execution: none, because it asked.
    assert_eq!(
        offered(&view_as(&kernel, &ops, &page).await),
        (false, false, true)
    );
    // A reader: nothing to do.
    assert_eq!(
        offered(&view_as(&kernel, &watcher, &page).await),
        (false, false, false)
    );
    // The inbox agrees.
    let inbox = "/console/view/approvals";
    assert_eq!(
        offered(&view_as(&kernel, &boss, inbox).await),
        (true, false, false)
    );
    assert_eq!(
        offered(&view_as(&kernel, &alice, inbox).await),
        (false, true, false)
    );
    assert_eq!(
        offered(&view_as(&kernel, &ops, inbox).await),
        (false, false, true)
    );

    // And so does the kernel: the keys offered nothing are refused, the named one answers.
    let path = format!("/v0/approvals/{id}.{step}");
    let answer = json!({"decision": "approve"});
    for secret in [&alice, &ops] {
        let refused = post_as(&kernel, secret, &path, &answer).await;
        assert_error(&refused, StatusCode::FORBIDDEN, "FORBIDDEN", None);
    }
    let (status, body) = post_as(&kernel, &boss, &path, &answer).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    agent.stream.next_of("approval.resolved").await;
    // Answered: the page no longer shows it.
    let html = view_as(&kernel, &boss, &page).await;
    assert!(!html.contains("id=\"approval\""), "{html}");
    kernel.shutdown().await;
}
