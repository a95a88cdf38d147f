//! The LLM gateway's OpenAI route against a scripted fake provider on loopback: the body goes
//! upstream unchanged with the provider's key (never the caller's token, never shown back),
//! streams are forwarded chunk by chunk as they arrive, and refusals use OpenAI's error shape.

use std::collections::BTreeMap;
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

pub(crate) const TOKEN: &str = "kernel-token-42";
const KEY: &str = "sk-provider-key-9f3a";

/// What the fake provider saw and how it answers.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) seen: Mutex<Vec<(Option<String>, Bytes)>>,
    /// Model `busy`: every request within a second of the first is answered 429.
    busy_until: Mutex<Option<std::time::Instant>>,
    /// 429s given for model `busy`.
    busy_refusals: std::sync::atomic::AtomicUsize,
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
    let body_copy = body.clone();
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
    if model.as_deref() == Some("busy") {
        let now = std::time::Instant::now();
        let mut until = fake.busy_until.lock().expect("lock");
        let busy_until = *until.get_or_insert(now + Duration::from_secs(1));
        if now < busy_until {
            fake.busy_refusals
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let error = json!({"error": {"message": "busy", "type": "rate_limit", "code": 429}});
            return (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [("content-type", "application/json"), ("retry-after", "1")],
                error.to_string(),
            )
                .into_response();
        }
    }
    match model.as_deref() {
        Some("rate-limited") => return refusal(429),
        Some("broken") => return refusal(500),
        // Long enough for concurrent calls to be in flight together.
        Some("slow") => tokio::time::sleep(Duration::from_millis(50)).await,
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
    let include_usage = serde_json::from_slice::<Value>(&body_copy)
        .ok()
        .and_then(|value| value.pointer("/stream_options/include_usage")?.as_bool())
        .unwrap_or(false);
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
                2 if include_usage => {
                    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2,\"total_tokens\":13}}\n\n"
                }
                2 => "data: [DONE]\n\n",
                3 if include_usage => "data: [DONE]\n\n",
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
pub(crate) async fn start_fake(fake: Arc<Fake>) -> String {
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
    kernel_with(base_url, Some(TOKEN), |_| {}).await
}

/// A kernel with the gateway (prices for `gpt-test`), the bearer token `token` (none: open)
/// and `kernel` applied to its configuration (a policy).
pub(crate) async fn kernel_with(
    base_url: Option<&str>,
    token: Option<&str>,
    kernel: fn(&mut keel_actors::kernel::KernelConfig),
) -> TestKernel {
    let gateway = base_url.map(|base_url| {
        let yaml = format!(
            "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    api_key_env: FAKE_KEY\n    prices:\n      gpt-test: {{input: 2.0, output: 10.0}}\n    limits:\n      max_wait: 2s\n"
        );
        let config = GatewayConfig::parse(&yaml, Path::new("."), |_| Some(KEY.to_owned()))
            .expect("valid gateway configuration");
        Arc::new(Gateway::new(config).expect("gateway"))
    });
    TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: token.map(str::to_owned),
            heartbeat: Duration::from_millis(300),
            gateway,
            ..HttpSettings::default()
        },
        kernel,
        ..Options::default()
    })
    .await
}

pub(crate) fn chat_path(execution_id: &str, provider: &str) -> String {
    format!("/v0/executions/{execution_id}/llm/{provider}/v1/chat/completions")
}

/// One chat completion with `body` through `execution_id`'s `openai` provider, as an admin:
/// the answer's status and JSON body. The future owns what it needs, so it can be spawned.
pub(crate) fn chat(
    kernel: &TestKernel,
    execution_id: &str,
    body: Value,
) -> impl Future<Output = (StatusCode, Value)> + Send + 'static {
    let request = kernel
        .client
        .post(kernel.url(&chat_path(execution_id, "openai")))
        .bearer_auth(TOKEN)
        .json(&body);
    async move {
        let response = request.send().await.expect("sent");
        (
            response.status(),
            response.json::<Value>().await.expect("JSON"),
        )
    }
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
    let broken = call("broken").await.expect("sent");
    assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let fine = call("gpt-test").await.expect("sent");
    assert_eq!(fine.status(), StatusCode::OK);
    // A Retry-After longer than the provider's max_wait (2 s here): passed on as it came.
    let limited = call("rate-limited").await.expect("sent");
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "7");
    let body: Value = limited.json().await.expect("JSON");
    assert_eq!(body["error"]["message"], "scripted");
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

