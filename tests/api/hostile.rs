//! Hostile input (issue 9, part 2): every probe gets its documented refusal and changes
//! nothing — no execution, no event, no tool directory entry, no open stream. Ambiguous
//! credentials, duplicate JSON keys, undecodable or repeated query keys, oversized or empty
//! runner ids, tool schemas the SDK cannot use, and reports on a job another runner holds.
//! Slow clients are in `slow_clients.rs`.

use std::time::Duration;

use keel::http::HttpSettings;
use reqwest::StatusCode;
use reqwest::header::AUTHORIZATION;
use serde_json::{Value, json};

use crate::errors::protected_routes;
use crate::harness::{
    Assignment, Options, TestKernel, TestRunner, assert_error, eventually, running_execution,
};

const TOKEN: &str = "s3cret-token";

/// Sends a request as built (no token added) and returns status and JSON body.
async fn send_raw(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let bytes = response.bytes().await.expect("body read");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body)
}

/// Asserts the kernel holds no execution and no published tool.
async fn assert_untouched(kernel: &TestKernel) {
    let (status, list) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["executions"], json!([]), "no execution");
    let (status, tools) = kernel.get("/v0/tools").await;
    assert_eq!((status, tools), (StatusCode::OK, json!([])), "no tool");
}

/// Returns the number of open SSE connections of `kind` (`agent`, `runner`), from /metrics.
async fn open_streams(kernel: &TestKernel, kind: &str) -> u64 {
    let mut request = kernel.client.get(kernel.url("/metrics"));
    if let Some(token) = &kernel.token {
        request = request.bearer_auth(token);
    }
    let text = request
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let prefix = format!("keel_sse_connections{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.trim().parse().unwrap_or(0))
}

#[tokio::test]
async fn two_authorization_headers_are_refused_on_every_route_with_no_side_effect() {
    let kernel = TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            ..Options::default().settings
        },
        ..Options::default()
    })
    .await;
    let valid = format!("Bearer {TOKEN}");
    let bodies = |path: &str| match path {
        "/v0/executions" => json!({"agent_id": "intruder"}),
        "/v0/runners/r/tools" => json!({"tools": [{"id": "stolen"}]}),
        _ => json!({}),
    };
    for second in [valid.as_str(), "Bearer wrong", "Basic x"] {
        for (method, path) in protected_routes() {
            let request = kernel
                .client
                .request(method.clone(), kernel.url(&path))
                .header(AUTHORIZATION, valid.as_str())
                .header(AUTHORIZATION, second)
                .json(&bodies(&path));
            let response = send_raw(request).await;
            assert_error(
                &response,
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                Some("unauthorized"),
            );
        }
    }
    assert_untouched(&kernel).await;
    assert_eq!(open_streams(&kernel, "agent").await, 0);
    assert_eq!(open_streams(&kernel, "runner").await, 0);
    kernel.shutdown().await;
}

/// Asserts `body` posted raw to `path` is refused as a duplicate key.
async fn assert_duplicate_refused(kernel: &TestKernel, path: &str, body: String, key: &str) {
    let response = kernel.post_raw(path, body.clone()).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    let message = response.1["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with(&format!(
            "validation error: invalid JSON: duplicate key {key:?}"
        )),
        "{path} {body}: {message}"
    );
}

