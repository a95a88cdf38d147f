//! Identity (docs/security.md): API keys with roles and scopes over every route, 401 and 403
//! apart, revocation and expiry on the next request and on open streams, keys across a restart,
//! and no secret in any response but the one that issues it.

use std::time::Duration;

use keel::http::HttpSettings;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Options, SseClient, TestKernel, assert_error};

const TOKEN: &str = "identity-admin-token";

fn with_token() -> Options {
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
async fn create_key(kernel: &TestKernel, body: Value) -> String {
    let (status, created) = kernel.post("/v0/keys", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert!(created["key"].get("secret_hash").is_none(), "{created}");
    created["secret"].as_str().expect("secret").to_owned()
}

/// Sends `method path` with `body` and the key `key` (no header for `None`).
async fn call(
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

/// What the kernel holds that a refused request must not change: the feed's head, the
/// executions and the keys (last use aside).
async fn snapshot(kernel: &TestKernel) -> Value {
    let (_, executions) = kernel.get("/v0/executions?limit=100").await;
    let (_, feed) = kernel.get("/v0/events?limit=1000").await;
    let (_, mut keys) = kernel.get("/v0/keys").await;
    for key in keys["keys"].as_array_mut().into_iter().flatten() {
        key.as_object_mut().map(|key| key.remove("last_used_at"));
    }
    json!({"executions": executions["executions"], "feed": feed["events"].as_array().map(Vec::len), "keys": keys})
}

/// The principals of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    Admin,
    Operator,
    AgentIn,
    AgentOut,
    RunnerIn,
    RunnerOut,
    Approver,
    Reader,
    Revoked,
    Expired,
    NoKey,
}

use Who::*;

const EVERYONE: [Who; 11] = [
    Admin, Operator, AgentIn, AgentOut, RunnerIn, RunnerOut, Approver, Reader, Revoked, Expired,
    NoKey,
];
const READERS: &[Who] = &[Admin, Operator, Approver, Reader];

#[tokio::test]
async fn every_route_answers_each_role_as_the_table_says_and_refusals_change_nothing() {
    let kernel = TestKernel::start_with(with_token()).await;
    // An execution of agent `billing` (ids in paths point at it).
    let execution = kernel.create("billing", json!({"n": 1})).await;
    let id = execution["id"].as_str().expect("id").to_owned();
    let mut keys = std::collections::HashMap::new();
    keys.insert(Admin, TOKEN.to_owned());
    for (who, body) in [
        (Operator, json!({"name": "ops", "role": "operator"})),
        (
            AgentIn,
            json!({"name": "billing-agent", "role": "agent", "scopes": {"agents": ["billing", "billing-idle"]}}),
        ),
        (
            AgentOut,
            json!({"name": "support-agent", "role": "agent", "scopes": {"agents": ["support-*"]}}),
        ),
        (
            RunnerIn,
            json!({"name": "r1", "role": "runner", "scopes": {"runners": ["r1"], "tools": ["fs.*"]}}),
        ),
        (
            RunnerOut,
            json!({"name": "r9", "role": "runner", "scopes": {"runners": ["r9"]}}),
        ),
        (Approver, json!({"name": "alice", "role": "approver"})),
        (Reader, json!({"name": "dashboards", "role": "reader"})),
        (Revoked, json!({"name": "old", "role": "operator"})),
        (
            Expired,
            json!({"name": "brief", "role": "operator",
            "expires_at": keel_actors::time::format(&(keel_actors::time::now() + chrono::Duration::milliseconds(600)))}),
        ),
    ] {
        keys.insert(who, create_key(&kernel, body).await);
    }
    create_key(&kernel, json!({"name": "victim", "role": "reader"})).await;
    let (status, _) = kernel
        .send(kernel.client.delete(kernel.url("/v0/keys/old")))
        .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let runner_body = json!({"execution_id": id, "runner_id": "r1"});
    // (method, path, body, who gets past authentication and authorization). The agent stream
    // serves an agent without executions, so that no assignment runs behind the table.
    let table: Vec<(Method, String, Value, &[Who])> = vec![
        (Method::GET, "/metrics".into(), Value::Null, READERS),
        (Method::GET, "/v0/openapi.json".into(), Value::Null, READERS),
        (
            Method::POST,
            "/v0/executions".into(),
            json!({"agent_id": "billing"}),
            &[Admin, Operator, AgentIn],
        ),
        (
            Method::POST,
            "/v0/executions".into(),
            json!({"agent_id": "billing", "labels": {"team": "x"}}),
            &[Admin, Operator, AgentIn],
        ),
        (Method::GET, "/v0/executions".into(), Value::Null, READERS),
        (
            Method::GET,
            format!("/v0/executions/{id}"),
            Value::Null,
            READERS,
        ),
        (
            Method::GET,
            format!("/v0/executions/{id}/events"),
            Value::Null,
            READERS,
        ),
        (
            Method::GET,
            format!("/v0/executions/{id}/stream"),
            Value::Null,
            READERS,
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/signal"),
            json!({"signal_type": "nudge"}),
            &[Admin, Operator],
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/signal"),
            json!({"signal_type": "step.approve", "payload": {"step_id": "none"}}),
            &[Admin, Operator, Approver],
        ),
        (Method::GET, "/v0/events".into(), Value::Null, READERS),
        (
            Method::GET,
            "/v0/events/stream".into(),
            Value::Null,
            READERS,
        ),
        (
            Method::GET,
            "/v0/agents/stream?agent_id=billing-idle&consumer_id=c1".into(),
            Value::Null,
            &[Admin, AgentIn],
        ),
        (
            Method::POST,
            "/v0/agents/intent".into(),
            json!({"execution_id": id, "session_id": "s", "intent": {"type": "complete"}}),
            &[Admin, AgentIn],
        ),
        (
            Method::POST,
            "/v0/agents/step-result".into(),
            json!({"execution_id": id, "session_id": "s", "step_id": "x", "success": true}),
            &[Admin, AgentIn],
        ),
        (
            Method::GET,
            "/v0/runners/stream?runner_id=r1&consumer_id=c2&capabilities=fs.read".into(),
            Value::Null,
            &[Admin, RunnerIn],
        ),
        (
            Method::GET,
            "/v0/runners/stream?runner_id=r1&consumer_id=c3&capabilities=shell.exec".into(),
            Value::Null,
            &[Admin],
        ),
        (
            Method::POST,
            "/v0/runners/r1/results".into(),
            json!({}),
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/steps/s1/started".into(),
            runner_body,
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/r1/capabilities".into(),
            json!({"tools": ["fs.read"]}),
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/r1/capabilities".into(),
            json!({"tools": ["shell.exec"]}),
            &[Admin],
        ),
        (
            Method::POST,
            "/v0/runners/r1/tools".into(),
            json!({"tools": []}),
            &[Admin, RunnerIn],
        ),
        (
            Method::DELETE,
            "/v0/runners/r1".into(),
            Value::Null,
            &[Admin, Operator, RunnerIn],
        ),
        (
            Method::GET,
            "/v0/tools".into(),
            Value::Null,
            &[
                Admin, Operator, AgentIn, AgentOut, RunnerIn, RunnerOut, Approver, Reader,
            ],
        ),
        (Method::GET, "/v0/approvals".into(), Value::Null, READERS),
        (
            Method::GET,
            "/v0/executions/counts".into(),
            Value::Null,
            READERS,
        ),
        (Method::GET, "/v0/agents".into(), Value::Null, READERS),
        (Method::GET, "/v0/runners".into(), Value::Null, READERS),
        (Method::GET, "/v0/policy".into(), Value::Null, READERS),
        (Method::GET, "/v0/breakers".into(), Value::Null, READERS),
        (Method::GET, "/v0/keys".into(), Value::Null, &[Admin]),
        (
            Method::POST,
            "/v0/keys/victim/rotate".into(),
            Value::Null,
            &[Admin],
        ),
        (
            Method::POST,
            "/v0/keys".into(),
            json!({"name": "made-in-table", "role": "reader"}),
            &[Admin],
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/steps/none/reconcile"),
            json!({"answer": "fail"}),
            &[Admin, Operator],
        ),
        (
            Method::POST,
            format!("/v0/approvals/{id}.none"),
            json!({"decision": "approve"}),
            &[Admin, Operator, Approver],
        ),
        (
            Method::POST,
            "/v0/approvals".into(),
            json!({"answers": [{"id": format!("{id}.none"), "decision": "deny", "reason": "no"}]}),
            &[Admin, Operator, Approver],
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/cancel"),
            json!({}),
            &[Admin, Operator],
        ),
        (
            Method::DELETE,
            "/v0/keys/victim".into(),
            Value::Null,
            &[Admin],
        ),
    ];
    let mut allowed_calls = 0;
    for (method, path, body, allowed) in &table {
        for who in EVERYONE {
            let key = match who {
                NoKey => None,
                other => Some(keys[&other].as_str()),
            };
            let expected = if allowed.contains(&who) {
                None
            } else if matches!(who, Revoked | Expired | NoKey) {
                Some(StatusCode::UNAUTHORIZED)
            } else {
                Some(StatusCode::FORBIDDEN)
            };
            let before = match expected {
                Some(_) => Some(snapshot(&kernel).await),
                None => None,
            };
            let answer = call(&kernel, key, method, path, body).await;
            match expected {
                None => {
                    allowed_calls += 1;
                    // Past authentication: a handler's own 401 (an unknown session) is not
                    // the middleware's `unauthorized`.
                    let refused_by_auth = answer.0 == StatusCode::FORBIDDEN
                        || (answer.0 == StatusCode::UNAUTHORIZED
                            && answer.1["error"]
                                .as_str()
                                .is_some_and(|error| error.starts_with("unauthorized")));
                    assert!(!refused_by_auth, "{who:?} {method} {path}: {answer:?}");
                }
                Some(StatusCode::UNAUTHORIZED) => {
                    assert_error(&answer, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", None);
                }
                Some(status) => assert_error(&answer, status, "FORBIDDEN", None),
            }
            if let Some(before) = before {
                assert_eq!(
                    snapshot(&kernel).await,
                    before,
                    "{who:?} {method} {path} changed something"
                );
            }
        }
    }
    assert!(allowed_calls > 100, "{allowed_calls}");
    // The allowed calls did their work: the admin's and the in-scope agent's creations exist.
    let (_, listed) = kernel.get("/v0/executions?agent_id=billing").await;
    assert!(
        listed["executions"].as_array().expect("list").len() >= 7,
        "{listed}"
    );
    kernel.shutdown().await;
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
