//! What each model call leaves in the log: `llm.called` with its usage, cost and digest, and
//! the outcome of a call whose caller left mid-stream.

use super::*;

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
