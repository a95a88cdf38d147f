//! The LLM gateway's OpenAI route against a scripted fake provider on loopback: the body goes
//! upstream unchanged with the provider's key (never the caller's token, never shown back),
//! streams are forwarded chunk by chunk as they arrive, and refusals use OpenAI's error shape.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use futures::StreamExt;
use keel::gateway::{Gateway, GatewayConfig};
use keel::http::HttpSettings;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::harness::{Options, TestKernel, WAIT};

const TOKEN: &str = "kernel-token-42";
const KEY: &str = "sk-provider-key-9f3a";

/// What the fake provider saw and how it answers.
#[derive(Default)]
struct Fake {
    seen: Mutex<Vec<(Option<String>, Bytes)>>,
    /// Released by the test once it has read the stream's first chunk.
    first_chunk_read: Notify,
}

async fn fake_chat(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let streamed = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|value| value["stream"].as_bool())
        .unwrap_or(false);
    let model = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|value| value["model"].as_str().map(str::to_owned));
    fake.seen.lock().expect("lock").push((authorization, body));
    let refusal = |status: u16| {
        let error = json!({"error": {"message": "scripted", "type": "scripted", "code": status}});
        (
            axum::http::StatusCode::from_u16(status).expect("status"),
            [("content-type", "application/json"), ("retry-after", "7")],
            error.to_string(),
        )
            .into_response()
    };
    match model.as_deref() {
        Some("rate-limited") => return refusal(429),
        Some("broken") => return refusal(500),
        _ => {}
    }
    if !streamed {
        return (
            [("content-type", "application/json")],
            json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}})
            .to_string(),
        )
            .into_response();
    }
    let gate = fake.clone();
    let chunks = futures::stream::unfold(0u8, move |index| {
        let gate = gate.clone();
        async move {
            let line = match index {
                0 => "data: {\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\n",
                1 => {
                    // The rest only after the caller has seen the first chunk: a gateway that
                    // buffered the stream would never deliver it.
                    tokio::time::timeout(WAIT, gate.first_chunk_read.notified())
                        .await
                        .ok()?;
                    "data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\n"
                }
                2 => "data: [DONE]\n\n",
                _ => return None,
            };
            Some((Ok::<_, std::io::Error>(Bytes::from(line)), index + 1))
        }
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(chunks),
    )
        .into_response()
}

/// Starts the fake provider; returns its `/v1` base URL.
async fn start_fake(fake: Arc<Fake>) -> String {
    let app = Router::new()
        .route("/v1/chat/completions", post(fake_chat))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{address}/v1")
}

async fn kernel_with_gateway(base_url: Option<&str>) -> TestKernel {
    let gateway = base_url.map(|base_url| {
        let yaml = format!(
            "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    api_key_env: FAKE_KEY\n"
        );
        let config = GatewayConfig::parse(&yaml, Path::new("."), |_| Some(KEY.to_owned()))
            .expect("valid gateway configuration");
        Arc::new(Gateway::new(config).expect("gateway"))
    });
    TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            heartbeat: Duration::from_millis(300),
            gateway,
            ..HttpSettings::default()
        },
        ..Options::default()
    })
    .await
}

fn chat_path(execution_id: &str, provider: &str) -> String {
    format!("/v0/executions/{execution_id}/llm/{provider}/v1/chat/completions")
}

#[tokio::test]
async fn a_chat_completion_goes_upstream_unchanged_with_the_providers_key() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with_gateway(Some(&base_url)).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    // Odd spacing and key order: the provider must receive these exact bytes.
    let body = r#"{"model":"gpt-test",  "messages":[{"role":"user","content":"hi"}],"z_extra":1}"#;
    let response = kernel
        .client
        .post(kernel.url(&chat_path(id, "openai")))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.expect("body");
    assert!(!text.contains(KEY), "the provider key leaked: {text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(answer["choices"][0]["message"]["content"], "hello");
    assert_eq!(answer["usage"]["total_tokens"], 8);
    let seen = fake.seen.lock().expect("lock");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(seen[0].1, Bytes::from(body));
}

