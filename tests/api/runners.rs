//! Runner routes (WIRE.md §11.2, §11.3, §13): the runner stream, remote jobs end to end,
//! results and their validation, step started, tool publishing, the tool directory,
//! capabilities and unregistering.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestKernel, TestRunner, assert_error, running_execution};

#[tokio::test]
async fn runner_stream_requires_both_ids() {
    let kernel = TestKernel::start().await;
    let message = "validation error: runner_id and consumer_id query params are required";
    for query in ["", "?runner_id=r", "?consumer_id=c&capabilities=a"] {
        let response = kernel.get(&format!("/v0/runners/stream{query}")).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(message),
        );
    }
    let long = "r".repeat(257);
    let response = kernel
        .get(&format!(
            "/v0/runners/stream?runner_id={long}&consumer_id=c"
        ))
        .await;
    assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_remote_tool_runs_on_a_runner_and_the_result_reaches_the_agent() {
    let kernel = TestKernel::start().await;
    // Capabilities are comma separated, trimmed, with empties dropped.
    let mut runner = TestRunner::connect(&kernel, "gh", &[" github_pr ", "", "other"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "coder").await;
    let intent = json!({"type": "invoke_tool", "tool_id": "github_pr", "arguments": {"title": "t"}, "remote": true});
    let (status, body) = assignment.intent(&kernel, intent).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let step_id = body["step_id"].as_str().unwrap().to_owned();
    let job = runner.job().await;
    assert_eq!(job["execution_id"], *assignment.execution_id);
    assert_eq!(job["step_id"], *step_id);
    assert_eq!(job["tool_id"], "github_pr");
    assert_eq!(job["arguments"], json!({"title": "t"}));
    assert_eq!(job["attempt"], 1);
    assert!(
        job["id"].is_string() && job["tool_version"].is_i64(),
        "{job}"
    );
    let started = json!({"execution_id": assignment.execution_id, "runner_id": "gh"});
    let (status, body) = kernel
        .post(&format!("/v0/runners/steps/{step_id}/started"), &started)
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = runner
        .result(&kernel, &job, true, json!({"url": "u"}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["status"], "succeeded");
    assert_eq!(pushed["result"], json!({"url": "u"}));
    // Started again after completion: 200, no event.
    let count = kernel.events(&assignment.execution_id).await.len();
    let (status, _) = kernel
        .post(&format!("/v0/runners/steps/{step_id}/started"), &started)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    let types = kernel.event_types(&assignment.execution_id).await;
    for expected in [
        "step.created",
        "step.dispatched",
        "step.started",
        "step.completed",
    ] {
        assert!(
            types.contains(&expected.to_owned()),
            "{expected} in {types:?}"
        );
    }
    // A second, different result for the finished step conflicts.
    let response = runner.result(&kernel, &job, false, Value::Null).await;
    assert_error(
        &response,
        StatusCode::CONFLICT,
        "CONFLICT",
        Some("step already resolved"),
    );
    assert_eq!(kernel.events(&assignment.execution_id).await.len(), count);
    kernel.shutdown().await;
}

#[tokio::test]
async fn runner_results_are_validated() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "validate").await;
    let eid = assignment.execution_id.as_str();
    let required = "validation error: job_id, execution_id, and step_id are required";
    for body in [
        json!({}),
        json!({"job_id": "j", "execution_id": eid}),
        json!({"execution_id": eid, "step_id": "s"}),
    ] {
        let response = kernel.post("/v0/runners/r1/results", &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(required),
        );
    }
    for field in ["started_at", "completed_at"] {
        let body = json!({"job_id": "j", "execution_id": eid, "step_id": "s", field: "not a time"});
        let response = kernel.post("/v0/runners/r1/results", &body).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    }
    assert_error(
        &kernel.post_raw("/v0/runners/r1/results", "").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: invalid JSON: EOF"),
    );
    let unknown = json!({"job_id": "j", "execution_id": eid, "step_id": "0196f1c2-0000-7000-8000-0000000000aa",
        "started_at": "2026-05-21T14:20:38.123456-07:00", "completed_at": "2026-05-21T14:20:39Z"});
    let response = kernel.post("/v0/runners/r1/results", &unknown).await;
    assert_error(&response, StatusCode::NOT_FOUND, "NOT_FOUND", None);
    let started_required = "validation error: execution_id and runner_id are required";
    for body in [
        json!({}),
        json!({"execution_id": eid}),
        json!({"runner_id": "r1"}),
    ] {
        let response = kernel.post("/v0/runners/steps/s1/started", &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(started_required),
        );
    }
    let response = kernel
        .post(
            "/v0/runners/steps/unknown-step/started",
            &json!({"execution_id": eid, "runner_id": "r1"}),
        )
        .await;
    assert_error(
        &response,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        Some("not found: step unknown-step"),
    );
    assert_eq!(
        kernel.event_types(eid).await,
        vec!["execution.created", "execution.started"]
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_rejected_result_still_frees_the_runner_for_the_next_job() {
    let kernel = TestKernel::start().await;
    let mut runner = TestRunner::connect(&kernel, "solo", &["work"]).await;
    let (_agent, assignment) = running_execution(&kernel, "twice").await;
    let remote = json!({"type": "invoke_tool", "tool_id": "work", "remote": true});
    let (_, first) = assignment.intent(&kernel, remote.clone()).await;
    let (_, second) = assignment.intent(&kernel, remote).await;
    assert_eq!(
        (first["accepted"].clone(), second["accepted"].clone()),
        (json!(true), json!(true))
    );
    let job = runner.job().await;
    assert_eq!(job["step_id"], first["step_id"]);
    // The runner is busy: the second job waits until the runner is freed by a result, even a
    // rejected one.
    let broken = json!({"job_id": job["id"], "execution_id": job["execution_id"], "consumer_id": runner.consumer_id});
    let response = kernel
        .post(
            &format!("/v0/runners/{}/results", runner.runner_id),
            &broken,
        )
        .await;
    assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    let next = runner.job().await;
    assert_eq!(next["step_id"], second["step_id"]);
    kernel.shutdown().await;
}

#[tokio::test]
async fn retryable_failures_are_retried_without_telling_the_agent() {
    let kernel = TestKernel::start().await;
    let mut runner = TestRunner::connect(&kernel, "retry", &["flaky"]).await;
    let (_agent, assignment) = running_execution(&kernel, "patient").await;
    let (_, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "flaky", "remote": true}),
        )
        .await;
    let step_id = body["step_id"].as_str().unwrap().to_owned();
    let job = runner.job().await;
    let failure = json!({"job_id": job["id"], "execution_id": job["execution_id"], "step_id": step_id,
        "success": false, "error": "try again", "retryable": true, "consumer_id": runner.consumer_id});
    let (status, _) = kernel.post("/v0/runners/retry/results", &failure).await;
    assert_eq!(status, StatusCode::OK);
    let retry = runner.job().await;
    assert_eq!(retry["step_id"], *step_id);
    assert_eq!(retry["attempt"], 2);
    let types = kernel.event_types(&assignment.execution_id).await;
    assert!(types.contains(&"step.retried".to_owned()), "{types:?}");
    kernel.shutdown().await;
}

