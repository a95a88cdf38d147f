//! The policy's durable state across a kernel restart on the same database: pending approvals
//! (local and remote) are answered after it and reach the reconnected agent on its original
//! session, and rate-limit counters are rebuilt from the event log.

use reqwest::StatusCode;
use serde_json::json;

use super::{approve, invoke, invoke_gated, payloads, policy_options};
use crate::harness::{TestAgent, TestKernel, TestRunner, running_execution};

#[tokio::test]
async fn pending_approvals_survive_a_restart_and_resolve_on_the_original_sessions() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let (mut agent, local) = running_execution(&kernel, "releaser").await;
    let local_step = invoke_gated(&kernel, &local, "deploy.web", json!({"v": 1}), false).await;
    kernel.create("releaser", json!("second")).await;
    let remote = agent.assignment().await;
    let remote_step = invoke_gated(&kernel, &remote, "deploy.db", json!({"v": 2}), true).await;

    let kernel = kernel.restart(policy_options()).await;
    for execution in [&local, &remote] {
        assert_eq!(kernel.status(&execution.execution_id).await, "blocked");
    }
    agent.reconnect(&kernel).await;
    let mut runner = TestRunner::connect(&kernel, "ops-runner", &["deploy.db"]).await;

    let grant = json!({"step_id": local_step, "approved": true});
    assert_eq!(
        approve(&kernel, &local.execution_id, grant).await.0,
        StatusCode::OK
    );
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        resolved,
        json!({"execution_id": local.execution_id, "step_id": local_step, "approved": true, "session_id": local.session_id})
    );
    let (status, body) = local
        .step_result(&kernel, &local_step, true, json!("ok"))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the original session still works: {body}"
    );
    local.complete(&kernel, json!("released")).await;

    let grant = json!({"step_id": remote_step, "approved": true});
    assert_eq!(
        approve(&kernel, &remote.execution_id, grant).await.0,
        StatusCode::OK
    );
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(
        (&resolved["step_id"], &resolved["session_id"]),
        (&json!(remote_step), &json!(remote.session_id))
    );
    let job = runner.job().await;
    assert_eq!(
        (&job["step_id"], &job["arguments"]),
        (&json!(remote_step), &json!({"v": 2}))
    );
    assert_eq!(
        runner
            .result(&kernel, &job, true, json!("migrated"))
            .await
            .0,
        StatusCode::OK
    );
    let result = agent.stream.next_of("tool.result").await.data;
    assert_eq!(result["step_id"], *remote_step);
    remote.complete(&kernel, json!("done")).await;

    for execution in [&local, &remote] {
        let types = kernel.event_types(&execution.execution_id).await;
        assert!(!types.contains(&"execution.reset".to_owned()), "{types:?}");
        assert_eq!(kernel.status(&execution.execution_id).await, "completed");
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn rate_limit_counters_survive_a_restart_on_the_same_database() {
    let kernel = TestKernel::start_with(policy_options()).await;
    let (agent, first) = running_execution(&kernel, "shell-user").await;
    let ls = json!({"command": "ls"});
    for _ in 0..2 {
        let body = invoke(&kernel, &first, "shell.exec", ls.clone(), false).await;
        let step_id = body["step_id"].as_str().expect("accepted").to_owned();
        assert_eq!(
            first
                .step_result(&kernel, &step_id, true, json!("a b"))
                .await
                .0,
            StatusCode::OK
        );
    }
    first.complete(&kernel, json!("listed")).await;
    drop(agent);

    let kernel = kernel.restart(policy_options()).await;
    let mut agent = TestAgent::connect(&kernel, "shell-user").await;
    kernel.create("shell-user", json!("again")).await;
    let second = agent.assignment().await;
    let body = invoke(&kernel, &second, "shell.exec", ls.clone(), false).await;
    assert_eq!(
        body,
        json!({"accepted": false, "error": "rate limit exceeded: max 2 per 1h (rule: shell-limited)"}),
        "the two calls before the restart still count"
    );
    let denied = payloads(&kernel, &second.execution_id, "intent.denied").await;
    assert_eq!(denied[0]["rule_id"], "shell-limited");
    // Other tools are not limited.
    let body = invoke(&kernel, &second, "web.fetch", json!({}), false).await;
    assert_eq!(body["accepted"], true, "{body}");
    kernel.shutdown().await;
}