#[tokio::test]
async fn json_bodies_with_a_duplicate_key_are_refused_and_record_nothing() {
    let kernel = TestKernel::start().await;
    // Before any execution exists: create and publish.
    assert_duplicate_refused(
        &kernel,
        "/v0/executions",
        r#"{"agent_id":"a","agent_id":"b"}"#.to_owned(),
        "agent_id",
    )
    .await;
    assert_duplicate_refused(
        &kernel,
        "/v0/executions",
        r#"{"agent_id":"a","input":{"x":1,"x":2}}"#.to_owned(),
        "x",
    )
    .await;
    assert_duplicate_refused(
        &kernel,
        "/v0/runners/r/tools",
        r#"{"tools":[{"id":"a","id":"b"}]}"#.to_owned(),
        "id",
    )
    .await;
    assert_duplicate_refused(
        &kernel,
        "/v0/runners/r/capabilities",
        r#"{"tools":["a"],"tools":["b"]}"#.to_owned(),
        "tools",
    )
    .await;
    assert_untouched(&kernel).await;

    // With a running execution: intents, step results, signals, runner reports.
    let (_agent, assignment) = running_execution(&kernel, "dup").await;
    let (eid, sid) = (
        assignment.execution_id.as_str(),
        assignment.session_id.as_str(),
    );
    let step_id = assignment.invoke(&kernel, "local_tool").await;
    let before = kernel.events(eid).await;
    let probes = [
        (
            "/v0/agents/intent",
            format!(
                r#"{{"execution_id":"{eid}","session_id":"{sid}","intent":{{"type":"complete","type":"fail"}}}}"#
            ),
            "type",
        ),
        (
            "/v0/agents/intent",
            format!(
                r#"{{"execution_id":"{eid}","session_id":"{sid}","intent":{{"type":"invoke_tool","tool_id":"a","tool_id":"shell_x"}}}}"#
            ),
            "tool_id",
        ),
        (
            "/v0/agents/intent",
            format!(
                r#"{{"execution_id":"{eid}","execution_id":"{eid}","session_id":"{sid}","intent":{{"type":"complete"}}}}"#
            ),
            "execution_id",
        ),
        (
            "/v0/agents/intent",
            format!(
                r#"{{"execution_id":"{eid}","session_id":"{sid}","intent":{{"type":"wait","signal_type":"a","signal_type":"b"}}}}"#
            ),
            "signal_type",
        ),
        (
            "/v0/agents/step-result",
            format!(
                r#"{{"execution_id":"{eid}","session_id":"{sid}","step_id":"{step_id}","success":true,"success":false}}"#
            ),
            "success",
        ),
        (
            "/v0/agents/step-result",
            format!(
                r#"{{"execution_id":"{eid}","session_id":"{sid}","step_id":"x","step_id":"{step_id}","success":true}}"#
            ),
            "step_id",
        ),
        (
            "/v0/runners/r/results",
            format!(
                r#"{{"job_id":"j","execution_id":"{eid}","step_id":"{step_id}","success":true,"success":false,"consumer_id":"c"}}"#
            ),
            "success",
        ),
        (
            "/v0/runners/steps/s/started",
            format!(r#"{{"execution_id":"{eid}","runner_id":"r","runner_id":"q"}}"#),
            "runner_id",
        ),
    ];
    for (path, body, key) in probes {
        assert_duplicate_refused(&kernel, path, body, key).await;
    }
    let signal = format!("/v0/executions/{eid}/signal");
    assert_duplicate_refused(
        &kernel,
        &signal,
        r#"{"signal_type":"go","signal_type":"stop"}"#.to_owned(),
        "signal_type",
    )
    .await;
    assert_duplicate_refused(
        &kernel,
        &signal,
        r#"{"signal_type":"go","payload":{"a":[{"k":1,"k":2}]}}"#.to_owned(),
        "k",
    )
    .await;
    assert_eq!(kernel.events(eid).await, before, "nothing recorded");
    assert_eq!(kernel.status(eid).await, "blocked");
    kernel.shutdown().await;
}

#[tokio::test]
async fn undecodable_or_repeated_query_keys_are_refused_and_open_no_stream() {
    let kernel = TestKernel::start().await;
    let probes = [
        (
            "/v0/agents/stream?agent_id=%FF&consumer_id=c",
            "validation error: query parameter agent_id must be UTF-8",
        ),
        (
            "/v0/agents/stream?agent_id=a&consumer_id=c%FE",
            "validation error: query parameter consumer_id must be UTF-8",
        ),
        (
            "/v0/agents/stream?agent_id=a&agent_id=b&consumer_id=c",
            "validation error: query parameter agent_id is given more than once",
        ),
        (
            "/v0/agents/stream?agent_id=a&consumer_id=c&consumer_id=c",
            "validation error: query parameter consumer_id is given more than once",
        ),
        (
            "/v0/runners/stream?runner_id=%FF&consumer_id=c",
            "validation error: query parameter runner_id must be UTF-8",
        ),
        (
            "/v0/runners/stream?runner_id=r&runner_id=s&consumer_id=c",
            "validation error: query parameter runner_id is given more than once",
        ),
        (
            "/v0/runners/stream?runner_id=r&consumer_id=c&capabilities=a&capabilities=b",
            "validation error: query parameter capabilities is given more than once",
        ),
        (
            "/v0/executions?agent_id=a&agent_id=b",
            "validation error: query parameter agent_id is given more than once",
        ),
        (
            "/v0/tools?prefix=a&prefix=b",
            "validation error: query parameter prefix is given more than once",
        ),
    ];
    for (path, message) in probes {
        // A stream that wrongly opened would never end: bound the wait.
        let request = kernel
            .client
            .get(kernel.url(path))
            .timeout(Duration::from_secs(3));
        let response = kernel.send(request).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(message),
        );
    }
    assert_eq!(open_streams(&kernel, "agent").await, 0);
    assert_eq!(open_streams(&kernel, "runner").await, 0);
    // An execution for the U+FFFD agent id stays pending: no consumer was registered.
    let created = kernel.create("\u{FFFD}", json!(null)).await;
    let id = created["id"].as_str().expect("id");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(kernel.status(id).await, "pending");
    // Repeated labels stay allowed on the list.
    let (status, _) = kernel.get("/v0/executions?label=a:b&label=c:d").await;
    assert_eq!(status, StatusCode::OK);
    kernel.shutdown().await;
}

