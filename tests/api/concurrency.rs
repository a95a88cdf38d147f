//! Concurrency limits over HTTP (docs/guardrails.md): executions of an agent beyond its
//! `max_running` stay pending and are assigned in queue order as running ones end, also across
//! a kernel restart; so do those whose label value is at its `concurrency.labels` limit, while
//! other values' executions pass them; remote jobs of a tool id at its `max_concurrent_steps` wait in the
//! dispatcher's queue and go, in order, as results free their slots.

use std::time::Duration;

use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Options, TestAgent, TestKernel, TestRunner};

fn install(config: &mut KernelConfig, head: &str) {
    crate::harness::install_allow_all_policy(config, head);
}

fn two_running(config: &mut KernelConfig) {
    install(config, "concurrency:\n  max_running: 2\n");
    // Sessions outlive the restart: the agent reconnects within the grace.
    config.agent_grace = Duration::from_secs(30);
}

fn one_index_step(config: &mut KernelConfig) {
    install(
        config,
        "concurrency:\n  tools:\n    - tool_id: 'index*'\n      max_concurrent_steps: 1\n",
    );
}

fn options(kernel: fn(&mut KernelConfig)) -> Options {
    Options {
        kernel,
        ..Options::default()
    }
}

async fn metric(kernel: &TestKernel, sample: &str) -> Option<u64> {
    let text = kernel
        .client
        .get(kernel.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map(|value| value.trim().parse().expect("sample value"))
}

async fn statuses(kernel: &TestKernel, ids: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for id in ids {
        found.push(kernel.status(id).await);
    }
    found
}

/// Completes an execution through its session (the session of the assignment `assigned`).
async fn complete(kernel: &TestKernel, assigned: &Value) {
    let body = json!({
        "execution_id": assigned["execution_id"], "session_id": assigned["session_id"],
        "intent": {"type": "complete", "output": "done"},
    });
    let (status, body) = kernel.post("/v0/agents/intent", &body).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
}

#[tokio::test]
async fn max_running_queues_executions_and_releases_them_in_order_across_a_restart() {
    let kernel = TestKernel::start_with(options(two_running)).await;
    let mut agent = TestAgent::connect(&kernel, "worker").await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let created = kernel.create("worker", json!({ "n": n })).await;
        ids.push(created["id"].as_str().expect("id").to_owned());
    }
    let first = agent.assignment().await;
    let second = agent.assignment().await;
    assert_eq!(
        [&first.execution_id, &second.execution_id],
        [&ids[0], &ids[1]]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        statuses(&kernel, &ids).await,
        ["running", "running", "pending", "pending", "pending"]
    );
    let in_use = "keel_concurrency_slots_in_use{scope=\"agent\",id=\"worker\"}";
    let waiting = "keel_concurrency_waiting{scope=\"agent\",id=\"worker\"}";
    assert_eq!(metric(&kernel, in_use).await, Some(2));
    assert_eq!(metric(&kernel, waiting).await, Some(3));

    complete(&kernel, &first.data).await;
    let third = agent.assignment().await;
    assert_eq!(
        third.execution_id, ids[2],
        "the oldest pending execution is next"
    );

    // Restart with two executions running and two pending: the running ones keep their
    // slots, nothing more is assigned until one of them ends.
    let kernel = kernel.restart(options(two_running)).await;
    agent.reconnect(&kernel).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        statuses(&kernel, &ids[1..]).await,
        ["running", "running", "pending", "pending"]
    );
    assert_eq!(metric(&kernel, in_use).await, Some(2));
    complete(&kernel, &second.data).await;
    let fourth = agent.assignment().await;
    assert_eq!(fourth.execution_id, ids[3]);
    complete(&kernel, &third.data).await;
    let fifth = agent.assignment().await;
    assert_eq!(fifth.execution_id, ids[4]);
    assert_eq!(metric(&kernel, waiting).await, Some(0));
    kernel.shutdown().await;
}

