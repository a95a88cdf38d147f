//! Reruns: a rerun execution gets the answers its earlier run recorded, without the provider.

use super::*;

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