#[tokio::test]
async fn published_tools_are_listed_by_prefix() {
    let kernel = TestKernel::start().await;
    let tools = json!({"tools": [
        {"id": "github_create_pr", "description": "Open a PR", "input_schema": {"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]}},
        {"id": "github", "description": "root"},
        {"id": "githubactions_run", "description": "other"},
        {"id": "web.search", "description": "dotted", "input_schema": {}},
    ]});
    let response = kernel
        .client
        .post(kernel.url("/v0/runners/gh/tools"))
        .json(&tools)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(response.bytes().await.unwrap().is_empty());
    let ids = |body: &Value| -> BTreeSet<String> {
        body.as_array()
            .expect("a JSON array")
            .iter()
            .map(|tool| tool["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, all) = kernel.get("/v0/tools").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&all).len(), 4);
    let (_, github) = kernel.get("/v0/tools?prefix=github").await;
    assert_eq!(
        ids(&github),
        BTreeSet::from(["github".to_owned(), "github_create_pr".to_owned()])
    );
    let entry = github
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["id"] == "github_create_pr")
        .unwrap();
    assert_eq!(entry["runner_id"], "gh");
    assert_eq!(entry["description"], "Open a PR");
    assert_eq!(entry["input_schema"]["required"], json!(["t"]));
    assert!(entry["registered_at"].is_string());
    let (_, web) = kernel.get("/v0/tools?prefix=web").await;
    assert_eq!(ids(&web), BTreeSet::from(["web.search".to_owned()]));
    let (_, none) = kernel.get("/v0/tools?prefix=nothing").await;
    assert_eq!(none, json!([]));
    // Publishing replaces, never merges.
    let response = kernel
        .client
        .post(kernel.url("/v0/runners/gh/tools"))
        .json(&json!({"tools": [{"id": "github_merge"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (_, all) = kernel.get("/v0/tools").await;
    assert_eq!(ids(&all), BTreeSet::from(["github_merge".to_owned()]));
    // Bad bodies.
    assert_error(
        &kernel.post_raw("/v0/runners/gh/tools", "{").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    assert_error(
        &kernel
            .post("/v0/runners/gh/tools", &json!({"tools": "x"}))
            .await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    // Unregistering drops the schemas; also with a trailing slash and any body.
    let response = kernel
        .client
        .delete(kernel.url("/v0/runners/gh/"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (_, all) = kernel.get("/v0/tools").await;
    assert_eq!(all, json!([]));
    let response = kernel
        .client
        .delete(kernel.url("/v0/runners/never-seen"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    kernel.shutdown().await;
}

#[tokio::test]
async fn capabilities_can_be_replaced_and_jobs_follow_them() {
    let kernel = TestKernel::start().await;
    let mut runner = TestRunner::connect(&kernel, "caps", &["old_tool"]).await;
    let (status, body) = kernel
        .post(
            "/v0/runners/caps/capabilities",
            &json!({"tools": ["new_tool"]}),
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, _) = kernel
        .post("/v0/runners/unknown/capabilities", &json!({}))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "missing list and unknown runner are fine"
    );
    assert_error(
        &kernel
            .post("/v0/runners/caps/capabilities", &json!({"tools": 3}))
            .await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    let (_agent, assignment) = running_execution(&kernel, "capable").await;
    let (_, body) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "new_tool", "remote": true}),
        )
        .await;
    let job = runner.job().await;
    assert_eq!(job["step_id"], body["step_id"]);
    kernel.shutdown().await;
}
