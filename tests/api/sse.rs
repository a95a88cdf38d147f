//! SSE framing (WIRE.md §8) and the live execution stream (§7.7): headers, preamble, ids,
//! replay, tail, closing on terminal events, heartbeats and shutdown with open streams.

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{Options, TestKernel, assert_error, running_execution};

#[tokio::test]
async fn the_execution_stream_replays_tails_and_closes_after_the_terminal_event() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "streamed").await;
    let mut stream = kernel
        .sse(&format!(
            "/v0/executions/{}/stream",
            assignment.execution_id
        ))
        .await;
    assert_eq!(stream.headers["content-type"], "text/event-stream");
    assert_eq!(stream.headers["cache-control"], "no-cache");
    assert_eq!(stream.headers["x-accel-buffering"], "no");
    assert!(stream.headers.get("content-encoding").is_none());
    let first = stream.next().await.unwrap();
    assert!(
        stream.raw.starts_with("retry: 5000\n\n"),
        "{:?}",
        stream.raw
    );
    assert_eq!(
        (first.id.as_deref(), first.event.as_str()),
        (Some("1"), "execution.created")
    );
    assert_eq!(first.data["sequence"], 1);
    assert_eq!(first.data["type"], "execution.created");
    let second = stream.next().await.unwrap();
    assert_eq!(
        (second.id.as_deref(), second.event.as_str()),
        (Some("2"), "execution.started")
    );
    // Tail: new events arrive as they are committed.
    let step_id = assignment.invoke(&kernel, "tailed").await;
    let mut tailed = Vec::new();
    loop {
        let message = stream.next().await.expect("tailed event");
        let done = message.event == "step.created";
        tailed.push(message);
        if done {
            break;
        }
    }
    assert_eq!(tailed.last().unwrap().data["step_id"], *step_id);
    assignment
        .step_result(&kernel, &step_id, true, json!(1))
        .await;
    assignment.complete(&kernel, json!("out")).await;
    let mut last = None;
    while let Some(message) = stream.next().await {
        last = Some(message);
    }
    let last = last.expect("terminal event");
    assert_eq!(last.event, "execution.completed");
    let total = kernel.events(&assignment.execution_id).await.len();
    assert_eq!(
        last.id,
        Some(total.to_string()),
        "nothing follows the terminal event"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_finished_execution_streams_its_log_and_closes_at_once() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap();
    kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    let mut stream = kernel
        .sse(&format!("/v0/executions/{id}/stream?after_sequence=1"))
        .await;
    let message = stream.next().await.unwrap();
    assert_eq!(
        (message.id.as_deref(), message.event.as_str()),
        (Some("2"), "execution.cancelled")
    );
    assert!(stream.ends().await);
    // After the terminal event there is nothing to send: the stream closes right away.
    let mut past = kernel
        .sse(&format!("/v0/executions/{id}/stream?after_sequence=99"))
        .await;
    assert!(past.ends().await);
    assert_eq!(past.raw, "retry: 5000\n\n");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_long_log_is_replayed_in_full_up_to_its_terminal_event() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let path = format!("/v0/executions/{id}/signal");
    for batch in 0..21 {
        let bodies: Vec<_> = (0..50)
            .map(|index| json!({"signal_type": format!("s{batch}-{index}")}))
            .collect();
        let sends = bodies.iter().map(|body| kernel.post(&path, body));
        for (status, body) in join_all(sends).await {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    let mut stream = kernel.sse(&format!("/v0/executions/{id}/stream")).await;
    let mut count = 0;
    let mut last = None;
    while let Some(message) = stream.next().await {
        count += 1;
        assert_eq!(message.id, Some(count.to_string()));
        last = Some(message.event);
    }
    assert_eq!(count, 1 + 1050 + 1);
    assert_eq!(last.as_deref(), Some("execution.cancelled"));
    kernel.shutdown().await;
}

#[tokio::test]
async fn unknown_executions_get_a_json_404_before_any_stream_bytes() {
    let kernel = TestKernel::start().await;
    let response = kernel
        .get("/v0/executions/0196f1c2-0000-7000-8000-000000000001/stream")
        .await;
    assert_error(
        &response,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        Some("not found: execution 0196f1c2-0000-7000-8000-000000000001"),
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn idle_streams_send_heartbeat_comments() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("idle", json!(null)).await;
    let mut stream = kernel
        .sse(&format!(
            "/v0/executions/{}/stream",
            created["id"].as_str().unwrap()
        ))
        .await;
    stream.wait_raw(":heartbeat\n\n").await;
    let mut agent = kernel
        .sse("/v0/agents/stream?agent_id=idle-agent&consumer_id=c1")
        .await;
    agent.wait_raw(":heartbeat\n\n").await;
    assert!(agent.raw.starts_with("retry: 5000\n\n"));
    let mut runner = kernel
        .sse("/v0/runners/stream?runner_id=idle-runner&consumer_id=c1")
        .await;
    runner.wait_raw(":heartbeat\n\n").await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn agent_stream_messages_have_no_id_and_object_data() {
    let kernel = TestKernel::start().await;
    let (mut agent, assignment) = running_execution(&kernel, "plain").await;
    assert!(agent.stream.raw.starts_with("retry: 5000\n\n"));
    assert!(
        !agent.stream.raw.contains("\nid:") && !agent.stream.raw.starts_with("id:"),
        "{}",
        agent.stream.raw
    );
    assert!(assignment.data.is_object());
    let step_id = assignment.invoke(&kernel, "x").await;
    assignment
        .step_result(&kernel, &step_id, true, json!(null))
        .await;
    let pushed = agent.stream.next_of("tool.result").await;
    assert_eq!(pushed.id, None);
    assert!(pushed.data.is_object());
    kernel.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let kernel = TestKernel::start_with(Options::default()).await;
    let created = kernel.create("stay", json!(null)).await;
    let mut execution = kernel
        .sse(&format!(
            "/v0/executions/{}/stream",
            created["id"].as_str().unwrap()
        ))
        .await;
    let mut agent = kernel
        .sse("/v0/agents/stream?agent_id=other&consumer_id=c")
        .await;
    let mut runner = kernel
        .sse("/v0/runners/stream?runner_id=r&consumer_id=c")
        .await;
    execution.next().await.expect("created event");
    // `shutdown` fails the test if the server waits on the open streams.
    kernel.shutdown().await;
    assert!(execution.ends().await);
    assert!(agent.ends().await);
    assert!(runner.ends().await);
}

#[tokio::test]
async fn a_stream_started_past_the_end_closes_when_the_execution_ends() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap();
    let mut stream = kernel
        .sse(&format!("/v0/executions/{id}/stream?after_sequence=50"))
        .await;
    stream.wait_raw("retry: 5000").await;
    let (status, _) = kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(stream.ends().await, "terminal with nothing left to send");
    assert!(!stream.raw.contains("event:"), "{}", stream.raw);
    kernel.shutdown().await;
}

#[tokio::test]
async fn last_event_id_resumes_the_execution_stream_like_after_sequence() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("nobody", json!(null)).await;
    let id = created["id"].as_str().unwrap();
    kernel
        .post_raw(&format!("/v0/executions/{id}/cancel"), "")
        .await;
    let path = format!("/v0/executions/{id}/stream");
    // Log: 1 execution.created, 2 execution.cancelled.
    let mut resumed = kernel.sse_with(&path, &[("Last-Event-ID", "1")]).await;
    let message = resumed.next().await.unwrap();
    assert_eq!(
        (message.id.as_deref(), message.event.as_str()),
        (Some("2"), "execution.cancelled")
    );
    assert!(resumed.ends().await);
    // A reconnecting EventSource repeats its original URL: the later sequence wins.
    let mut both = kernel
        .sse_with(
            &format!("{path}?after_sequence=0"),
            &[("Last-Event-ID", "2")],
        )
        .await;
    assert!(both.ends().await);
    assert_eq!(both.raw, "retry: 5000\n\n");
    // A header that is not a sequence is ignored, as an unparsable after_sequence is.
    let mut garbage = kernel.sse_with(&path, &[("Last-Event-ID", "abc")]).await;
    assert_eq!(garbage.next().await.unwrap().id.as_deref(), Some("1"));
    kernel.shutdown().await;
}
