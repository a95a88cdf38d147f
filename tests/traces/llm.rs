//! A model call through the LLM gateway is a span of its execution's trace, with the
//! OpenTelemetry GenAI attributes.

use axum::Router;
use axum::routing::post;
use serde_json::json;

use super::{Kernel, attribute, collect, hex, receiver};

const TOKEN: &str = "traces-llm-token";

/// A provider answering every chat call for model `gpt-test` as `gpt-test-2025`.
async fn provider() -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            (
                [("content-type", "application/json")],
                json!({"id": "c1", "model": "gpt-test-2025", "choices": [{"index": 0,
                    "message": {"role": "assistant", "content": "hi"}}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 5}})
                .to_string(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/v1")
}

#[tokio::test]
async fn a_model_call_is_a_genai_span_of_its_executions_trace() {
    let (endpoint, mut spans) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("llm.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  openai:\n    format: openai\n    base_url: {}\n",
            provider().await
        ),
    )
    .unwrap();
    let kernel = Kernel::start_with(
        Some(&endpoint),
        &[
            "--llm-config",
            config.to_str().unwrap(),
            "--bearer-token",
            TOKEN,
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let trace_id = "5cf92f3577b34da6a3ce929d0e0e4799";
    let created: serde_json::Value = http
        .post(kernel.url("/v0/executions"))
        .bearer_auth(TOKEN)
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .json(&json!({"agent_id": "llm-traced"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("id").to_owned();
    // The model call's own request carries no trace context: its span still joins the
    // execution's trace.
    let answer = http
        .post(kernel.url(&format!(
            "/v0/executions/{id}/llm/openai/v1/chat/completions"
        )))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "gpt-test", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let all = collect(&mut spans, |all| {
        all.iter().any(|span| span.name == "chat gpt-test")
    })
    .await;
    let call = all
        .iter()
        .find(|span| span.name == "chat gpt-test")
        .expect("the call's span");
    assert_eq!(hex(&call.trace_id), trace_id, "under the execution's trace");
    assert!(!call.parent_span_id.is_empty());
    for (key, value) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.system", "openai"),
        ("gen_ai.request.model", "gpt-test"),
        ("gen_ai.response.model", "gpt-test-2025"),
        ("gen_ai.usage.input_tokens", "12"),
        ("gen_ai.usage.output_tokens", "5"),
        ("execution.id", id.as_str()),
        ("keel.llm.outcome", "ok"),
    ] {
        assert_eq!(attribute(call, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(attribute(call, "error.type"), None);
}