#[tokio::test]
async fn runner_ids_must_be_non_empty_and_at_most_256_bytes_everywhere() {
    let kernel = TestKernel::start().await;
    let long = "r".repeat(10 * 1024);
    let too_long = "validation error: runner_id exceeds maximum length of 256 characters";
    let publish = json!({"tools": [{"id": "t", "input_schema": {"type": "object"}}]});
    for response in [
        kernel
            .post(&format!("/v0/runners/{long}/tools"), &publish)
            .await,
        kernel
            .post(
                &format!("/v0/runners/{long}/capabilities"),
                &json!({"tools": ["t"]}),
            )
            .await,
        kernel
            .send(
                kernel
                    .client
                    .delete(kernel.url(&format!("/v0/runners/{long}"))),
            )
            .await,
        kernel
            .get(&format!(
                "/v0/runners/stream?runner_id={long}&consumer_id=c"
            ))
            .await,
        kernel
            .post(
                &format!("/v0/runners/{long}/results"),
                &json!({"job_id": "j", "execution_id": "e", "step_id": "s", "consumer_id": "c"}),
            )
            .await,
        kernel
            .post(
                "/v0/runners/steps/s/started",
                &json!({"execution_id": "e", "runner_id": long}),
            )
            .await,
    ] {
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(too_long),
        );
    }
    // An empty runner id (an empty path segment) never reaches the directory.
    let (status, _) = kernel.post("/v0/runners//tools", &publish).await;
    assert!(status.is_client_error(), "{status}");
    let tool_id_too_long = json!({"tools": [{"id": "t".repeat(257)}]});
    let response = kernel.post("/v0/runners/r/tools", &tool_id_too_long).await;
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: tools[0].id exceeds maximum length of 256 characters"),
    );
    assert_untouched(&kernel).await;
    assert_eq!(open_streams(&kernel, "runner").await, 0);
    kernel.shutdown().await;
}