/// The `llm.called` events of an execution, once `count` are recorded.
pub(crate) async fn llm_calls(kernel: &TestKernel, execution_id: &str, count: usize) -> Vec<Value> {
    crate::harness::eventually("llm.called recorded", || async {
        let calls: Vec<Value> = kernel
            .events(execution_id)
            .await
            .into_iter()
            .filter(|event| event["type"] == "llm.called")
            .map(|event| event["payload"].clone())
            .collect();
        (calls.len() >= count).then_some(calls)
    })
    .await
}

#[tokio::test]
async fn every_call_is_recorded_with_its_usage_cost_and_digest() {
    use sha2::Digest;
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with_gateway(Some(&base_url)).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let body = r#"{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}"#;
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
    let _ = response.text().await.expect("body");

    // A stream the caller did not ask usage for: the gateway asks the provider, records it,
    // and the caller does not see the usage chunk.
    let response = kernel
        .client
        .post(kernel.url(&chat_path(id, "openai")))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "gpt-test", "stream": true, "messages": []}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    let mut received = String::new();
    fake.first_chunk_read.notify_one();
    while let Some(chunk) = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("stream in time")
    {
        received.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
    }
    assert!(
        received.contains("\"llo\"") && received.ends_with("data: [DONE]\n\n"),
        "{received}"
    );
    assert!(
        !received.contains("usage"),
        "the caller did not ask for usage: {received}"
    );
    let upstream: Value =
        serde_json::from_slice(&fake.seen.lock().expect("lock")[1].1).expect("JSON");
    assert_eq!(upstream["stream_options"]["include_usage"], true);

    let calls = llm_calls(&kernel, id, 2).await;
    let plain = &calls[0];
    assert_eq!(plain["provider"], "openai");
    assert_eq!(plain["model"], "gpt-test");
    assert_eq!(plain["stream"], false);
    assert_eq!(plain["outcome"], "ok");
    assert_eq!(plain["status"], 200);
    assert_eq!(
        (
            plain["input_tokens"].as_u64(),
            plain["output_tokens"].as_u64()
        ),
        (Some(7), Some(1))
    );
    assert_eq!(plain["cost"]["tokens"], 8.0);
    let usd = plain["cost"]["usd"].as_f64().expect("usd");
    assert!(
        (usd - (7.0 * 2.0 + 1.0 * 10.0) / 1e6).abs() < 1e-12,
        "{usd}"
    );
    assert_eq!(
        plain["request_digest"],
        hex::encode(sha2::Sha256::digest(body.as_bytes()))
    );
    assert_eq!(plain["request"]["messages"][0]["content"], "hi");
    assert_eq!(
        plain["response"]["choices"][0]["message"]["content"],
        "hello"
    );
    let streamed = &calls[1];
    assert_eq!(
        (streamed["stream"].clone(), streamed["outcome"].clone()),
        (json!(true), json!("ok"))
    );
    assert_eq!(
        (
            streamed["input_tokens"].as_u64(),
            streamed["output_tokens"].as_u64()
        ),
        (Some(11), Some(2))
    );
    assert_eq!(streamed["cost"]["tokens"], 13.0);
    let all = serde_json::to_string(&kernel.events(id).await).expect("JSON");
    assert!(!all.contains(KEY), "the provider key reached the log");

    // Per provider and model, never per execution.
    let metrics = scrape(&kernel).await;
    for line in [
        "keel_llm_calls_total{provider=\"openai\",model=\"gpt-test\",outcome=\"ok\"} 2",
        "keel_llm_tokens_total{provider=\"openai\",model=\"gpt-test\",kind=\"input\"} 18",
        "keel_llm_tokens_total{provider=\"openai\",model=\"gpt-test\",kind=\"output\"} 3",
        "keel_llm_call_seconds_count{provider=\"openai\",model=\"gpt-test\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    assert!(metrics.contains("keel_llm_cost_usd_total{provider=\"openai\",model=\"gpt-test\"}"));
    assert!(
        !metrics.contains(id),
        "an execution id became a label value"
    );
}

/// The refusal counters of a scrape, by (provider, model, reason).
pub(crate) fn refusals(metrics: &str) -> BTreeMap<(String, String, String), f64> {
    crate::exposition::family(metrics, "keel_llm_refused_total")
        .into_iter()
        .map(|sample| {
            let label = |name: &str| sample.labels.get(name).cloned().unwrap_or_default();
            assert_eq!(sample.labels.len(), 3, "{:?}", sample.labels);
            (
                (label("provider"), label("model"), label("reason")),
                sample.value,
            )
        })
        .collect()
}

