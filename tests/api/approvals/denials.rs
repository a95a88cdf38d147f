//! Deny rules and rate limits over HTTP: 200 `accepted:false` with the documented text, an
//! `intent.denied` event, the execution left running, and the decision metrics by decision
//! and rule id.

use serde_json::json;

use super::{events_of, invoke, invoke_gated, metric, payloads, policy_options};
use crate::harness::{TestKernel, running_execution};

#[tokio::test]
async fn a_deny_rule_answers_not_accepted_and_records_intent_denied() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let (_agent, assignment) = running_execution(&kernel, "shell-user").await;
    let id = assignment.execution_id.clone();
    let count = kernel.events(&id).await.len();
    let arguments = json!({"command": "rm -rf /"});
    let body = invoke(&kernel, &assignment, "shell.exec", arguments.clone(), false).await;
    assert_eq!(
        body,
        json!({"accepted": false, "error": "policy denied: rm is not allowed (rule: no-rm)"})
    );
    let events = kernel.events(&id).await;
    assert_eq!(events.len(), count + 1, "one event: intent.denied");
    assert_eq!(events[count]["type"], "intent.denied");
    assert_eq!(
        events[count]["payload"],
        json!({"intent_type": "invoke_tool", "tool_id": "shell.exec", "arguments": arguments, "reason": "rm is not allowed", "rule_id": "no-rm"})
    );
    assert_eq!(kernel.status(&id).await, "running");
    // The default applies when no rule matches: this policy has none (deny).
    let body = invoke(&kernel, &assignment, "ops/restart", json!({}), false).await;
    assert_eq!(
        body,
        json!({"accepted": false, "error": "policy denied: No explicit allow rule matched (rule: default)"}),
        "`*` does not match across `/`"
    );

    assert_eq!(
        metric(
            &kernel,
            r#"keel_policy_decisions_total{decision="deny",rule_id="no-rm"}"#
        )
        .await,
        1
    );
    assert_eq!(
        metric(
            &kernel,
            r#"keel_policy_decisions_total{decision="deny",rule_id="default"}"#
        )
        .await,
        1
    );
    assert_eq!(
        metric(
            &kernel,
            r#"keel_intents_total{type="invoke_tool",decision="denied"}"#
        )
        .await,
        2
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_rate_limit_refuses_the_call_over_the_limit_and_counts_only_allowed_calls() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let (_agent, assignment) = running_execution(&kernel, "shell-user").await;
    let id = assignment.execution_id.clone();
    let ls = json!({"command": "ls -l"});
    for _ in 0..2 {
        let body = invoke(&kernel, &assignment, "shell.exec", ls.clone(), false).await;
        assert_eq!(body["accepted"], true, "{body}");
    }
    // Neither denied calls nor calls to other tools count toward the limit.
    invoke(
        &kernel,
        &assignment,
        "shell.exec",
        json!({"command": "rm x"}),
        false,
    )
    .await;
    invoke(&kernel, &assignment, "web.fetch", json!({}), false).await;
    let body = invoke(&kernel, &assignment, "shell.exec", ls.clone(), false).await;
    let error = "rate limit exceeded: max 2 per 1h (rule: shell-limited)";
    assert_eq!(body, json!({"accepted": false, "error": error}));
    let denied = payloads(&kernel, &id, "intent.denied").await;
    assert_eq!(
        denied.last().expect("intent.denied"),
        &json!({"intent_type": "invoke_tool", "tool_id": "shell.exec", "arguments": ls, "reason": "rate limit exceeded: max 2 per 1h", "rule_id": "shell-limited"})
    );
    assert_eq!(events_of(&kernel, &id, "step.created").await.len(), 3);

    // The window is per agent: another agent still has its two calls.
    let (_other_agent, other) = running_execution(&kernel, "another-user").await;
    let body = invoke(&kernel, &other, "shell.exec", ls.clone(), false).await;
    assert_eq!(body["accepted"], true, "{body}");
    invoke_gated(&kernel, &other, "deploy.api", json!({}), false).await;

    let decisions = |decision: &str, rule: &str| {
        format!(r#"keel_policy_decisions_total{{decision="{decision}",rule_id="{rule}"}}"#)
    };
    assert_eq!(
        metric(&kernel, &decisions("allow", "shell-limited")).await,
        3
    );
    assert_eq!(
        metric(&kernel, &decisions("deny", "shell-limited")).await,
        1
    );
    assert_eq!(metric(&kernel, &decisions("deny", "no-rm")).await, 1);
    assert_eq!(metric(&kernel, &decisions("allow", "allow-rest")).await, 1);
    assert_eq!(
        metric(
            &kernel,
            &decisions("require_approval", "deploy-needs-human")
        )
        .await,
        1
    );
    let intents = |decision: &str| {
        format!(r#"keel_intents_total{{type="invoke_tool",decision="{decision}"}}"#)
    };
    assert_eq!(metric(&kernel, &intents("rate_limited")).await, 1);
    assert_eq!(metric(&kernel, &intents("denied")).await, 1);
    assert_eq!(metric(&kernel, &intents("accepted")).await, 4);
    assert_eq!(metric(&kernel, &intents("pending_approval")).await, 1);
    kernel.shutdown().await;
}
