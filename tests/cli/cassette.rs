//! `keel llm export EXECUTION > cassette` and a kernel started with `--llm-cassette`: recorded
//! answers (a whole one and a stream) come back without any provider, and a call the cassette
//! does not hold is refused in the provider's error shape, naming it, with a log line.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

use super::{Kernel, WAIT, keel, stderr, stdout};

const TOKEN: &str = "cassette-token";
const PLAIN: &str = r#"{"model":"m1","messages":[{"role":"user","content":"hi"}]}"#;
const STREAMED: &str =
    r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"go"}]}"#;

/// A provider answering every chat call; counts the calls.
async fn provider(calls: Arc<AtomicUsize>) -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |body: String| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if body.contains("\"stream\":true") {
                    let events = "data: {\"choices\":[{\"delta\":{\"content\":\"stre\"}}]}\n\n\
                        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n\
                        data: [DONE]\n\n";
                    ([("content-type", "text/event-stream")], events.to_owned())
                } else {
                    let answer = json!({"id": "c1", "choices": [{"index": 0,
                        "message": {"role": "assistant", "content": "recorded hello"}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 3}});
                    ([("content-type", "application/json")], answer.to_string())
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/v1")
}

/// Creates an execution; returns its id.
async fn execution(http: &reqwest::Client, kernel: &Kernel) -> String {
    let created: Value = http
        .post(format!("{}/v0/executions", kernel.url))
        .bearer_auth(TOKEN)
        .json(&json!({"agent_id": "cassette-agent", "input": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["id"].as_str().expect("id").to_owned()
}

/// One chat call of execution `id` with `body`: status and body text.
async fn chat(http: &reqwest::Client, kernel: &Kernel, id: &str, body: &str) -> (u16, String) {
    let response = http
        .post(format!(
            "{}/v0/executions/{id}/llm/openai/v1/chat/completions",
            kernel.url
        ))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn an_exported_cassette_answers_without_the_provider_and_refuses_what_it_lacks() {
    let calls = Arc::new(AtomicUsize::new(0));
    let base_url = provider(calls.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("llm.yaml");
    std::fs::write(
        &config,
        format!("providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n"),
    )
    .unwrap();
    let http = reqwest::Client::new();
    let recording = Kernel::start(&[
        ("KEEL_LLM_CONFIG", config.to_str().unwrap()),
        ("KEEL_BEARER_TOKEN", TOKEN),
    ])
    .await;
    let id = execution(&http, &recording).await;
    let (status, plain) = chat(&http, &recording, &id, PLAIN).await;
    assert_eq!(status, 200, "{plain}");
    let (status, streamed) = chat(&http, &recording, &id, STREAMED).await;
    assert_eq!(status, 200, "{streamed}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    let env = [("KEEL_URL", recording.url.as_str()), ("KEEL_TOKEN", TOKEN)];
    // Both calls are recorded once their answers end; export once both are there.
    let cassette = tokio::time::timeout(WAIT, async {
        loop {
            let export = keel(&["llm", "export", &id], &env).await;
            assert!(export.status.success(), "{}", stderr(&export));
            let cassette: Value = serde_json::from_str(&stdout(&export)).expect("JSON");
            if cassette["calls"].as_array().map(Vec::len) == Some(2) {
                return stdout(&export);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("two calls exported");
    let unknown = keel(&["llm", "export", "no-such-execution"], &env).await;
    assert!(!unknown.status.success(), "an unknown execution exported");
    let file = dir.path().join("cassette.json");
    std::fs::write(&file, &cassette).unwrap();

    // A kernel with the cassette and no provider configuration at all.
    let replaying = Kernel::start(&[
        ("KEEL_LLM_CASSETTE", file.to_str().unwrap()),
        ("KEEL_BEARER_TOKEN", TOKEN),
    ])
    .await;
    let id = execution(&http, &replaying).await;
    assert_eq!(chat(&http, &replaying, &id, PLAIN).await, (200, plain));
    let (status, replayed) = chat(&http, &replaying, &id, STREAMED).await;
    assert_eq!(status, 200);
    assert!(
        replayed.contains("\"content\":\"stre\"") && replayed.contains("[DONE]"),
        "{replayed}"
    );
    let (status, missing) = chat(
        &http,
        &replaying,
        &id,
        r#"{"model":"m1","messages":[{"role":"user","content":"new"}]}"#,
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    let missing: Value = serde_json::from_str(&missing).expect("JSON");
    assert_eq!(missing["error"]["code"], "not_in_cassette", "{missing}");
    let message = missing["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("openai/m1") && message.contains("request digest"),
        "{message}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the replaying kernel called the provider"
    );
    tokio::time::timeout(WAIT, async {
        while !replaying
            .log
            .lock()
            .unwrap()
            .contains("not in the cassette")
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the refusal is logged");
    // The served calls are recorded with the recorded usage: 5 + 3 and 4 + 2 tokens.
    let events: Value = http
        .get(format!("{}/v0/executions/{id}/events", replaying.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tokens: Vec<u64> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "llm.called")
        .map(|event| event["payload"]["cost"]["tokens"].as_f64().unwrap_or(0.0) as u64)
        .collect();
    assert_eq!(tokens, vec![8, 6]);
}
