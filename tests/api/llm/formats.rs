//! Providers in other formats: Anthropic messages and OpenAI embeddings, forwarded and
//! recorded like chat completions.

use super::*;

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
