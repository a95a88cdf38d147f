//! Execution routes (WIRE.md §7.1–7.6): create, get, list with filters and cursor paging,
//! cancel, signal and the events snapshot — success shapes and every named bad input.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestAgent, TestKernel, assert_error};

/// Asserts a timestamp has an explicit offset and at most six fractional digits.
fn assert_timestamp(value: &Value) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("timestamp string, got {value}"));
    chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|_| panic!("RFC 3339: {text}"));
    if let Some((_, fraction)) = text.split_once('.') {
        let digits = fraction.chars().take_while(char::is_ascii_digit).count();
        assert!(digits <= 6, "{text}");
    }
}

async fn execution_count(kernel: &TestKernel) -> usize {
    let (status, body) = kernel.get("/v0/executions?limit=200").await;
    assert_eq!(status, StatusCode::OK);
    body["executions"].as_array().expect("array").len()
}

#[tokio::test]
async fn create_returns_201_with_a_pending_execution_object() {
    let kernel = TestKernel::start().await;
    let response = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .json(&json!({"agent_id": "nobody"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "pending");
    assert_eq!(body["agent_id"], "nobody");
    assert!(
        body["labels"].is_null() && body.get("labels").is_some(),
        "{body}"
    );
    assert!(
        body["input"].is_null() && body.get("input").is_some(),
        "{body}"
    );
    assert!(body.get("output").is_none(), "{body}");
    uuid::Uuid::parse_str(body["id"].as_str().unwrap()).expect("uuid id");
    assert_timestamp(&body["created_at"]);
    assert_timestamp(&body["updated_at"]);
    assert_eq!(
        kernel.event_types(body["id"].as_str().unwrap()).await,
        vec!["execution.created"]
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn create_echoes_input_and_labels_and_get_returns_the_same_object() {
    let kernel = TestKernel::start().await;
    let request =
        json!({"agent_id": "a", "input": [1, "two"], "labels": {"team": "ops"}, "unknown": true});
    let (status, created) = kernel.post("/v0/executions/", &request).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["input"], json!([1, "two"]));
    assert_eq!(created["labels"], json!({"team": "ops"}));
    // Only the creation answer carries the notice that nobody serves the agent.
    let mut created = created;
    let notice = created.as_object_mut().unwrap().remove("notice");
    assert!(notice.is_some_and(|n| n.as_str().unwrap().contains("agent a")));
    let id = created["id"].as_str().unwrap();
    for path in [
        format!("/v0/executions/{id}"),
        format!("/v0/executions/{id}/"),
    ] {
        let (status, fetched) = kernel.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(fetched, created);
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn create_rejects_bad_input_without_creating_anything() {
    let kernel = TestKernel::start().await;
    let long = "a".repeat(257);
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "validation error: agent_id is required"),
        (
            json!({"agent_id": ""}),
            "validation error: agent_id is required",
        ),
        (
            json!({"agent_id": long}),
            "validation error: agent_id exceeds maximum length of 256 characters",
        ),
        (json!({"agent_id": "a", "labels": {"n": 1}}), ""),
        (json!({"agent_id": "a", "labels": ["x"]}), ""),
        (json!({"agent_id": "a", "labels": "team:ops"}), ""),
        (json!({"agent_id": 5}), ""),
    ];
    for (body, message) in cases {
        let response = kernel.post("/v0/executions", &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            (!message.is_empty()).then_some(message),
        );
        assert!(
            response.1["error"]
                .as_str()
                .unwrap()
                .starts_with("validation error: "),
            "{}",
            response.1
        );
    }
    let exactly_256 = "b".repeat(256);
    let (status, _) = kernel
        .post("/v0/executions", &json!({"agent_id": exactly_256}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(execution_count(&kernel).await, 1);
    kernel.shutdown().await;
}

#[tokio::test]
async fn create_rejects_malformed_empty_null_and_oversized_bodies() {
    let kernel = TestKernel::start().await;
    let empty = kernel.post_raw("/v0/executions", "").await;
    assert_error(
        &empty,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: invalid JSON: EOF"),
    );
    let null = kernel.post_raw("/v0/executions", "null").await;
    assert_error(
        &null,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: agent_id is required"),
    );
    let malformed = kernel.post_raw("/v0/executions", "{\"agent_id\": ").await;
    assert_error(
        &malformed,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    assert!(
        malformed.1["error"]
            .as_str()
            .unwrap()
            .starts_with("validation error: invalid JSON: ")
    );
    let padding = "x".repeat(1024 * 1024 + 10);
    let oversized = kernel
        .post_raw(
            "/v0/executions",
            format!("{{\"agent_id\":\"a\",\"input\":\"{padding}\"}}"),
        )
        .await;
    assert_error(
        &oversized,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: request body too large"),
    );
    // Just under the limit is fine.
    let fits = "x".repeat(1024 * 1024 - 100);
    let (status, _) = kernel
        .post_raw(
            "/v0/executions",
            format!("{{\"agent_id\":\"a\",\"input\":\"{fits}\"}}"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(execution_count(&kernel).await, 1);
    kernel.shutdown().await;
}

#[tokio::test]
async fn get_and_cancel_of_unknown_executions_are_404() {
    let kernel = TestKernel::start().await;
    let id = "0196f1c2-0000-7000-8000-000000000000";
    let message = format!("not found: execution {id}");
    assert_error(
        &kernel.get(&format!("/v0/executions/{id}")).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        Some(&message),
    );
    let cancel = kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    assert_error(&cancel, StatusCode::NOT_FOUND, "NOT_FOUND", Some(&message));
    let signal = kernel
        .post(
            &format!("/v0/executions/{id}/signal"),
            &json!({"signal_type": "go"}),
        )
        .await;
    assert_error(&signal, StatusCode::NOT_FOUND, "NOT_FOUND", Some(&message));
    // The snapshot of an unknown execution is an empty page, as in the reference kernel.
    let (status, body) = kernel.get(&format!("/v0/executions/{id}/events")).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"events": [], "latest_sequence": 0}))
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn list_pages_through_every_execution_with_cursors() {
    let kernel = TestKernel::start().await;
    let mut created = BTreeSet::new();
    for index in 0..8 {
        let body = kernel
            .create(if index % 2 == 0 { "even" } else { "odd" }, json!(index))
            .await;
        created.insert(body["id"].as_str().unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, body) = kernel
            .get(&format!("/v0/executions?limit=3&cursor={cursor}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        pages += 1;
        let page = body["executions"].as_array().unwrap();
        assert!(page.len() <= 3);
        for summary in page {
            let keys: BTreeSet<&str> = summary
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                BTreeSet::from([
                    "id",
                    "status",
                    "agent_id",
                    "labels",
                    "created_at",
                    "updated_at"
                ])
            );
            assert_eq!(summary["labels"], json!({}), "labels are always an object");
            seen.push(summary.clone());
        }
        cursor = body["next_cursor"]
            .as_str()
            .expect("next_cursor is a string")
            .to_owned();
        if cursor.is_empty() {
            break;
        }
    }
    assert_eq!(pages, 3);
    let ids: Vec<String> = seen
        .iter()
        .map(|summary| summary["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.iter().cloned().collect::<BTreeSet<_>>(), created);
    assert_eq!(ids.len(), 8, "no duplicates");
    // Newest first: (created_at, id) descending.
    let keys: Vec<(String, String)> = seen
        .iter()
        .map(|s| {
            (
                s["created_at"].as_str().unwrap().to_owned(),
                s["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted);
    // An exact fit leaves no next page.
    let (_, body) = kernel.get("/v0/executions?limit=8").await;
    assert_eq!(body["next_cursor"], "");
    let (_, body) = kernel.get("/v0/executions?limit=0").await;
    assert_eq!(
        body["executions"].as_array().unwrap().len(),
        8,
        "limit 0 means the default"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn list_filters_by_status_agent_and_labels() {
    let kernel = TestKernel::start().await;
    let labelled = |agent: &str, labels: Value| json!({"agent_id": agent, "labels": labels});
    let (_, ops_east) = kernel
        .post(
            "/v0/executions",
            &labelled("a", json!({"team": "ops east", "tier": "1"})),
        )
        .await;
    let (_, ops) = kernel
        .post("/v0/executions", &labelled("a", json!({"team": "ops"})))
        .await;
    let (_, dev) = kernel
        .post(
            "/v0/executions",
            &labelled("b", json!({"team": "dev", "tier": "1"})),
        )
        .await;
    let cancelled = ops["id"].as_str().unwrap();
    let (status, _) = kernel
        .post_raw(&format!("/v0/executions/{cancelled}/cancel"), "")
        .await;
    assert_eq!(status, StatusCode::OK);
    let ids = |body: &Value| -> BTreeSet<String> {
        body["executions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let expect = |values: &[&Value]| -> BTreeSet<String> {
        values
            .iter()
            .map(|v| v["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, body) = kernel.get("/v0/executions?agent_id=a").await;
    assert_eq!(ids(&body), expect(&[&ops_east, &ops]));
    let (_, body) = kernel.get("/v0/executions?status=cancelled").await;
    assert_eq!(ids(&body), expect(&[&ops]));
    assert_eq!(body["executions"][0]["status"], "cancelled");
    // A cancelled execution says why, in the list and in GET; the others carry no error.
    assert_eq!(body["executions"][0]["error"], "cancelled by request");
    let (_, one) = kernel
        .get(&format!("/v0/executions/{}", ops["id"].as_str().unwrap()))
        .await;
    assert_eq!(one["error"], "cancelled by request", "{one}");
    let (_, body) = kernel.get("/v0/executions?agent_id=b").await;
    assert!(
        body["executions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.get("error").is_none()),
        "{body}"
    );
    let (_, body) = kernel.get("/v0/executions?label=tier:1").await;
    assert_eq!(ids(&body), expect(&[&ops_east, &dev]));
    // `key=value` filters as rebuno's `key:value` does; the first separator ends the key.
    let (_, body) = kernel.get("/v0/executions?label=tier=1").await;
    assert_eq!(ids(&body), expect(&[&ops_east, &dev]));
    let (_, body) = kernel
        .get("/v0/executions?label=team=ops+east&label=tier%3D1")
        .await;
    assert_eq!(ids(&body), expect(&[&ops_east]));
    // `+` is a space (form decoding), and all labels must match.
    let (_, body) = kernel
        .get("/v0/executions?label=team:ops+east&label=tier%3A1")
        .await;
    assert_eq!(ids(&body), expect(&[&ops_east]));
    let (_, body) = kernel
        .get("/v0/executions?label=team:ops&label=tier:1")
        .await;
    assert_eq!(ids(&body), BTreeSet::new());
    assert_eq!(body["executions"], json!([]));
    let (_, body) = kernel
        .get("/v0/executions?status=pending&agent_id=b&label=team:dev")
        .await;
    assert_eq!(ids(&body), expect(&[&dev]));
    assert_eq!(
        body["executions"][0]["labels"],
        json!({"team": "dev", "tier": "1"})
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn list_rejects_bad_filters_and_cursors() {
    let kernel = TestKernel::start().await;
    let cases = [
        (
            "status=done",
            Some(r#"validation error: invalid status "done""#),
        ),
        (
            "status=Running",
            Some(r#"validation error: invalid status "Running""#),
        ),
        (
            "label=team",
            Some(r#"validation error: invalid label filter "team", expected key=value"#),
        ),
        (
            "label=:ops",
            Some(r#"validation error: invalid label filter ":ops", expected key=value"#),
        ),
        ("cursor=not-a-cursor", None),
        ("cursor=Zm9vYmFy", None),
    ];
    for (query, message) in cases {
        let response = kernel.get(&format!("/v0/executions?{query}")).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            message,
        );
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn cancel_works_once_and_then_conflicts_without_new_events() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap();
    // The body is never decoded, whatever it is.
    let response = kernel
        .client
        .post(kernel.url(&format!("/v0/executions/{id}/cancel")))
        .header("content-type", "application/json")
        .body("{garbage")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "cancelled");
    assert_eq!(body["id"], *id);
    let types = kernel.event_types(id).await;
    assert_eq!(
        types.last().map(String::as_str),
        Some("execution.cancelled")
    );
    let again = kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    let message = format!("execution is in terminal state: execution {id} is already cancelled");
    assert_error(&again, StatusCode::CONFLICT, "CONFLICT", Some(&message));
    assert_eq!(kernel.event_types(id).await, types);
    kernel.shutdown().await;
}

#[tokio::test]
async fn signals_are_recorded_and_validated() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap();
    let path = format!("/v0/executions/{id}/signal");
    let (status, body) = kernel
        .post(&path, &json!({"signal_type": "go", "payload": {"n": 1}}))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let events = kernel.events(id).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "signal.received");
    assert_eq!(
        last["payload"],
        json!({"signal_type": "go", "payload": {"n": 1}})
    );
    let before = events.len();
    for body in [json!({}), json!({"signal_type": ""}), json!({"payload": 1})] {
        let response = kernel.post(&path, &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some("validation error: signal_type is required"),
        );
    }
    assert_error(
        &kernel.post_raw(&path, "").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: invalid JSON: EOF"),
    );
    assert_error(
        &kernel.post_raw(&path, "[").await,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        None,
    );
    assert_eq!(kernel.events(id).await.len(), before);
    // A signal to a finished execution is refused and records nothing.
    kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    let after_cancel = kernel.events(id).await.len();
    let response = kernel.post(&path, &json!({"signal_type": "go"})).await;
    assert_error(&response, StatusCode::CONFLICT, "CONFLICT", None);
    assert!(
        response.1["error"]
            .as_str()
            .unwrap()
            .starts_with("execution is in terminal state")
    );
    assert_eq!(kernel.events(id).await.len(), after_cancel);
    kernel.shutdown().await;
}

#[tokio::test]
async fn events_snapshot_pages_by_sequence_and_limit() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap();
    for index in 0..5 {
        let (status, _) = kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": format!("s{index}")}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let events_path = format!("/v0/executions/{id}/events");
    let (status, all) = kernel.get(&events_path).await;
    assert_eq!(status, StatusCode::OK);
    let events = all["events"].as_array().unwrap();
    assert_eq!(events.len(), 6);
    assert_eq!(all["latest_sequence"], 6);
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["sequence"], index as i64 + 1);
        assert_eq!(event["execution_id"], *id);
        assert_eq!(event["schema_version"], 1);
        assert!(event.get("step_id").is_none(), "not step-scoped: {event}");
        assert_timestamp(&event["timestamp"]);
        for field in ["id", "type", "causation_id", "correlation_id"] {
            assert!(event[field].is_string(), "{field} in {event}");
        }
    }
    let (_, page) = kernel
        .get(&format!("{events_path}?after_sequence=2&limit=2"))
        .await;
    let sequences: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(sequences, vec![3, 4]);
    assert_eq!(
        page["latest_sequence"], 4,
        "last event of the page, not of the execution"
    );
    let (_, page) = kernel.get(&format!("{events_path}?after_sequence=6")).await;
    assert_eq!(page, json!({"events": [], "latest_sequence": 0}));
    for query in [
        "after_sequence=-4&limit=0",
        "after_sequence=abc&limit=-1",
        "limit=5000",
        "limit=x",
    ] {
        let (status, page) = kernel.get(&format!("{events_path}?{query}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(page["events"].as_array().unwrap().len(), 6, "{query}");
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn create_with_a_connected_agent_answers_running() {
    let kernel = TestKernel::start().await;
    let mut agent = TestAgent::connect(&kernel, "helper").await;
    let created = kernel.create("helper", json!({"prompt": "hi"})).await;
    assert_eq!(
        created["status"], "running",
        "assigned before the answer: {created}"
    );
    let assignment = agent.assignment().await;
    assert_eq!(assignment.execution_id, created["id"]);
    assert_eq!(assignment.data["input"], json!({"prompt": "hi"}));
    assert_eq!(assignment.data["agent_id"], "helper");
    assert!(
        assignment.data.get("labels").is_none(),
        "no labels → absent: {}",
        assignment.data
    );
    let types = kernel.event_types(&assignment.execution_id).await;
    assert_eq!(types, vec!["execution.created", "execution.started"]);
    kernel.shutdown().await;
}
