//! Guardrails of issue 10 over HTTP (docs/guardrails.md): idempotent creation, priority and
//! the backlog bounds of creation.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Options, TestAgent, TestKernel, assert_error};

async fn create_keyed(kernel: &TestKernel, key: &str, body: &Value) -> (StatusCode, Value) {
    kernel
        .send(
            kernel
                .client
                .post(kernel.url("/v0/executions"))
                .header("Idempotency-Key", key)
                .json(body),
        )
        .await
}

async fn all_executions(kernel: &TestKernel) -> Vec<Value> {
    let (status, body) = kernel.get("/v0/executions?limit=200").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["executions"].as_array().expect("array").clone()
}

#[tokio::test]
async fn ten_parallel_repeats_of_a_keyed_create_yield_one_execution() {
    let kernel = TestKernel::start().await;
    let body =
        json!({"agent_id": "nobody", "input": {"n": 1}, "labels": {"tenant": "t1"}, "priority": 3});
    let requests = (0..10).map(|_| create_keyed(&kernel, "order-42", &body));
    let answers = futures::future::join_all(requests).await;
    let created = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::CREATED)
        .count();
    let repeated = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::OK)
        .count();
    assert_eq!((created, repeated), (1, 9), "{answers:?}");
    let id = answers[0].1["id"].as_str().expect("id").to_owned();
    for (_, answer) in &answers {
        assert_eq!(answer["id"], id.as_str(), "{answer}");
        assert_eq!(answer["status"], "pending", "{answer}");
        assert_eq!(answer["input"], json!({"n": 1}), "{answer}");
    }
    let executions = all_executions(&kernel).await;
    assert_eq!(executions.len(), 1, "{executions:?}");
    let events = kernel.events(&id).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "execution.created");
    assert_eq!(events[0]["payload"]["priority"], 3);

    // A later repeat (sequential this time) still finds it.
    let (status, again) = create_keyed(&kernel, "order-42", &body).await;
    assert_eq!(
        (status, again["id"].as_str()),
        (StatusCode::OK, Some(id.as_str()))
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn the_same_key_with_a_different_body_is_409_and_changes_nothing() {
    let kernel = TestKernel::start().await;
    let body = json!({"agent_id": "nobody", "input": {"n": 1}});
    let (status, first) = create_keyed(&kernel, "k-1", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let different = [
        json!({"agent_id": "nobody", "input": {"n": 2}}),
        json!({"agent_id": "other", "input": {"n": 1}}),
        json!({"agent_id": "nobody", "input": {"n": 1}, "labels": {"a": "b"}}),
        json!({"agent_id": "nobody", "input": {"n": 1}, "priority": 1}),
    ];
    for body in &different {
        let answer = create_keyed(&kernel, "k-1", body).await;
        assert_error(&answer, StatusCode::CONFLICT, "CONFLICT", None);
        let message = answer.1["error"].as_str().unwrap_or_default();
        assert!(message.contains("Idempotency-Key"), "{message}");
    }
    // `priority: 0` and `labels: null` are what an absent field records: the same request.
    let same = json!({"agent_id": "nobody", "input": {"n": 1}, "priority": 0, "labels": null});
    let (status, again) = create_keyed(&kernel, "k-1", &same).await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &first["id"]));
    assert_eq!(all_executions(&kernel).await.len(), 1);
    // Another key is another execution; no key is always a new one.
    let (status, _) = create_keyed(&kernel, "k-2", &body).await;
    assert_eq!(status, StatusCode::CREATED);
    kernel.create("nobody", json!({"n": 1})).await;
    assert_eq!(all_executions(&kernel).await.len(), 3);
    kernel.shutdown().await;
}

#[tokio::test]
async fn bad_keys_and_priorities_are_400_and_create_nothing() {
    let kernel = TestKernel::start().await;
    let body = json!({"agent_id": "nobody"});
    let long = "k".repeat(256);
    for key in ["", "has space", long.as_str()] {
        let answer = create_keyed(&kernel, key, &body).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    }
    let twice = kernel
        .send(
            kernel
                .client
                .post(kernel.url("/v0/executions"))
                .header("Idempotency-Key", "a")
                .header("Idempotency-Key", "b")
                .json(&body),
        )
        .await;
    assert_error(
        &twice,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some("validation error: Idempotency-Key must be given at most once"),
    );
    for priority in [
        json!(1.5),
        json!("1"),
        json!(1_000_001),
        json!(-1_000_001),
        json!(true),
    ] {
        let answer = kernel
            .post(
                "/v0/executions",
                &json!({"agent_id": "nobody", "priority": priority}),
            )
            .await;
        assert_error(
            &answer,
            StatusCode::BAD_REQUEST,
            "VALIDATION_ERROR",
            Some("validation error: priority must be an integer from -1000000 to 1000000"),
        );
    }
    // A key refused with a bad body is not taken.
    let answer = create_keyed(&kernel, "k", &json!({"agent_id": ""})).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "VALIDATION_ERROR", None);
    assert!(all_executions(&kernel).await.is_empty());
    let (status, _) = create_keyed(&kernel, "k", &body).await;
    assert_eq!(status, StatusCode::CREATED);
    kernel.shutdown().await;
}

