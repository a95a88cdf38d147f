//! Agent routes (WIRE.md §9, §10.1, §11.1): the agent stream, intents with their validation
//! order, policy outcomes, approvals, signal waits and local step results.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestAgent, TestKernel, assert_error, eventually, running_execution};

#[tokio::test]
async fn agent_stream_requires_both_ids_of_bounded_length() {
    let kernel = TestKernel::start().await;
    let message = "validation error: agent_id and consumer_id query params are required";
    for query in [
        "",
        "?agent_id=a",
        "?consumer_id=c",
        "?agent_id=&consumer_id=c",
    ] {
        let response = kernel.get(&format!("/v0/agents/stream{query}")).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(message),
        );
    }
    let long = "x".repeat(257);
    for query in [
        format!("?agent_id={long}&consumer_id=c"),
        format!("?agent_id=a&consumer_id={long}"),
    ] {
        let response = kernel.get(&format!("/v0/agents/stream{query}")).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
        assert!(
            response.1["error"]
                .as_str()
                .unwrap()
                .contains("exceeds maximum length of 256")
        );
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_local_tool_round_trip_completes_the_execution() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "worker").await;
    let step_id = assignment.invoke(&kernel, "search").await;
    let (status, body) = assignment
        .step_result(&kernel, &step_id, true, json!({"hits": 3}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["execution_id"], *assignment.execution_id);
    assert_eq!(pushed["step_id"], *step_id);
    assert_eq!(pushed["status"], "succeeded");
    assert_eq!(pushed["result"], json!({"hits": 3}));
    assignment.complete(&kernel, json!({"answer": 42})).await;
    let (_, execution) = kernel
        .get(&format!("/v0/executions/{}", assignment.execution_id))
        .await;
    assert_eq!(execution["status"], "completed");
    assert_eq!(execution["output"], json!({"answer": 42}));
    let types = kernel.event_types(&assignment.execution_id).await;
    assert!(
        types.contains(&"step.created".to_owned()) && types.contains(&"step.completed".to_owned()),
        "{types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("execution.completed")
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn intent_handler_checks_run_in_wire_order() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "order").await;
    let (eid, sid) = (
        assignment.execution_id.as_str(),
        assignment.session_id.as_str(),
    );
    let long = "t".repeat(257);
    let cases = [
        (json!({}), "validation error: execution_id is required"),
        (
            json!({"session_id": sid, "intent": {"type": "complete"}}),
            "validation error: execution_id is required",
        ),
        (
            json!({"execution_id": eid, "intent": {"type": "complete"}}),
            "validation error: session_id is required",
        ),
        (
            json!({"execution_id": eid, "session_id": sid}),
            "validation error: intent.type is required",
        ),
        (
            json!({"execution_id": eid, "session_id": sid, "intent": {}}),
            "validation error: intent.type is required",
        ),
        (
            json!({"execution_id": eid, "session_id": sid, "intent": null}),
            "validation error: intent.type is required",
        ),
        (
            json!({"execution_id": eid, "session_id": sid, "intent": {"type": "complete", "tool_id": long}}),
            "validation error: tool_id exceeds maximum length of 256 characters",
        ),
        (
            json!({"execution_id": eid, "session_id": sid, "intent": {"type": "complete", "signal_type": long}}),
            "validation error: signal_type exceeds maximum length of 256 characters",
        ),
        (
            json!({"execution_id": eid, "session_id": sid, "intent": {"type": "dance"}}),
            "validation error: unknown intent type dance",
        ),
    ];
    let before = kernel.events(eid).await.len();
    for (body, message) in cases {
        let response = kernel.post("/v0/agents/intent", &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(message),
        );
    }
    let missing = [
        (
            json!({"type": "invoke_tool"}),
            "validation error: tool_id is required for invoke_tool",
        ),
        (
            json!({"type": "invoke_tool", "tool_id": ""}),
            "validation error: tool_id is required for invoke_tool",
        ),
        (
            json!({"type": "wait"}),
            "validation error: signal_type is required for wait",
        ),
        (
            json!({"type": "wait", "signal_type": ""}),
            "validation error: signal_type is required for wait",
        ),
    ];
    for (intent, message) in missing {
        let response = assignment.intent(&kernel, intent).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(message),
        );
    }
    assert_error(
        &kernel.post_raw("/v0/agents/intent", "").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: invalid JSON: EOF"),
    );
    assert_error(
        &kernel.post_raw("/v0/agents/intent", "{]").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    assert_error(
        &kernel.post_raw("/v0/agents/intent", "null").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: execution_id is required"),
    );
    assert_eq!(
        kernel.events(eid).await.len(),
        before,
        "rejected intents record nothing"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn wrong_sessions_are_401_or_400() {
    let kernel = TestKernel::start().await;
    let mut agent = TestAgent::connect(&kernel, "sessions").await;
    kernel.create("sessions", json!(1)).await;
    let first = agent.assignment().await;
    kernel.create("sessions", json!(2)).await;
    let second = agent.assignment().await;
    let before = kernel.events(&first.execution_id).await.len();
    let unknown = "0196f1c2-0000-7000-8000-00000000beef";
    let body = json!({"execution_id": first.execution_id, "session_id": unknown, "intent": {"type": "complete"}});
    let response = kernel.post("/v0/agents/intent", &body).await;
    assert_error(
        &response,
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        Some(&format!("session not found: session {unknown}")),
    );
    let body = json!({"execution_id": first.execution_id, "session_id": second.session_id, "intent": {"type": "complete"}});
    let response = kernel.post("/v0/agents/intent", &body).await;
    let message = format!(
        "validation error: session {} does not belong to execution {}",
        second.session_id, first.execution_id
    );
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some(&message),
    );
    // Session checks come before the intent's own type checks.
    let body = json!({"execution_id": first.execution_id, "session_id": unknown, "intent": {"type": "invoke_tool"}});
    let response = kernel.post("/v0/agents/intent", &body).await;
    assert_error(&response, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", None);
    // Step results go through the same session checks.
    let body = json!({"execution_id": first.execution_id, "session_id": unknown, "step_id": "s"});
    let response = kernel.post("/v0/agents/step-result", &body).await;
    assert_error(&response, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", None);
    assert!(
        response.1["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("session not found")
    );
    assert_eq!(kernel.events(&first.execution_id).await.len(), before);
    kernel.shutdown().await;
}

#[tokio::test]
async fn policy_denials_answer_200_not_accepted() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "denied").await;
    let (status, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "shell_exec"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"accepted": false, "error": "policy denied: shell is forbidden (rule: no-shell)"})
    );
    let types = kernel.event_types(&assignment.execution_id).await;
    assert_eq!(types.last().map(String::as_str), Some("intent.denied"));
    kernel.shutdown().await;
}