#[tokio::test]
async fn tool_schemas_the_sdk_cannot_use_are_refused_on_publish() {
    let kernel = TestKernel::start().await;
    for (schema, message) in [
        (
            json!({"type": "object", "properties": []}),
            "validation error: tools[1].input_schema.properties must be an object",
        ),
        (
            json!({"type": "object", "properties": null}),
            "validation error: tools[1].input_schema.properties must be an object",
        ),
        (
            json!({"type": "object", "properties": {"a": {}}, "required": "a"}),
            "validation error: tools[1].input_schema.required must be an array of strings",
        ),
        (
            json!({"type": "object", "required": [1]}),
            "validation error: tools[1].input_schema.required must be an array of strings",
        ),
    ] {
        let body = json!({"tools": [
            {"id": "fine", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
            {"id": "broken", "input_schema": schema},
        ]});
        let response = kernel.post("/v0/runners/r/tools", &body).await;
        assert_error(
            &response,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some(message),
        );
    }
    assert_untouched(&kernel).await;
    // The SDK's own shapes still publish (and a non-object schema stays free-form).
    let body = json!({"tools": [
        {"id": "fine", "description": "d", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
        {"id": "mcp", "input_schema": {}},
        {"id": "bare"},
    ]});
    let (status, _) = kernel.post("/v0/runners/r/tools", &body).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, tools) = kernel.get("/v0/tools").await;
    assert_eq!(tools.as_array().map(Vec::len), Some(3), "{tools}");
    kernel.shutdown().await;
}

/// Returns the step id of a remote `invoke_tool` of `tool`.
async fn invoke_remote(kernel: &TestKernel, assignment: &Assignment, tool: &str) -> String {
    let (status, body) = assignment
        .intent(
            kernel,
            json!({"type": "invoke_tool", "tool_id": tool, "remote": true}),
        )
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    body["step_id"].as_str().expect("step_id").to_owned()
}

#[tokio::test]
async fn only_the_connection_holding_a_job_may_report_on_it() {
    let kernel = TestKernel::start().await;
    let mut holder = TestRunner::connect(&kernel, "holder", &["work"]).await;
    let (mut agent, assignment) = running_execution(&kernel, "owned").await;
    let eid = assignment.execution_id.clone();
    let step = invoke_remote(&kernel, &assignment, "work").await;
    let job = holder.job().await;
    assert_eq!(job["step_id"], *step);
    // Another runner id, and another connection (consumer) of the holder's runner id, each
    // holding a job of their own.
    let mut other = TestRunner::connect(&kernel, "other", &["other_work"]).await;
    let sibling = TestRunner::connect(&kernel, "holder", &["nothing"]).await;
    let other_step = invoke_remote(&kernel, &assignment, "other_work").await;
    let other_job = other.job().await;
    assert_eq!(other_job["step_id"], *other_step);

    let before = kernel.events(&eid).await;
    let result = |runner: &str, consumer: &str, job_id: &Value, step_id: &str| {
        (
            format!("/v0/runners/{runner}/results"),
            json!({"job_id": job_id, "execution_id": eid, "step_id": step_id, "success": true,
                "data": "forged", "consumer_id": consumer}),
        )
    };
    let forged = [
        // Another runner id with its own consumer id.
        result("other", &other.consumer_id, &job["id"], &step),
        // The holder's runner id from another connection.
        result("holder", &sibling.consumer_id, &job["id"], &step),
        // The holder's runner id with a made-up consumer id.
        result("holder", "holder-intruder", &job["id"], &step),
        // The holder's own connection, naming another step's job.
        result("holder", &holder.consumer_id, &other_job["id"], &step),
        result("holder", &holder.consumer_id, &job["id"], &other_step),
        // A job id that is not the step's current job.
        result(
            "holder",
            &holder.consumer_id,
            &json!("0196f1c2-0000-7000-8000-00000000dead"),
            &step,
        ),
    ];
    for (path, body) in forged {
        let response = kernel.post(&path, &body).await;
        assert_error(&response, StatusCode::CONFLICT, "CONFLICT", None);
        let message = response.1["error"].as_str().unwrap_or_default();
        assert!(message.starts_with("conflict: "), "{message}");
    }
    for runner_id in ["other", "intruder"] {
        let response = kernel
            .post(
                &format!("/v0/runners/steps/{step}/started"),
                &json!({"execution_id": eid, "runner_id": runner_id}),
            )
            .await;
        assert_error(&response, StatusCode::CONFLICT, "CONFLICT", None);
    }
    assert_eq!(kernel.events(&eid).await, before, "nothing recorded");

    // The holders report on their own jobs.
    let started = kernel
        .post(
            &format!("/v0/runners/steps/{step}/started"),
            &json!({"execution_id": eid, "runner_id": "holder"}),
        )
        .await;
    assert_eq!(started.0, StatusCode::OK, "{}", started.1);
    let (status, body) = holder.result(&kernel, &job, true, json!("real")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(
        (&pushed["step_id"], &pushed["result"]),
        (&json!(step), &json!("real"))
    );
    let (status, body) = other.result(&kernel, &other_job, true, json!(2)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the execution to run again", || async {
        (kernel.status(&eid).await == "running").then_some(())
    })
    .await;
    drop(sibling);
    kernel.shutdown().await;
}