/// One expected refusal counter.
pub(crate) fn refused(model: &str, reason: &str, count: f64) -> ((String, String, String), f64) {
    (
        ("openai".to_owned(), model.to_owned(), reason.to_owned()),
        count,
    )
}

pub(crate) async fn scrape(kernel: &TestKernel) -> String {
    kernel
        .client
        .get(kernel.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text")
}

fn token_budget(config: &mut keel_actors::kernel::KernelConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "budget:\n  max_cost:\n    tokens: 10\nrules:\n  - id: all\n    priority: 1\n    when: {}\n    then:\n      decision: allow\n",
    )
    .expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}

#[tokio::test]
async fn a_spent_token_budget_refuses_the_next_call_before_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), token_budget).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let call = || chat(&kernel, id, json!({"model": "gpt-test", "messages": []}));
    // 8 tokens: under the 10-token budget, so the second call is allowed too (16 > 10) ...
    assert_eq!(call().await.0, StatusCode::OK);
    llm_calls(&kernel, id, 1).await;
    assert_eq!(call().await.0, StatusCode::OK);
    llm_calls(&kernel, id, 2).await;
    // ... and the third is refused: the spend reached the limit.
    let (status, error) = call().await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["error"]["code"], "budget_exceeded");
    assert!(
        error["error"]["message"]
            .as_str()
            .expect("message")
            .contains("max_cost.tokens 10"),
        "{error}"
    );
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        2,
        "the refused call reached the provider"
    );
    assert_eq!(
        refusals(&scrape(&kernel).await),
        BTreeMap::from([refused("gpt-test", "budget", 1.0)])
    );
    let (_, body) = kernel.get(&format!("/v0/executions/{id}")).await;
    assert_eq!(llm_calls(&kernel, id, 2).await.len(), 2, "{body}");
}

#[tokio::test]
async fn a_caller_that_leaves_mid_stream_is_recorded_as_disconnected() {
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
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("first chunk");
    assert!(first.is_some());
    drop(stream); // the fake holds the rest until notified: the caller leaves mid-answer
    let calls = llm_calls(&kernel, id, 1).await;
    assert_eq!(calls[0]["outcome"], "client_disconnected", "{calls:?}");
    assert_eq!(calls[0]["stream"], true);
}

fn allow_one_model(config: &mut keel_actors::kernel::KernelConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "models:\n  allow: [\"openai/gpt-test\", \"local/*\"]\nrules:\n  - id: all\n    priority: 1\n    when: {}\n    then:\n      decision: allow\n",
    )
    .expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}

#[tokio::test]
async fn a_model_outside_the_policys_allow_list_is_refused_before_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), allow_one_model).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let kernel = &kernel;
    let call = |model: &str| chat(kernel, id, json!({"model": model, "messages": []}));
    let (status, error) = call("gpt-expensive").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["error"]["code"], "model_not_allowed");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("openai/gpt-expensive") && message.contains("openai/gpt-test"),
        "{message}"
    );
    assert!(
        fake.seen.lock().expect("lock").is_empty(),
        "a refused model reached the provider"
    );
    assert_eq!(
        refusals(&scrape(kernel).await),
        BTreeMap::from([refused("gpt-expensive", "model", 1.0)])
    );
    let (status, answer) = call("gpt-test").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(fake.seen.lock().expect("lock").len(), 1);
}

#[test]
fn a_bad_models_section_stops_the_policy_with_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, "rules: []\nmodels:\n  allow: \"openai/*\"\n").expect("policy written");
    let Err(errors) = keel::policy::load_path(&path) else {
        panic!("a models section that is not a list must not load");
    };
    let text = format!("{errors}");
    assert!(text.contains("models") && text.contains(":2"), "{text}");
}