#[tokio::test]
async fn step_results_are_validated_and_idempotent() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "results").await;
    let step_id = assignment.invoke(&kernel, "lookup").await;
    let required = "validation error: execution_id, session_id, and step_id are required";
    for body in [
        json!({}),
        json!({"execution_id": assignment.execution_id, "session_id": assignment.session_id}),
        json!({"execution_id": assignment.execution_id, "step_id": step_id}),
        json!({"session_id": assignment.session_id, "step_id": step_id}),
    ] {
        let response = kernel.post("/v0/agents/step-result", &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(required),
        );
    }
    let unknown = "0196f1c2-0000-7000-8000-00000000f00d";
    let response = assignment
        .step_result(&kernel, unknown, true, json!(1))
        .await;
    assert_error(
        &response,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        Some(&format!("not found: step {unknown}")),
    );
    let (status, _) = assignment
        .step_result(&kernel, &step_id, true, json!({"v": 1}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let after_first = kernel.events(&assignment.execution_id).await.len();
    let (status, body) = assignment
        .step_result(&kernel, &step_id, true, json!({"v": 1}))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"status": "ok"})),
        "same outcome again is a harmless repeat"
    );
    assert_eq!(
        kernel.events(&assignment.execution_id).await.len(),
        after_first
    );
    let response = assignment
        .step_result(&kernel, &step_id, false, json!(null))
        .await;
    assert_error(
        &response,
        StatusCode::CONFLICT,
        "CONFLICT",
        Some("step already resolved"),
    );
    assert_eq!(
        kernel.events(&assignment.execution_id).await.len(),
        after_first
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_failed_local_step_and_success_defaulting_to_false() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "failing").await;
    let step_id = assignment.invoke(&kernel, "flaky").await;
    let body = json!({"execution_id": assignment.execution_id, "session_id": assignment.session_id, "step_id": step_id, "error": "nope"});
    let (status, _) = kernel.post("/v0/agents/step-result", &body).await;
    assert_eq!(status, StatusCode::OK);
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["status"], "failed");
    assert_eq!(pushed["error"], "nope");
    let events = kernel.events(&assignment.execution_id).await;
    let failed = events
        .iter()
        .find(|event| event["type"] == "step.failed")
        .expect("step.failed");
    assert_eq!(
        failed["payload"],
        json!({"error": "nope", "retryable": false})
    );
    assert_eq!(failed["step_id"], *step_id);
    kernel.shutdown().await;
}

