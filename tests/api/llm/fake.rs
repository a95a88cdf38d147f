//! The scripted OpenAI-format provider the gateway tests call: it records what it was sent
//! and answers by model (plain, streamed, refused, or busy).

use super::*;

/// What the fake provider saw and how it answers.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) seen: Mutex<Vec<(Option<String>, Bytes)>>,
    /// Model `busy`: every request within a second of the first is answered 429.
    pub(crate) busy_until: Mutex<Option<std::time::Instant>>,
    /// 429s given for model `busy`.
    pub(crate) busy_refusals: std::sync::atomic::AtomicUsize,
    /// Released by the test once it has read the stream's first chunk.
    pub(crate) first_chunk_read: Notify,
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