#[tokio::test]
async fn a_rerun_gets_the_answers_its_earlier_run_recorded_without_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), None, |_| {}).await;
    let (agent, first) = crate::harness::running_execution(&kernel, "llm-rerun").await;
    let mut standby = crate::harness::TestAgent::connect(&kernel, "llm-rerun").await;
    let id = first.execution_id.clone();
    let call = |session: String, body: Value, replay: Option<&'static str>| {
        let mut request = kernel
            .client
            .post(kernel.url(&chat_path(&id, "openai")))
            .header("keel-session", session)
            .json(&body);
        if let Some(replay) = replay {
            request = request.header("keel-replay", replay);
        }
        async move {
            let response = request.send().await.expect("sent");
            let status = response.status();
            (status, response.text().await.expect("text"))
        }
    };
    let plain = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]});
    let streamed = json!({"model": "gpt-test", "stream": true, "messages": []});
    fake.first_chunk_read.notify_one();
    let (status, original_plain) = call(first.session_id.clone(), plain.clone(), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, original_stream) = call(first.session_id.clone(), streamed.clone(), None).await;
    assert_eq!(status, StatusCode::OK);
    llm_calls(&kernel, &id, 2).await;
    assert_eq!(fake.seen.lock().expect("lock").len(), 2);

    // The agent dies; the re-run on the standby makes the same calls, and one more.
    drop(agent);
    let second = standby.assignment().await;
    assert_eq!(second.execution_id, id);
    let (status, replayed_plain) = call(second.session_id.clone(), plain.clone(), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, replayed_stream) = call(second.session_id.clone(), streamed.clone(), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&replayed_plain).expect("JSON"),
        serde_json::from_str::<Value>(&original_plain).expect("JSON")
    );
    assert_eq!(replayed_stream, original_stream);
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        2,
        "a replayed call reached the provider"
    );
    // A second identical call in this run has no recorded counterpart: it goes to the provider.
    let (status, _) = call(second.session_id.clone(), plain.clone(), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fake.seen.lock().expect("lock").len(), 3);
    // And a caller may opt out of the replay.
    fake.first_chunk_read.notify_one();
    let (status, _) = call(second.session_id.clone(), streamed.clone(), Some("off")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fake.seen.lock().expect("lock").len(), 4);

    let calls = llm_calls(&kernel, &id, 6).await;
    let replays: Vec<&Value> = calls
        .iter()
        .filter(|call| call["replay_of"].is_i64())
        .collect();
    assert_eq!(replays.len(), 2, "{calls:?}");
    assert!(
        replays.iter().all(|call| call["cost"].is_null()),
        "a replay is not charged again"
    );
}

/// The `x-api-key` and `anthropic-version` of each call.
type Seen = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

/// A scripted Anthropic-format provider: `/v1/messages`, plain and streamed; it records the
/// `x-api-key` and `anthropic-version` it was sent.
async fn fake_messages(
    State(seen): State<Seen>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    seen.lock()
        .expect("lock")
        .push((header("x-api-key"), header("anthropic-version")));
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    if request["stream"] == true {
        let events = [
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1,\"cache_read_input_tokens\":3}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":6}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ];
        return ([("content-type", "text/event-stream")], events.concat()).into_response();
    }
    (
        [("content-type", "application/json")],
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
               "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 20, "output_tokens": 4}})
        .to_string(),
    )
        .into_response()
}

async fn fake_embeddings(body: Bytes) -> axum::response::Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    axum::Json(json!({"object": "list", "model": request["model"],
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
        "usage": {"prompt_tokens": 3, "total_tokens": 3}}))
    .into_response()
}

