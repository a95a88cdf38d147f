//! Runner step reports (`POST /v0/runners/steps/{id}/started` and `.../progress`): both routes
//! read and check a report's ids with one reader, so they refuse the same bad bodies with the
//! same errors and record nothing; valid reports on a running remote step are recorded.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestKernel, TestRunner, assert_error, running_execution};

#[tokio::test]
async fn both_step_reports_refuse_bad_ids_alike_and_record_valid_reports() {
    let kernel = TestKernel::start().await;
    let mut runner = TestRunner::connect(&kernel, "gh", &["github_pr"]).await;
    let (_agent, assignment) = running_execution(&kernel, "coder").await;
    let intent =
        json!({"type": "invoke_tool", "tool_id": "github_pr", "arguments": {}, "remote": true});
    let (status, body) = assignment.intent(&kernel, intent).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let step_id = body["step_id"].as_str().expect("step id").to_owned();
    runner.job().await;
    let eid = assignment.execution_id.clone();
    let before = kernel.events(&eid).await;

    let required = "validation error: execution_id and runner_id are required";
    let long = "r".repeat(257);
    for route in ["started", "progress"] {
        let path = format!("/v0/runners/steps/{step_id}/{route}");
        let with_fields = |mut body: Value| {
            if route == "progress" {
                body["progress"] = json!(0.5);
            }
            body
        };
        let probes = [
            (json!({"runner_id": "gh"}), Some(required)),
            (json!({"execution_id": eid}), Some(required)),
            (
                json!({"execution_id": eid, "runner_id": ""}),
                Some(required),
            ),
            (
                json!({"execution_id": "", "runner_id": "gh"}),
                Some(required),
            ),
            (json!({"execution_id": eid, "runner_id": long}), None),
            (json!({"execution_id": "e\u{0}", "runner_id": "gh"}), None),
        ];
        for (body, message) in probes {
            let response = kernel.post(&path, &with_fields(body.clone())).await;
            assert_error(
                &response,
                StatusCode::BAD_REQUEST,
                "VALIDATION_ERROR",
                message,
            );
        }
    }
    let progress = format!("/v0/runners/steps/{step_id}/progress");
    let response = kernel
        .post(&progress, &json!({"execution_id": eid, "runner_id": "gh"}))
        .await;
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: progress (a number) is required"),
    );
    assert_eq!(kernel.events(&eid).await, before, "nothing recorded");

    let ids = json!({"execution_id": eid, "runner_id": "gh"});
    let (status, body) = kernel
        .post(&format!("/v0/runners/steps/{step_id}/started"), &ids)
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let report = json!({"execution_id": eid, "runner_id": "gh", "progress": 2, "total": 4, "message": "half"});
    let (status, body) = kernel.post(&progress, &report).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let events = kernel.events(&eid).await;
    let recorded: Vec<&Value> = events[before.len()..].iter().collect();
    let types: Vec<&str> = recorded
        .iter()
        .filter_map(|event| event["type"].as_str())
        .collect();
    assert_eq!(types, ["step.started", "step.progress"], "{recorded:?}");
    let data = &recorded[1]["payload"];
    assert_eq!(
        (&data["progress"], &data["total"], &data["message"]),
        (&json!(2.0), &json!(4.0), &json!("half")),
        "{data}"
    );
    kernel.shutdown().await;
}