#[tokio::test]
async fn complete_with_active_steps_conflicts_and_terminal_executions_refuse_intents() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "busy").await;
    let step_id = assignment.invoke(&kernel, "slow").await;
    let before = kernel.events(&assignment.execution_id).await.len();
    let response = assignment
        .intent(&kernel, json!({"type": "complete"}))
        .await;
    assert_error(
        &response,
        StatusCode::CONFLICT,
        "CONFLICT",
        Some("conflict: cannot complete with active steps in progress"),
    );
    let response = assignment
        .intent(&kernel, json!({"type": "fail", "error": "x"}))
        .await;
    assert_error(
        &response,
        StatusCode::CONFLICT,
        "CONFLICT",
        Some("conflict: cannot fail with active steps in progress"),
    );
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), before);
    assignment
        .step_result(&kernel, &step_id, true, json!(null))
        .await;
    // `fail` without an error is accepted with the default message.
    let (status, body) = assignment.intent(&kernel, json!({"type": "fail"})).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"accepted": true})));
    let events = kernel.events(&assignment.execution_id).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "execution.failed");
    assert_eq!(last["payload"]["error"], "agent failed without a message");
    let count = events.len();
    let message = format!(
        "execution is in terminal state: execution {} is already failed",
        assignment.execution_id
    );
    // Type checks come after the state checks: an invalid intent on a finished execution is 409.
    let intents = [
        json!({"type": "complete"}),
        json!({"type": "invoke_tool", "tool_id": "x"}),
        json!({"type": "dance"}),
        json!({"type": "invoke_tool"}),
    ];
    for intent in intents {
        let response = assignment.intent(&kernel, intent).await;
        assert_error(&response, StatusCode::CONFLICT, "CONFLICT", Some(&message));
    }
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_wait_blocks_until_the_signal_arrives_and_the_signal_is_pushed() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "waiter").await;
    let (status, body) = assignment
        .intent(&kernel, json!({"type": "wait", "signal_type": "go"}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"accepted": true})));
    assert_eq!(kernel.status(&assignment.execution_id).await, "blocked");
    let response = assignment
        .intent(&kernel, json!({"type": "invoke_tool", "tool_id": "x"}))
        .await;
    assert_error(&response, StatusCode::CONFLICT, "CONFLICT", None);
    assert!(
        response.1["error"]
            .as_str()
            .unwrap()
            .starts_with("execution is blocked")
    );
    let path = format!("/v0/executions/{}/signal", assignment.execution_id);
    let (status, _) = kernel
        .post(
            &path,
            &json!({"signal_type": "go", "payload": {"ok": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let pushed = agent.stream.next_of("signal.received").await.data;
    assert_eq!(
        pushed,
        json!({"execution_id": assignment.execution_id, "signal_type": "go", "payload": {"ok": true}})
    );
    let execution_id = assignment.execution_id.clone();
    eventually("execution resumes", || {
        let kernel = &kernel;
        let execution_id = execution_id.clone();
        async move { (kernel.status(&execution_id).await == "running").then_some(()) }
    })
    .await;
    assignment.complete(&kernel, Value::Null).await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn approvals_validate_the_payload_before_recording_anything() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "careful").await;
    let (status, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "approve_wire"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["accepted"], true);
    assert_eq!(body["pending_approval"], true);
    let step_id = body["step_id"].as_str().unwrap().to_owned();
    assert_eq!(kernel.status(&assignment.execution_id).await, "blocked");
    let path = format!("/v0/executions/{}/signal", assignment.execution_id);
    let before = kernel.events(&assignment.execution_id).await.len();
    for payload in [
        json!("yes"),
        json!([1]),
        json!(null),
        json!({"approved": true}),
    ] {
        let response = kernel
            .post(
                &path,
                &json!({"signal_type": "step.approve", "payload": payload}),
            )
            .await;
        assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    }
    let wrong =
        json!({"signal_type": "step.approve", "payload": {"step_id": "other", "approved": true}});
    let response = kernel.post(&path, &wrong).await;
    let message = format!(
        r#"validation error: approval step_id "other" does not match blocked ref "{step_id}""#
    );
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some(&message),
    );
    assert_eq!(
        kernel.events(&assignment.execution_id).await.len(),
        before,
        "bad approvals record nothing"
    );
    assert_eq!(kernel.status(&assignment.execution_id).await, "blocked");
    let approve =
        json!({"signal_type": "step.approve", "payload": {"step_id": step_id, "approved": true}});
    let (status, _) = kernel.post(&path, &approve).await;
    assert_eq!(status, StatusCode::OK);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(resolved["step_id"], *step_id);
    assert_eq!(resolved["approved"], true);
    assert_eq!(
        resolved["session_id"], *assignment.session_id,
        "original session kept"
    );
    let (status, _) = assignment
        .step_result(&kernel, &step_id, true, json!("done"))
        .await;
    assert_eq!(status, StatusCode::OK);
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_result_after_cancel_conflicts_and_the_agent_is_told() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "cancelled").await;
    let step_id = assignment.invoke(&kernel, "long").await;
    let (status, body) = kernel
        .post_raw(
            &format!("/v0/executions/{}/cancel", assignment.execution_id),
            "",
        )
        .await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &json!("cancelled"))
    );
    let pushed = agent.stream.next_of("execution.cancelled").await.data;
    assert_eq!(pushed["execution_id"], *assignment.execution_id);
    let count = kernel.events(&assignment.execution_id).await.len();
    let response = assignment
        .step_result(&kernel, &step_id, true, json!(1))
        .await;
    assert_error(&response, StatusCode::CONFLICT, "CONFLICT", None);
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    kernel.shutdown().await;
}