#[tokio::test]
async fn anthropic_messages_and_openai_embeddings_are_forwarded_and_recorded() {
    let anthropic_seen = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/v1/messages", post(fake_messages))
        .route("/v1/embeddings", post(fake_embeddings))
        .with_state(anthropic_seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let yaml = format!(
        "providers:\n  claude:\n    format: anthropic\n    base_url: http://{address}/v1\n    api_key_env: K\n  oa:\n    format: openai\n    base_url: http://{address}/v1\n"
    );
    let kernel = kernel_from_yaml(&yaml).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let post = |path: String, body: Value| {
        let request = kernel
            .client
            .post(kernel.url(&path))
            .bearer_auth(TOKEN)
            .json(&body);
        async move {
            let response = request.send().await.expect("sent");
            (response.status(), response.text().await.expect("text"))
        }
    };
    let messages = format!("/v0/executions/{id}/llm/claude/v1/messages");
    let body = json!({"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let (status, text) = post(messages.clone(), body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("\"hello\""));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = post(messages.clone(), streamed).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains("message_stop") && text.contains("\"hi\""),
        "{text}"
    );
    let embeddings = format!("/v0/executions/{id}/llm/oa/v1/embeddings");
    let (status, text) = post(embeddings, json!({"model": "emb-1", "input": "hi"})).await;
    assert_eq!(status, StatusCode::OK, "{text}");

    // A route of the other format is refused in that route's own error shape.
    let (status, text) = post(
        format!("/v0/executions/{id}/llm/oa/v1/messages"),
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let refusal: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(refusal["type"], "error");
    assert_eq!(refusal["error"]["type"], "not_found_error");
    assert_eq!(refusal["error"]["code"], "unknown_route");

    assert_eq!(
        anthropic_seen.lock().expect("lock").clone(),
        vec![(Some(KEY.to_owned()), Some("2023-06-01".to_owned())); 2],
        "the key as x-api-key, and a version"
    );
    let calls = llm_calls(&kernel, id, 3).await;
    let tokens: Vec<(Option<u64>, Option<u64>, Option<u64>)> = calls
        .iter()
        .map(|call| {
            (
                call["input_tokens"].as_u64(),
                call["output_tokens"].as_u64(),
                call["cached_tokens"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        tokens,
        vec![
            (Some(20), Some(4), None),
            (Some(12), Some(6), Some(3)),
            (Some(3), None, None)
        ]
    );
    assert_eq!(calls[1]["stream"], true);
    assert_eq!(calls[2]["model"], "emb-1");
}

#[tokio::test]
async fn a_429_parks_the_provider_so_callers_wait_once_instead_of_retrying_into_it() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), |_| {}).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id").to_owned();
    let call = |kernel: &TestKernel| {
        let request = kernel
            .client
            .post(kernel.url(&chat_path(&id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "busy", "messages": []}));
        async move { request.send().await.expect("sent").status() }
    };
    let started = std::time::Instant::now();
    let first = call(&kernel);
    let others = async {
        // Once the provider has answered the first call's 429, more callers arrive.
        crate::harness::eventually("the first 429", || async {
            (fake.busy_refusals.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
        })
        .await;
        futures::future::join_all((0..5).map(|_| call(&kernel))).await
    };
    let (first, others) = tokio::join!(first, others);
    assert_eq!(
        first,
        StatusCode::OK,
        "the parked call went again after Retry-After"
    );
    assert!(
        others.iter().all(|status| *status == StatusCode::OK),
        "{others:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(
        fake.busy_refusals.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "callers arriving while parked waited instead of calling the provider"
    );
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        7,
        "one 429, its retry, five calls"
    );
}

#[tokio::test]
async fn requests_per_minute_and_the_breaker_hold_calls_before_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let yaml = format!(
        "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    limits:\n      rpm: 3\n      max_wait: 1s\n      breaker_failures: 2\n      breaker_cool_down: 1m\n"
    );
    let kernel = kernel_from_yaml(&yaml).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let call = |model: &'static str| {
        let request = kernel
            .client
            .post(kernel.url(&chat_path(id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": model, "messages": []}));
        async move { request.send().await.expect("sent") }
    };
    assert_eq!(call("gpt-test").await.status(), StatusCode::OK);
    // Two failures in a row open the breaker: the next call is not sent.
    assert_eq!(
        call("broken").await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        call("broken").await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let open = call("gpt-test").await;
    assert_eq!(open.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(open.headers().contains_key("retry-after"));
    let body: Value = open.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "provider_unavailable");
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        3,
        "the open breaker sent nothing"
    );
    let metrics = scrape(&kernel).await;
    assert_eq!(
        refusals(&metrics),
        BTreeMap::from([refused("gpt-test", "breaker", 1.0)]),
        "{metrics}"
    );

    // Three requests in this minute already: a fourth would wait past max_wait (1 s).
    let kernel2 = kernel_with_rpm(&base_url).await;
    let execution = kernel2.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = kernel2
            .client
            .post(kernel2.url(&chat_path(id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "gpt-test", "messages": []}))
            .send()
            .await
            .expect("sent");
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        vec![StatusCode::OK; 2]
            .into_iter()
            .chain([StatusCode::TOO_MANY_REQUESTS])
            .collect::<Vec<_>>()
    );
    assert_eq!(
        refusals(&scrape(&kernel2).await),
        BTreeMap::from([refused("gpt-test", "throttled", 1.0)])
    );
}

async fn kernel_with_rpm(base_url: &str) -> TestKernel {
    let yaml = format!(
        "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    limits:\n      rpm: 2\n      max_wait: 1s\n"
    );
    kernel_from_yaml(&yaml).await
}

/// A kernel with the bearer token and the gateway configuration `yaml` (every key variable
/// resolves to the provider key).
pub(crate) async fn kernel_from_yaml(yaml: &str) -> TestKernel {
    let config =
        GatewayConfig::parse(yaml, Path::new("."), |_| Some(KEY.to_owned())).expect("valid");
    TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            gateway: Some(Arc::new(Gateway::new(config).expect("gateway"))),
            ..HttpSettings::default()
        },
        ..Options::default()
    })
    .await
}
