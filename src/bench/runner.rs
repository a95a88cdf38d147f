//! The runner side of `keel bench`: connections on `/v0/runners/stream` offering the remote
//! bench tool; each `job.assigned` is acknowledged (`started`) and answered with a result at
//! once, the way an SDK runner with an instant tool would.

use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use super::REMOTE_TOOL;
use super::mixed::Shared;
use crate::cli::path_segment;

/// Pause before reconnecting a dropped stream.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// Keeps one runner connection open until the bench stops, reconnecting when it drops.
pub async fn serve(shared: Arc<Shared>, consumer_id: String) {
    let runner = path_segment(&shared.runner_id);
    let tools = json!({ "tools": [{
        "id": REMOTE_TOOL,
        "description": "keel bench: returns its arguments",
        "input_schema": { "type": "object", "properties": {} },
    }]});
    let query = [
        ("runner_id", shared.runner_id.clone()),
        ("consumer_id", consumer_id.clone()),
        ("capabilities", REMOTE_TOOL.to_owned()),
    ];
    while !shared.stop.is_cancelled() {
        if let Err(error) = shared
            .client
            .post(&format!("/v0/runners/{runner}/tools"), Some(&tools))
            .await
        {
            shared.stats.error(format!("publish tools: {error}"));
        }
        let response = tokio::select! {
            response = shared.client.stream("/v0/runners/stream", &query) => response,
            () = shared.stop.cancelled() => return,
        };
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                shared
                    .stats
                    .error(format!("runner stream {consumer_id}: {error}"));
                tokio::time::sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        shared.connected.add_permits(1);
        let mut messages = response.bytes_stream().eventsource();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                () = shared.stop.cancelled() => return,
            };
            match message {
                Some(Ok(message)) if message.event == "job.assigned" => {
                    if let Ok(job) = serde_json::from_str::<Value>(&message.data) {
                        let stop = shared.stop.clone();
                        let job = run_job(shared.clone(), consumer_id.clone(), job);
                        tokio::spawn(async move {
                            tokio::select! {
                                () = job => {}
                                () = stop.cancelled() => {}
                            }
                        });
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    shared
                        .stats
                        .error(format!("runner stream {consumer_id}: {error}"));
                    break;
                }
                None => break,
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Acknowledges and answers one job.
async fn run_job(shared: Arc<Shared>, consumer_id: String, job: Value) {
    let field = |name: &str| {
        job.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (job_id, execution_id, step_id) = (field("id"), field("execution_id"), field("step_id"));
    let runner = path_segment(&shared.runner_id);
    let started_body = json!({ "execution_id": execution_id, "runner_id": shared.runner_id });
    let started_path = format!("/v0/runners/steps/{}/started", path_segment(&step_id));
    // The SDK ignores errors of this call too.
    let _ = shared.client.post(&started_path, Some(&started_body)).await;
    let result = json!({
        "job_id": job_id,
        "execution_id": execution_id,
        "step_id": step_id,
        "success": true,
        "data": { "echo": job.get("arguments").cloned().unwrap_or(Value::Null) },
        "consumer_id": consumer_id,
    });
    match shared
        .client
        .post(&format!("/v0/runners/{runner}/results"), Some(&result))
        .await
    {
        Ok(_) => {
            shared
                .stats
                .jobs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Err(error) => shared
            .stats
            .error(format!("runner result for step {step_id}: {error}")),
    }
}
