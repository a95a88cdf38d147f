//! Execution budgets over HTTP (docs/guardrails.md): a budget from a YAML policy denies the
//! intent that would exceed it with a reason naming the budget and records nothing else, cost
//! reported with step results counts, `GET /v0/executions/{id}` shows what remains, a bad cost
//! is 400 and changes nothing, and the counters are rebuilt from the log after a restart.

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Assignment, Options, TestAgent, TestKernel, assert_error, running_execution};

/// A file budget (4 steps, 1 usd) and a rule that allows `search` at most twice per execution.
const POLICY: &str = r#"
budget:
  max_steps: 4
  max_cost:
    usd: 1.0
rules:
  - id: search-twice
    priority: 10
    when:
      tool_id: search
    then:
      decision: allow
    budget:
      max_calls_per_tool: 2
  - id: allow-rest
    priority: 100
    when: {}
    then:
      decision: allow
"#;

fn budget_policy(config: &mut KernelConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}

fn options() -> Options {
    Options {
        kernel: budget_policy,
        ..Options::default()
    }
}

async fn invoke(kernel: &TestKernel, assignment: &Assignment, tool: &str) -> Value {
    let (status, body) = assignment
        .intent(kernel, json!({"type": "invoke_tool", "tool_id": tool}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Posts a successful local step result carrying `cost`.
async fn result_with_cost(
    kernel: &TestKernel,
    assignment: &Assignment,
    step_id: &Value,
    cost: Value,
) -> (StatusCode, Value) {
    let body = json!({
        "execution_id": assignment.execution_id, "session_id": assignment.session_id,
        "step_id": step_id, "success": true, "data": {"ok": true}, "cost": cost,
    });
    kernel.post("/v0/agents/step-result", &body).await
}

async fn budget_view(kernel: &TestKernel, execution_id: &str) -> Value {
    let (status, body) = kernel.get(&format!("/v0/executions/{execution_id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["budget"].clone()
}

#[tokio::test]
async fn a_call_over_a_rule_budget_is_denied_naming_it_and_records_only_the_denial() {
    let kernel = TestKernel::start_with(options()).await;
    let (_agent, assignment) = running_execution(&kernel, "researcher").await;
    for _ in 0..2 {
        assert_eq!(
            invoke(&kernel, &assignment, "search").await["accepted"],
            true
        );
    }
    let before = kernel.events(&assignment.execution_id).await.len();
    let denied = invoke(&kernel, &assignment, "search").await;
    assert_eq!(
        denied,
        json!({"accepted": false, "error":
            "budget exceeded: max_calls_per_tool 2 reached for tool search (2 calls so far) \
             (rule: search-twice)"})
    );
    let events = kernel.events(&assignment.execution_id).await;
    assert_eq!(events.len(), before + 1, "only intent.denied is recorded");
    let last = events.last().expect("an event");
    assert_eq!(last["type"], "intent.denied");
    assert_eq!(
        last["payload"]["reason"],
        "budget exceeded: max_calls_per_tool 2 reached for tool search (2 calls so far)"
    );
    assert_eq!(last["payload"]["rule_id"], "search-twice");
    // Other tools still fit the file budget (4 steps).
    assert_eq!(
        invoke(&kernel, &assignment, "fetch").await["accepted"],
        true
    );
    let view = budget_view(&kernel, &assignment.execution_id).await;
    assert_eq!(
        view["limits"],
        json!({"max_steps": 4, "max_cost": {"usd": 1.0}})
    );
    assert_eq!(view["used"]["steps"], 3);
    assert_eq!(
        view["used"]["calls_per_tool"],
        json!({"search": 2, "fetch": 1})
    );
    assert_eq!(view["remaining"]["steps"], 1);
    assert_eq!(view["remaining"]["cost"], json!({"usd": 1.0}));
    kernel.shutdown().await;
}

#[tokio::test]
async fn reported_cost_spends_the_cost_budget_and_a_bad_cost_is_400() {
    let kernel = TestKernel::start_with(options()).await;
    let (_agent, assignment) = running_execution(&kernel, "spender").await;
    let step = invoke(&kernel, &assignment, "llm").await["step_id"].clone();
    let before = kernel.events(&assignment.execution_id).await;
    for bad in [json!("1 usd"), json!({"usd": -0.5}), json!({"usd": "0.5"})] {
        let response = result_with_cost(&kernel, &assignment, &step, bad.clone()).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
        assert!(
            response.1["error"].as_str().unwrap().contains("cost"),
            "{bad}: {}",
            response.1
        );
    }
    assert_eq!(kernel.events(&assignment.execution_id).await, before);
    let (status, _) = result_with_cost(
        &kernel,
        &assignment,
        &step,
        json!({"usd": 0.5, "tokens": 900}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let completed = kernel.events(&assignment.execution_id).await;
    let completed = completed
        .iter()
        .find(|event| event["type"] == "step.completed")
        .expect("step.completed");
    assert_eq!(
        completed["payload"]["cost"],
        json!({"usd": 0.5, "tokens": 900.0})
    );
    let step = invoke(&kernel, &assignment, "llm").await["step_id"].clone();
    let (status, _) = result_with_cost(&kernel, &assignment, &step, json!({"usd": 0.75})).await;
    assert_eq!(status, StatusCode::OK);
    let denied = invoke(&kernel, &assignment, "llm").await;
    assert_eq!(denied["accepted"], false);
    assert_eq!(
        denied["error"],
        "budget exceeded: max_cost.usd 1 reached (1.25 spent) (rule: allow-rest)"
    );
    let view = budget_view(&kernel, &assignment.execution_id).await;
    assert_eq!(view["used"]["cost"], json!({"usd": 1.25, "tokens": 900.0}));
    assert_eq!(view["remaining"]["cost"], json!({"usd": 0.0}));
    kernel.shutdown().await;
}

#[tokio::test]
async fn budget_counters_are_rebuilt_from_the_log_after_a_restart() {
    let kernel = TestKernel::start_with(options()).await;
    let (agent, assignment) = running_execution(&kernel, "survivor").await;
    for tool in ["search", "search", "fetch", "fetch"] {
        let step = invoke(&kernel, &assignment, tool).await["step_id"].clone();
        assert!(step.is_string());
        let (status, _) = result_with_cost(&kernel, &assignment, &step, json!({"usd": 0.1})).await;
        assert_eq!(status, StatusCode::OK);
    }
    drop(agent);
    let kernel = kernel.restart(options()).await;
    let view = budget_view(&kernel, &assignment.execution_id).await;
    assert_eq!(view["used"]["steps"], 4);
    assert_eq!(view["remaining"]["steps"], 0);
    // The execution is reassigned to a new consumer; its budget is still spent.
    let mut agent = TestAgent::connect(&kernel, "survivor").await;
    let assignment = agent.assignment().await;
    let denied = invoke(&kernel, &assignment, "fetch").await;
    assert_eq!(
        denied["error"],
        "budget exceeded: max_steps 4 reached (4 tool steps so far) (rule: allow-rest)"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn without_a_budget_the_execution_has_no_budget_field() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "plain").await;
    let (_, body) = kernel
        .get(&format!("/v0/executions/{}", assignment.execution_id))
        .await;
    assert!(body.get("budget").is_none(), "{body}");
    kernel.shutdown().await;
}
