//! The OpenAI chat route: a body goes upstream unchanged with the provider's key, streams are
//! forwarded as they arrive, refusals use OpenAI's error shape, and provider errors come back.

use super::*;

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
