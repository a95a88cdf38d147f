//! The console offers approve/deny only to the keys the kernel takes an answer from
//! (docs/console.md, "Roles"): the execution page and the approvals inbox show every pending
//! approval and who may answer it, the controls to an approver the rule names, and to the
//! key that created the execution (no self-approval) the reason it has none.

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::json;

use super::invoke_gated;
use super::keyed::{install_policy, key, keyed, post_as, view_as};
use crate::harness::{Assignment, TestAgent, TestKernel, assert_error};

/// Prod deploys: operators or the key `boss`; no self-approval (the default).
const POLICY: &str = r#"
rules:
  - id: second-pair-of-eyes
    priority: 1
    when: {tool_id: "deploy.*"}
    then:
      decision: require_approval
      reason: prod deploys need a second pair of eyes
      approval:
        approvers:
          roles: [operator]
          keys: [boss]
default:
  decision: allow
"#;

/// The keys of the test, by name and role.
const KEYS: [(&str, &str); 4] = [
    ("ops", "operator"),
    ("boss", "approver"),
    ("alice", "approver"),
    ("watcher", "reader"),
];

fn policy(config: &mut KernelConfig) {
    install_policy(config, POLICY);
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
    let mut secrets = Vec::new();
    for (name, role) in KEYS {
        secrets.push(key(&kernel, name, role).await);
    }
    let [ops, boss, alice, watcher] = <[String; 4]>::try_from(secrets).expect("four keys");
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
    // (a) A named approver: approve and deny. (b) An approver the rule does not name: none,
    // and why. (c) The operator that created the execution: none, because it asked. A reader:
    // nothing to do. The execution page and the inbox agree.
    let expected = [
        ("boss", &boss, (true, false, false)),
        ("alice", &alice, (false, true, false)),
        ("ops", &ops, (false, false, true)),
        ("watcher", &watcher, (false, false, false)),
    ];
    for (name, secret, offers) in expected {
        for view in [page.as_str(), "/console/view/approvals"] {
            let html = view_as(&kernel, secret, view).await;
            assert_eq!(offered(&html), offers, "{name} on {view}: {html}");
        }
    }

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