#[tokio::test]
async fn large_intents_and_step_results_are_accepted_up_to_the_large_limit() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "bulky").await;
    let big = "y".repeat(2 * 1024 * 1024);
    let (status, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "big", "arguments": {"blob": big}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let step_id = body["step_id"].as_str().unwrap().to_owned();
    let (status, body) = assignment
        .step_result(&kernel, &step_id, true, json!({"blob": big}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let count = kernel.events(&assignment.execution_id).await.len();
    let huge = "z".repeat(16 * 1024 * 1024 + 1);
    let response = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "big", "arguments": huge}),
        )
        .await;
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: request body too large"),
    );
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_reconnecting_consumer_keeps_its_sessions_and_pushes() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "flappy").await;
    let step_id = assignment.invoke(&kernel, "t").await;
    agent.reconnect(&kernel).await;
    let (status, body) = assignment
        .step_result(&kernel, &step_id, true, json!("r"))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the session survived the reconnect: {body}"
    );
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["step_id"], *step_id);
    let types = kernel.event_types(&assignment.execution_id).await;
    assert!(!types.contains(&"execution.reset".to_owned()), "{types:?}");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_lost_agent_is_replaced_after_the_grace_period() {
    let kernel = TestKernel::start().await;
    let (agent, assignment) = running_execution(&kernel, "fragile").await;
    let mut standby = TestAgent::connect(&kernel, "fragile").await;
    drop(agent);
    let again = standby.assignment().await;
    assert_eq!(again.execution_id, assignment.execution_id);
    assert_ne!(again.session_id, assignment.session_id);
    let types = kernel.event_types(&assignment.execution_id).await;
    assert!(types.contains(&"execution.reset".to_owned()), "{types:?}");
    let response = assignment
        .intent(&kernel, json!({"type": "complete"}))
        .await;
    assert_error(&response, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", None);
    let message = response.1["error"].as_str().unwrap().to_lowercase();
    assert!(
        message.contains("session not found") || message.contains("session expired"),
        "{message}"
    );
    again.complete(&kernel, json!(null)).await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_over_long_fail_error_is_truncated_not_rejected() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "verbose").await;
    let long = "é".repeat(3000);
    let (status, body) = assignment
        .intent(&kernel, json!({"type": "fail", "error": long}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"accepted": true})));
    let events = kernel.events(&assignment.execution_id).await;
    let error = events.last().unwrap()["payload"]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.len() <= 4096 && error.len() >= 4094,
        "{}",
        error.len()
    );
    assert!(long.starts_with(&error));
    kernel.shutdown().await;
}

