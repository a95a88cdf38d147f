//! Hostile text (issue 38, item 8): a NUL in any id, label, tool id, idempotency key or
//! path is refused with 400 on both backends (PostgreSQL cannot store it in text) and changes
//! nothing, while NUL inside free-form JSON (input, arguments, output) still works; labels are
//! bounded in count, key and value size and key alphabet. Run with `KEEL_TEST_BACKEND=postgres`
//! too.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestKernel, TestRunner, assert_error, running_execution};

/// Asserts `response` is a 400 `VALIDATION_ERROR` whose message mentions `needle`.
fn refused(what: &str, response: &(StatusCode, Value), needle: &str) {
    assert_error(response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    let message = response.1["error"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{what}: {message}");
}

/// Every event of every execution, as (execution, count) pairs.
async fn event_counts(kernel: &TestKernel) -> Vec<(String, usize)> {
    let (status, list) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let mut counts = Vec::new();
    for execution in list["executions"].as_array().cloned().unwrap_or_default() {
        let id = execution["id"].as_str().unwrap_or_default().to_owned();
        counts.push((id.clone(), kernel.events(&id).await.len()));
    }
    counts
}

#[tokio::test]
async fn a_nul_is_refused_in_every_id_label_and_key_and_allowed_in_free_form_json() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "nul-agent").await;
    let mut runner = TestRunner::connect(&kernel, "nul-runner", &["remote"]).await;
    let before = event_counts(&kernel).await;
    let exec = assignment.execution_id.clone();
    let session = assignment.session_id.clone();
    let nul = "a\u{0}b";

    let create = |body: Value| {
        let kernel = &kernel;
        async move { kernel.post("/v0/executions", &body).await }
    };
    refused("agent_id", &create(json!({"agent_id": nul})).await, "NUL");
    refused(
        "label key",
        &create(json!({"agent_id": "x", "labels": {nul: "v"}})).await,
        "label",
    );
    refused(
        "label value",
        &create(json!({"agent_id": "x", "labels": {"k": nul}})).await,
        "NUL",
    );
    refused(
        "on_behalf_of",
        &create(json!({"agent_id": "x", "on_behalf_of": nul})).await,
        "on_behalf_of",
    );
    for path in [
        "/v0/executions?agent_id=a%00b",
        "/v0/executions?label=k%3Da%00",
        "/v0/executions/e%00x",
        "/v0/executions/e%00x/events",
        "/v0/events?agent_id=a%00",
        "/v0/agents/stream?agent_id=a%00&consumer_id=c",
        "/v0/runners/stream?runner_id=r%00&consumer_id=c&capabilities=t",
    ] {
        refused(path, &kernel.get(path).await, "NUL");
    }
    for (path, body) in [
        ("/v0/executions/e%00x/cancel", json!({})),
        ("/v0/executions/e%00x/signal", json!({"signal_type": "go"})),
        (
            "/v0/runners/r%00/tools",
            json!({"tools": [{"id": "t", "input_schema": {"type": "object"}}]}),
        ),
        ("/v0/approvals/e%00.s", json!({"decision": "approve"})),
    ] {
        refused(path, &kernel.post(path, &body).await, "NUL");
    }
    let intent = |fields: Value| {
        let mut body = json!({"execution_id": exec, "session_id": session});
        if let Value::Object(map) = &mut body
            && let Value::Object(extra) = fields
        {
            map.extend(extra);
        }
        let kernel = &kernel;
        async move { kernel.post("/v0/agents/intent", &body).await }
    };
    for (what, fields) in [
        (
            "tool_id",
            json!({"intent": {"type": "invoke_tool", "tool_id": nul, "arguments": {}}}),
        ),
        (
            "idempotency_key",
            json!({"intent": {"type": "invoke_tool", "tool_id": "t", "arguments": {}, "idempotency_key": nul}}),
        ),
        (
            "signal_type",
            json!({"intent": {"type": "wait", "signal_type": nul}}),
        ),
        (
            "execution_id",
            json!({"execution_id": nul, "intent": {"type": "complete"}}),
        ),
        (
            "session_id",
            json!({"session_id": nul, "intent": {"type": "complete"}}),
        ),
    ] {
        refused(what, &intent(fields).await, "NUL");
    }
    let step_result =
        json!({"execution_id": exec, "session_id": session, "step_id": nul, "success": true});
    refused(
        "step_id",
        &kernel.post("/v0/agents/step-result", &step_result).await,
        "NUL",
    );
    refused(
        "signal_type of a signal",
        &kernel
            .post(
                &format!("/v0/executions/{exec}/signal"),
                &json!({"signal_type": nul}),
            )
            .await,
        "NUL",
    );
    refused(
        "published tool id",
        &kernel
            .post(
                "/v0/runners/nul-runner/tools",
                &json!({"tools": [{"id": nul, "input_schema": {"type": "object"}}]}),
            )
            .await,
        "NUL",
    );
    refused(
        "runner result job id",
        &kernel
            .post(
                "/v0/runners/nul-runner/results",
                &json!({"job_id": nul, "execution_id": exec, "step_id": "s", "consumer_id": runner.consumer_id, "success": true}),
            )
            .await,
        "NUL",
    );
    let (status, batch) = kernel
        .post(
            "/v0/approvals",
            &json!({"answers": [{"id": format!("{exec}.{nul}"), "decision": "approve"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    assert_eq!(
        (&batch["results"][0]["status"], &batch["results"][0]["code"]),
        (&json!(400), &json!("VALIDATION_ERROR")),
        "{batch}"
    );
    refused(
        "key name",
        &kernel
            .post("/v0/keys", &json!({"name": nul, "role": "agent"}))
            .await,
        "key name",
    );
    assert_eq!(event_counts(&kernel).await, before, "nothing was recorded");

    // NUL inside free-form JSON is data: a call with it in its arguments goes to the runner
    // and the execution completes with it in its output.
    let (status, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "remote", "remote": true, "arguments": {"q": nul}}),
        )
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let job = runner.job().await;
    assert_eq!(job["arguments"]["q"], nul, "{job}");
    let (status, body) = runner.result(&kernel, &job, true, json!({"r": nul})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assignment.complete(&kernel, json!({"out": nul})).await;
    crate::harness::eventually("the execution completes", || async {
        (kernel.status(&exec).await == "completed").then_some(())
    })
    .await;
    let created = kernel.create("nul-agent", json!({"text": nul})).await;
    assert_eq!(created["input"]["text"], nul, "{created}");
    // So is an error message: a failed step and a failed execution keep it.
    let second = second_execution(&kernel).await;
    let (status, body) = second
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "local", "arguments": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let step = body["step_id"].as_str().unwrap_or_default().to_owned();
    let (status, body) = kernel
        .post(
            "/v0/agents/step-result",
            &json!({"execution_id": second.execution_id, "session_id": second.session_id,
                    "step_id": step, "success": false, "error": nul}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = second
        .intent(&kernel, json!({"type": "fail", "error": nul}))
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    crate::harness::eventually("the execution fails", || async {
        (kernel.status(&second.execution_id).await == "failed").then_some(())
    })
    .await;
    let (status, body) = kernel
        .get(&format!("/v0/executions/{}", second.execution_id))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    kernel.shutdown().await;
}

/// An execution of another agent, assigned (its agent's stream is dropped; the session lasts
/// the agent grace).
async fn second_execution(kernel: &TestKernel) -> crate::harness::Assignment {
    running_execution(kernel, "nul-agent-2").await.1
}

#[tokio::test]
async fn labels_are_bounded_in_number_key_alphabet_and_value_size() {
    let kernel = TestKernel::start().await;
    let many: serde_json::Map<String, Value> =
        (0..65).map(|n| (format!("k{n}"), json!("v"))).collect();
    let cases = [
        (json!(many), "at most 64 labels"),
        (json!({"": "v"}), "label key"),
        (json!({"a:b": "v"}), "label key"),
        (json!({"a=b": "v"}), "label key"),
        (json!({"k".repeat(129): "v"}), "label key"),
        (json!({"k": "v".repeat(1025)}), "exceeds 1024 bytes"),
    ];
    for (labels, needle) in cases {
        let response = kernel
            .post(
                "/v0/executions",
                &json!({"agent_id": "labelled", "labels": labels}),
            )
            .await;
        refused(needle, &response, needle);
    }
    let (status, list) = kernel.get("/v0/executions").await;
    assert_eq!(
        (status, &list["executions"]),
        (StatusCode::OK, &json!([])),
        "{list}"
    );
    // At the limits: 64 labels, keys of 128 bytes of the whole alphabet, values of 1 KiB.
    let full: serde_json::Map<String, Value> = (0..64)
        .map(|n| {
            (
                format!("{n:03}.a-Z_/{}", "k".repeat(119)),
                json!("v".repeat(1024)),
            )
        })
        .collect();
    let created = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": "labelled", "labels": full}),
        )
        .await;
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    assert_eq!(
        created.1["labels"].as_object().map(|labels| labels.len()),
        Some(64)
    );
    kernel.shutdown().await;
}
