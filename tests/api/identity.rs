//! Identity (docs/security.md): API keys with roles and scopes over every route, 401 and 403
//! apart, revocation and expiry on the next request and on open streams, keys across a restart,
//! and no secret in any response but the one that issues it.

use std::time::Duration;

use keel::http::HttpSettings;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Options, SseClient, TestKernel, assert_error};

mod routes;

pub(super) const TOKEN: &str = "identity-admin-token";

pub(super) fn with_token() -> Options {
    Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            heartbeat: Duration::from_millis(300),
            ..HttpSettings::default()
        },
        ..Options::default()
    }
}

/// Creates a key with the admin token; returns its secret.
pub(super) async fn create_key(kernel: &TestKernel, body: Value) -> String {
    let (status, created) = kernel.post("/v0/keys", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert!(created["key"].get("secret_hash").is_none(), "{created}");
    created["secret"].as_str().expect("secret").to_owned()
}

/// Sends `method path` with `body` and the key `key` (no header for `None`).
pub(super) async fn call(
    kernel: &TestKernel,
    key: Option<&str>,
    method: &Method,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let mut request = kernel.client.request(method.clone(), kernel.url(path));
    if *method != Method::GET && *method != Method::DELETE {
        request = request.json(body);
    }
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let streaming = response
        .headers()
        .get("content-type")
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if streaming {
        return (status, Value::Null);
    }
    let bytes = response.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn revoked_and_rotated_keys_fail_on_the_next_request_and_end_their_streams() {
    let kernel = TestKernel::start_with(with_token()).await;
    let agent = create_key(
        &kernel,
        json!({"name": "a1", "role": "agent", "scopes": {"agents": ["billing"]}}),
    )
    .await;
    let reader = create_key(&kernel, json!({"name": "watcher", "role": "reader"})).await;
    let open = |key: String, path: &'static str| {
        let kernel = &kernel;
        async move {
            let response = kernel
                .client
                .get(kernel.url(path))
                .bearer_auth(key)
                .send()
                .await
                .expect("stream opens");
            assert_eq!(response.status(), StatusCode::OK);
            SseClient::new(response)
        }
    };
    let mut agent_stream = open(
        agent.clone(),
        "/v0/agents/stream?agent_id=billing&consumer_id=c",
    )
    .await;
    let mut feed = open(reader.clone(), "/v0/events/stream").await;
    let mut admin_feed = kernel.sse("/v0/events/stream").await;
    agent_stream.wait_raw(":").await;
    // Revocation: the next request is 401, the open stream ends at once.
    let (status, revoked) = kernel
        .send(kernel.client.delete(kernel.url("/v0/keys/a1")))
        .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert_eq!(revoked["key"]["state"], "revoked");
    assert!(agent_stream.ends().await, "the revoked key's stream ends");
    let answer = call(
        &kernel,
        Some(&agent),
        &Method::GET,
        "/v0/tools",
        &Value::Null,
    )
    .await;
    assert_error(
        &answer,
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        Some("unauthorized: revoked key"),
    );
    // Rotation: the old secret is refused, the new one works, the old one's stream ends.
    let (status, rotated) = kernel
        .send(kernel.client.post(kernel.url("/v0/keys/watcher/rotate")))
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let fresh = rotated["secret"].as_str().expect("secret").to_owned();
    assert_ne!(fresh, reader);
    assert!(feed.ends().await, "the rotated key's stream ends");
    let old = call(
        &kernel,
        Some(&reader),
        &Method::GET,
        "/v0/executions",
        &Value::Null,
    )
    .await;
    assert_eq!(old.0, StatusCode::UNAUTHORIZED);
    let new = call(
        &kernel,
        Some(&fresh),
        &Method::GET,
        "/v0/executions",
        &Value::Null,
    )
    .await;
    assert_eq!(new.0, StatusCode::OK);
    // The admin token's stream is untouched.
    kernel.create("billing", json!({})).await;
    admin_feed.next_of("execution.created").await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_expiring_key_ends_its_stream_at_expiry() {
    let kernel = TestKernel::start_with(with_token()).await;
    let expires = keel_actors::time::now() + chrono::Duration::milliseconds(800);
    let key = create_key(
        &kernel,
        json!({"name": "short", "role": "reader", "expires_at": keel_actors::time::format(&expires)}),
    )
    .await;
    let response = kernel
        .client
        .get(kernel.url("/v0/events/stream"))
        .bearer_auth(&key)
        .send()
        .await
        .expect("stream opens");
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = SseClient::new(response);
    assert!(stream.ends().await, "the stream ends at expiry");
    assert!(keel_actors::time::now() >= expires);
    let answer = call(
        &kernel,
        Some(&key),
        &Method::GET,
        "/v0/executions",
        &Value::Null,
    )
    .await;
    assert_error(
        &answer,
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        Some("unauthorized: expired key"),
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn keys_survive_a_restart_with_their_last_use_and_no_secret_is_stored_or_listed() {
    let kernel = TestKernel::start_with(with_token()).await;
    let key = create_key(&kernel, json!({"name": "svc", "role": "operator"})).await;
    let revoked = create_key(&kernel, json!({"name": "gone", "role": "operator"})).await;
    kernel
        .send(kernel.client.delete(kernel.url("/v0/keys/gone")))
        .await;
    let created = call(
        &kernel,
        Some(&key),
        &Method::POST,
        "/v0/executions",
        &json!({"agent_id": "a"}),
    )
    .await;
    assert_eq!(created.0, StatusCode::CREATED, "{created:?}");
    // Bad input is a 400 or 409 and creates nothing.
    for (body, status) in [
        (
            json!({"name": "svc", "role": "reader"}),
            StatusCode::CONFLICT,
        ),
        (
            json!({"name": "x", "role": "wizard"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "bad name", "role": "reader"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "admin", "role": "reader"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "ag", "role": "agent"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "gl", "role": "runner", "scopes": {"runners": ["["]}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "past", "role": "reader", "expires_at": "2001-01-01T00:00:00Z"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "odd", "role": "reader", "colour": "red"}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (got, answer) = kernel.post("/v0/keys", &body).await;
        assert_eq!(got, status, "{body}: {answer}");
    }
    let (_, listed) = kernel.get("/v0/keys").await;
    assert_eq!(listed["keys"].as_array().map(Vec::len), Some(2), "{listed}");
    let kernel = kernel.restart(with_token()).await;
    let answer = call(
        &kernel,
        Some(&key),
        &Method::GET,
        "/v0/executions",
        &Value::Null,
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK, "the key works after a restart");
    let answer = call(
        &kernel,
        Some(&revoked),
        &Method::GET,
        "/v0/executions",
        &Value::Null,
    )
    .await;
    assert_eq!(
        answer.0,
        StatusCode::UNAUTHORIZED,
        "a revoked key stays revoked"
    );
    let (_, listed) = kernel.get("/v0/keys").await;
    let text = listed.to_string();
    assert!(
        !text.contains(&key[18..]) && !text.contains(&revoked[18..]),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
    let svc = listed["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|key| key["name"] == "svc"))
        .expect("svc listed");
    assert_eq!(svc["role"], "operator");
    assert_eq!(svc["state"], "active");
    assert_eq!(svc["created_by"], "admin");
    assert!(
        svc["last_used_at"].is_string(),
        "last use kept across the restart: {svc}"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_kernel_without_a_token_is_open_until_its_first_key() {
    let kernel = TestKernel::start().await;
    let (status, _) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::OK);
    let key = create_key(&kernel, json!({"name": "first", "role": "admin"})).await;
    let (status, _) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "closed once a key exists");
    let answer = call(
        &kernel,
        Some(&key),
        &Method::GET,
        "/v0/executions",
        &Value::Null,
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK);
    let (status, _) = kernel.get("/v0/health").await;
    assert_eq!(status, StatusCode::OK);
    kernel.shutdown().await;
}