#[tokio::test]
async fn a_stream_is_forwarded_chunk_by_chunk_as_it_arrives() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with_gateway(Some(&base_url)).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let response = kernel
        .client
        .post(kernel.url(&chat_path(id, "openai")))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "gpt-test", "stream": true, "messages": []}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().expect("ascii"),
        "text/event-stream"
    );
    let mut stream = response.bytes_stream();
    let mut received = String::new();
    while !received.contains("\"he\"") {
        let chunk = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("first chunk in time (not buffered)")
            .expect("stream open")
            .expect("chunk");
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    fake.first_chunk_read.notify_one();
    while let Some(chunk) = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("rest in time")
    {
        received.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
    }
    assert!(received.contains("\"llo\""), "{received}");
    assert!(received.ends_with("data: [DONE]\n\n"), "{received}");
}

#[tokio::test]
async fn refusals_use_the_openai_error_shape_and_never_reach_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with_gateway(Some(&base_url)).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id").to_owned();
    let body = json!({"model": "gpt-test", "messages": []});

    let response = kernel
        .client
        .post(kernel.url(&chat_path(&id, "openai")))
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "no token");

    let call = |path: String, body: String| {
        let request = kernel
            .client
            .post(kernel.url(&path))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body);
        async move {
            let response = request.send().await.expect("sent");
            let status = response.status();
            let value: Value = response.json().await.expect("JSON error");
            (status, value)
        }
    };
    let (status, error) = call(
        chat_path("0196f1c2-0000-7000-8000-000000000000", "openai"),
        body.to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["error"]["code"], "not_found");
    assert!(
        error["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not found")
    );

    let (status, error) = call(chat_path(&id, "nope"), body.to_string()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        error["error"]["message"]
            .as_str()
            .expect("message")
            .contains("\"nope\"")
    );

    let (status, error) = call(chat_path(&id, "openai"), "{not json".to_owned()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["code"], "invalid_json");

    let (status, _) = kernel
        .post(&format!("/v0/executions/{id}/cancel"), &json!({}))
        .await;
    assert!(status.is_success(), "cancel: {status}");
    let (status, error) = call(chat_path(&id, "openai"), body.to_string()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["error"]["code"], "execution_finished");

    assert!(
        fake.seen.lock().expect("lock").is_empty(),
        "a refused call reached the provider"
    );

    // And the same execution's call is accepted by a live one: refusals were not blanket.
    let live = kernel.create("llm-agent", json!({})).await;
    let live = live["id"].as_str().expect("id");
    let (status, answer) = call(chat_path(live, "openai"), body.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(fake.seen.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn without_a_configuration_the_gateway_is_off() {
    let kernel = kernel_with_gateway(None).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let response = kernel
        .client
        .post(kernel.url(&chat_path(id, "openai")))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "gpt-test", "messages": []}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let error: Value = response.json().await.expect("JSON");
    assert!(
        error["error"]["message"]
            .as_str()
            .expect("message")
            .contains("--llm-config")
    );
}

#[tokio::test]
async fn provider_errors_come_back_unchanged_and_an_unreachable_provider_is_a_502() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with_gateway(Some(&base_url)).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let call = |model: &'static str| {
        kernel
            .client
            .post(kernel.url(&chat_path(id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": model, "messages": []}))
            .send()
    };
    let limited = call("rate-limited").await.expect("sent");
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "7");
    let body: Value = limited.json().await.expect("JSON");
    assert_eq!(body["error"]["message"], "scripted");
    let broken = call("broken").await.expect("sent");
    assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let fine = call("gpt-test").await.expect("sent");
    assert_eq!(fine.status(), StatusCode::OK);
    assert_eq!(fake.seen.lock().expect("lock").len(), 3);

    // A provider nobody listens on: a port bound, then released.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address")
    };
    let kernel = kernel_with_gateway(Some(&format!("http://{closed}/v1"))).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let response = kernel
        .client
        .post(kernel.url(&chat_path(id, "openai")))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "gpt-test", "messages": []}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let text = response.text().await.expect("body");
    assert!(text.contains("upstream_unreachable"), "{text}");
    assert!(
        !text.contains(KEY) && !text.contains(&closed.to_string()),
        "{text}"
    );
}