#[tokio::test]
async fn remote_steps_of_a_tool_at_its_limit_wait_for_a_free_slot_in_order() {
    let kernel = TestKernel::start_with(options(one_index_step)).await;
    let mut first_runner = TestRunner::connect(&kernel, "indexer", &["index", "other"]).await;
    let mut second_runner = TestRunner::connect(&kernel, "indexer", &["index", "other"]).await;
    let mut agent = TestAgent::connect(&kernel, "a").await;
    kernel.create("a", json!(1)).await;
    let assignment = agent.assignment().await;
    let mut steps = Vec::new();
    for tool in ["index", "index", "other"] {
        let (status, body) = assignment
            .intent(
                &kernel,
                json!({"type": "invoke_tool", "tool_id": tool, "remote": true}),
            )
            .await;
        assert_eq!(
            (status, &body["accepted"]),
            (StatusCode::OK, &json!(true)),
            "{body}"
        );
        steps.push(body["step_id"].as_str().expect("step").to_owned());
    }
    // One `index` job and the `other` job go out; the second `index` job waits.
    let mut held = Vec::new();
    for runner in [&mut first_runner, &mut second_runner] {
        held.push(runner.job().await);
    }
    let mut tools: Vec<&str> = held
        .iter()
        .map(|job| job["tool_id"].as_str().unwrap_or(""))
        .collect();
    tools.sort_unstable();
    assert_eq!(tools, ["index", "other"]);
    let index_at = held
        .iter()
        .position(|job| job["tool_id"] == "index")
        .unwrap_or(0);
    assert_eq!(held[index_at]["step_id"], json!(steps[0]));
    let in_use = "keel_concurrency_slots_in_use{scope=\"tool\",id=\"index\"}";
    assert_eq!(metric(&kernel, in_use).await, Some(1));
    assert_eq!(
        metric(
            &kernel,
            "keel_concurrency_waiting{scope=\"tool\",id=\"index\"}"
        )
        .await,
        Some(1)
    );
    // The `other` job's result frees a runner but not an `index` slot: nothing is delivered.
    let other_at = 1 - index_at;
    let holder = |at: usize| {
        if at == 0 {
            &first_runner
        } else {
            &second_runner
        }
    };
    let (status, body) = holder(other_at)
        .result(&kernel, &held[other_at], true, json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let quiet = tokio::time::timeout(Duration::from_millis(300), async {
        if other_at == 0 {
            first_runner.job().await
        } else {
            second_runner.job().await
        }
    })
    .await;
    assert!(
        quiet.is_err(),
        "no job while `index` is at its limit: {quiet:?}"
    );
    // The first `index` result frees the slot: the second `index` job goes out.
    let holder = if index_at == 0 {
        &first_runner
    } else {
        &second_runner
    };
    let (status, body) = holder
        .result(&kernel, &held[index_at], true, json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let next = tokio::select! {
        job = first_runner.job() => job,
        job = second_runner.job() => job,
    };
    assert_eq!(next["step_id"], json!(steps[1]));
    assert_eq!(next["tool_id"], "index");
    kernel.shutdown().await;
}

fn one_shell_step(config: &mut KernelConfig) {
    install(
        config,
        "concurrency:\n  tools:\n    - tool_id: shell\n      max_concurrent_steps: 1\n",
    );
}

#[tokio::test]
async fn a_local_call_of_a_tool_at_its_limit_is_denied_naming_the_limit() {
    let kernel = TestKernel::start_with(options(one_shell_step)).await;
    let mut agent = TestAgent::connect(&kernel, "local").await;
    kernel.create("local", json!(1)).await;
    kernel.create("local", json!(2)).await;
    let first = agent.assignment().await;
    let second = agent.assignment().await;
    let running = first.invoke(&kernel, "shell").await;
    // Another execution's local call of the same tool: the one slot is taken.
    let before = kernel.events(&second.execution_id).await.len();
    let (status, denied) = second
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "shell", "arguments": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{denied}");
    assert_eq!(denied["accepted"], false, "{denied}");
    let error = denied["error"].as_str().expect("error");
    assert_eq!(
        error,
        "policy denied: concurrency limit: max_concurrent_steps 1 reached for tool shell \
         (1 local steps running) (rule: allow-all)"
    );
    let events = kernel.events(&second.execution_id).await;
    assert_eq!(events.len(), before + 1, "{events:#?}");
    assert_eq!(events[before]["type"], "intent.denied");
    assert_eq!(
        metric(&kernel, "keel_concurrency_denials_total{scope=\"tool\"}").await,
        Some(1)
    );
    // Other tools are not limited, and a remote call of the tool waits in the queue instead.
    second.invoke(&kernel, "search").await;
    // The running step's result frees the slot.
    let (status, body) = first
        .step_result(&kernel, &running, true, json!("ok"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    second.invoke(&kernel, "shell").await;
    kernel.shutdown().await;
}

fn one_per_tenant(config: &mut KernelConfig) {
    install(
        config,
        "concurrency:\n  labels:\n    - label: tenant\n      max_running: 1\n",
    );
    config.agent_grace = Duration::from_secs(30);
}

/// Creates an execution of `worker` with `labels` and returns its id.
async fn create_labelled(kernel: &TestKernel, labels: Value) -> String {
    let request = json!({"agent_id": "worker", "input": {}, "labels": labels});
    let (status, body) = kernel.post("/v0/executions", &request).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn a_tenant_at_its_label_limit_waits_while_another_tenant_runs_across_a_restart() {
    let kernel = TestKernel::start_with(options(one_per_tenant)).await;
    let mut agent = TestAgent::connect(&kernel, "worker").await;
    let acme_1 = create_labelled(&kernel, json!({"tenant": "acme"})).await;
    let acme_2 = create_labelled(&kernel, json!({"tenant": "acme"})).await;
    let bolt_1 = create_labelled(&kernel, json!({"tenant": "bolt"})).await;
    let first = agent.assignment().await;
    let second = agent.assignment().await;
    // The second tenant's execution passed the first tenant's waiting one.
    assert_eq!(
        [&first.execution_id, &second.execution_id],
        [&acme_1, &bolt_1]
    );
    let ids = [acme_1.clone(), acme_2.clone(), bolt_1.clone()];
    assert_eq!(
        statuses(&kernel, &ids).await,
        ["running", "pending", "running"]
    );
    let in_use = "keel_concurrency_slots_in_use{scope=\"label\",id=\"worker/tenant\"}";
    let waiting = "keel_concurrency_waiting{scope=\"label\",id=\"worker/tenant\"}";
    assert_eq!(metric(&kernel, in_use).await, Some(2));
    assert_eq!(metric(&kernel, waiting).await, Some(1));
    // No agent-wide limit: its gauges do not exist.
    let agent_gauge = "keel_concurrency_slots_in_use{scope=\"agent\",id=\"worker\"}";
    assert_eq!(metric(&kernel, agent_gauge).await, None);

    // After a restart the running executions still hold their tenants' slots, rebuilt from the
    // store: `acme`'s second execution and a new `bolt` one wait, an unlabelled one runs.
    let kernel = kernel.restart(options(one_per_tenant)).await;
    agent.reconnect(&kernel).await;
    let bolt_2 = create_labelled(&kernel, json!({"tenant": "bolt"})).await;
    let plain = create_labelled(&kernel, json!({"team": "ops"})).await;
    let third = agent.assignment().await;
    assert_eq!(
        third.execution_id, plain,
        "no tenant label: not limited by it"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        statuses(&kernel, &[acme_2.clone(), bolt_2.clone()]).await,
        ["pending", "pending"]
    );
    assert_eq!(metric(&kernel, in_use).await, Some(2));
    assert_eq!(metric(&kernel, waiting).await, Some(2));
    // The first tenant's execution completes: its waiting one runs.
    complete(&kernel, &first.data).await;
    let fourth = agent.assignment().await;
    assert_eq!(fourth.execution_id, acme_2);
    complete(&kernel, &second.data).await;
    let fifth = agent.assignment().await;
    assert_eq!(fifth.execution_id, bolt_2);
    assert_eq!(metric(&kernel, waiting).await, Some(0));
    kernel.shutdown().await;
}