#[tokio::test]
async fn idempotency_keys_return_the_original_answer() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "retrying").await;
    let key = format!("{}:search:0badf00d", assignment.execution_id);
    let intent = json!({"type": "invoke_tool", "tool_id": "search", "idempotency_key": key});
    let (status, first) = assignment.intent(&kernel, intent.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let count = kernel.events(&assignment.execution_id).await.len();
    let (status, again) = assignment.intent(&kernel, intent).await;
    assert_eq!(
        (status, &again),
        (StatusCode::OK, &first),
        "a repeat gets the original answer"
    );
    assert_eq!(
        kernel.events(&assignment.execution_id).await.len(),
        count,
        "and records nothing"
    );
    let other = json!({"type": "invoke_tool", "tool_id": "fetch", "idempotency_key": key});
    let response = assignment.intent(&kernel, other).await;
    assert_error(&response, StatusCode::CONFLICT, "CONFLICT", None);
    assert!(
        response.1["error"]
            .as_str()
            .unwrap()
            .starts_with("idempotency conflict")
    );
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    // Denials are remembered too.
    let denied = json!({"type": "invoke_tool", "tool_id": "shell_rm", "idempotency_key": "k2"});
    let (_, first) = assignment.intent(&kernel, denied.clone()).await;
    let (_, again) = assignment.intent(&kernel, denied).await;
    assert_eq!(first["accepted"], false);
    assert_eq!(again, first);
    kernel.shutdown().await;
}

#[tokio::test]
async fn waits_are_idempotent_and_pending_signals_satisfy_them_at_once() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "signalled").await;
    let path = format!("/v0/executions/{}/signal", assignment.execution_id);
    // A signal before the wait stays pending; the wait then returns at once and re-pushes it.
    let (status, _) = kernel
        .post(&path, &json!({"signal_type": "early", "payload": 7}))
        .await;
    assert_eq!(status, StatusCode::OK);
    agent.stream.next_of("signal.received").await;
    let (status, body) = assignment
        .intent(&kernel, json!({"type": "wait", "signal_type": "early"}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"accepted": true})));
    let repushed = agent.stream.next_of("signal.received").await.data;
    assert_eq!(
        repushed,
        json!({"execution_id": assignment.execution_id, "signal_type": "early", "payload": 7})
    );
    assert_eq!(kernel.status(&assignment.execution_id).await, "running");
    let types = kernel.event_types(&assignment.execution_id).await;
    assert!(
        !types.contains(&"execution.blocked".to_owned()),
        "{types:?}"
    );
    // Waiting twice for the same type is a harmless repeat.
    let wait = json!({"type": "wait", "signal_type": "late"});
    let (status, _) = assignment.intent(&kernel, wait.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let count = kernel.events(&assignment.execution_id).await.len();
    let (status, body) = assignment.intent(&kernel, wait).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"accepted": true})));
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    // A signal of another type leaves it blocked; complete abandons the wait.
    kernel
        .post(&path, &json!({"signal_type": "unrelated"}))
        .await;
    assert_eq!(kernel.status(&assignment.execution_id).await, "blocked");
    assignment.complete(&kernel, json!("early exit")).await;
    let events = kernel.events(&assignment.execution_id).await;
    let resumed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "execution.resumed")
        .collect();
    assert_eq!(
        resumed.last().unwrap()["payload"]["reason"],
        "wait abandoned"
    );
    assert_eq!(events.last().unwrap()["type"], "execution.completed");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_denied_approval_fails_the_step_and_resumes_the_execution() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "refused").await;
    let (_, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "approve_deploy"}),
        )
        .await;
    let step_id = body["step_id"].as_str().unwrap().to_owned();
    // While approval is pending every intent is refused.
    let response = assignment
        .intent(&kernel, json!({"type": "invoke_tool", "tool_id": "other"}))
        .await;
    let message = format!(
        "execution is blocked: execution {} is blocked pending approval",
        assignment.execution_id
    );
    assert_error(&response, StatusCode::CONFLICT, "CONFLICT", Some(&message));
    let deny = json!({"signal_type": "step.approve", "payload": {"step_id": step_id, "approved": false, "reason": "not today"}});
    let (status, _) = kernel
        .post(
            &format!("/v0/executions/{}/signal", assignment.execution_id),
            &deny,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let resolved = agent.stream.next_of("approval.resolved").await.data;
    assert_eq!(resolved["approved"], false);
    assert_eq!(kernel.status(&assignment.execution_id).await, "running");
    let events = kernel.events(&assignment.execution_id).await;
    let failed = events
        .iter()
        .find(|e| e["type"] == "step.failed")
        .expect("step.failed");
    assert_eq!(
        failed["payload"],
        json!({"error": "not today", "retryable": false})
    );
    kernel.shutdown().await;
}