#[tokio::test]
async fn priority_is_recorded_only_when_given_and_survives_a_restart() {
    let kernel = TestKernel::start().await;
    let plain = kernel.create("queue", json!(null)).await;
    let (status, urgent) = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": "queue", "priority": 7}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{urgent}");
    let plain_id = plain["id"].as_str().expect("id");
    let urgent_id = urgent["id"].as_str().expect("id");
    let created = &kernel.events(plain_id).await[0];
    assert!(created["payload"].get("priority").is_none(), "{created}");
    assert!(created.get("idempotency_key").is_none(), "{created}");
    assert_eq!(kernel.events(urgent_id).await[0]["payload"]["priority"], 7);
    assert!(plain.get("priority").is_none(), "{plain}");

    // Across a restart the group rebuilds its queue from the store and assigns both.
    let kernel = kernel.restart(Default::default()).await;
    let mut agent = TestAgent::connect(&kernel, "queue").await;
    let mut assigned = vec![
        agent.assignment().await.execution_id,
        agent.assignment().await.execution_id,
    ];
    assigned.sort();
    let mut expected = vec![plain_id.to_owned(), urgent_id.to_owned()];
    expected.sort();
    assert_eq!(assigned, expected);
    kernel.shutdown().await;
}

fn backlog_options(per_agent: Option<u64>, total: Option<u64>) -> Options {
    let mut options = Options::default();
    options.settings.backlog = keel::http::creation::Backlog {
        per_agent,
        total,
        retry_after_secs: 3,
        ..keel::http::creation::Backlog::default()
    };
    options
}

async fn assert_backlog_full(kernel: &TestKernel, body: &Value, message: &str) {
    let response = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .json(body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "3");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body, json!({"code": "RATE_LIMITED", "error": message}));
}

#[tokio::test]
async fn a_full_agent_backlog_answers_429_with_retry_after_and_creates_nothing() {
    let kernel = TestKernel::start_with(backlog_options(Some(2), None)).await;
    kernel.create("busy", json!(1)).await;
    kernel.create("busy", json!(2)).await;
    let before = all_executions(&kernel).await.len();
    assert_backlog_full(
        &kernel,
        &json!({"agent_id": "busy"}),
        "backlog full: agent busy has 2 pending executions (limit 2)",
    )
    .await;
    // A keyed creation is refused the same way and does not take its key.
    let refused = create_keyed(&kernel, "later", &json!({"agent_id": "busy"})).await;
    assert_eq!(refused.0, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert_eq!(all_executions(&kernel).await.len(), before);
    // Other agents are not affected.
    kernel.create("idle", json!(1)).await;

    // Once one is assigned (no longer pending) there is room again.
    let mut agent = TestAgent::connect(&kernel, "busy").await;
    agent.assignment().await;
    agent.assignment().await;
    let (status, _) = create_keyed(&kernel, "later", &json!({"agent_id": "busy"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let metrics = kernel
        .client
        .get(kernel.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    let text = metrics.text().await.expect("text");
    assert!(
        text.contains("keel_backlog_refused_total{kind=\"agent\"} 2"),
        "{text}"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_full_kernel_backlog_answers_429_but_a_keyed_repeat_still_finds_its_execution() {
    let kernel = TestKernel::start_with(backlog_options(None, Some(2))).await;
    let body = json!({"agent_id": "a"});
    let (status, first) = create_keyed(&kernel, "k", &body).await;
    assert_eq!(status, StatusCode::CREATED);
    kernel.create("b", json!(null)).await;
    assert_backlog_full(
        &kernel,
        &json!({"agent_id": "c"}),
        "backlog full: 2 pending executions (limit 2)",
    )
    .await;
    let (status, again) = create_keyed(&kernel, "k", &body).await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &first["id"]));
    assert_eq!(all_executions(&kernel).await.len(), 2);
    // Cancelling one makes room.
    let id = first["id"].as_str().expect("id");
    let (status, _) = kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    assert_eq!(status, StatusCode::OK);
    kernel.create("c", json!(null)).await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn strict_agents_refuses_an_agent_id_nothing_knows_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("billing.yaml"),
        "rules:\n  - id: all\n    priority: 1\n    when: {}\n    then:\n      decision: allow\n",
    )
    .expect("policy written");
    let engine = keel::policy::load_path(dir.path())
        .expect("policy loads")
        .engine;
    let mut options = Options {
        configure: Some(std::sync::Arc::new(move |config| {
            config.policy = engine.clone();
        })),
        ..Options::default()
    };
    options.settings.backlog.strict_agents = true;
    let kernel = TestKernel::start_with(options).await;

    let (status, body) = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": "billnig", "input": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"].as_str().unwrap_or_default().to_owned()
        + body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("unknown agent_id billnig"), "{body}");
    assert!(
        message.contains("has connected and no execution has it"),
        "one readable sentence: {body}"
    );
    let (_, listed) = kernel.get("/v0/executions").await;
    assert_eq!(
        listed["executions"],
        json!([]),
        "the refusal created nothing"
    );

    // Named by a policy file of its own: accepted.
    let (status, body) = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": "billing", "input": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A consumer connected as it: accepted.
    let _agent = crate::harness::TestAgent::connect(&kernel, "support").await;
    let (status, body) = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": "support", "input": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
