//! The agent side of `keel bench`: consumers holding `/v0/agents/stream` open and, for each
//! `execution.assigned`, a handler that plays the script — `K` tool calls alternating local
//! (intent, then step result) and remote (intent, then wait for `tool.result` from a runner) —
//! and then the `complete` intent, timing each request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::mixed::Shared;
use super::{LOCAL_TOOL, REMOTE_TOOL};

/// How long a handler waits for the `tool.result` of a remote step.
const TOOL_RESULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before reconnecting a dropped stream.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// Pushes for running handlers of one consumer, by execution id.
type Routes = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<(String, Value)>>>>;

/// Keeps one agent consumer connected until the bench stops, reconnecting with the same
/// consumer id (as the SDK does) when the stream drops.
pub async fn consume(shared: Arc<Shared>, consumer_id: String) {
    let routes: Routes = Arc::default();
    let query = [
        ("agent_id", shared.agent_id.clone()),
        ("consumer_id", consumer_id.clone()),
    ];
    while !shared.stop.is_cancelled() {
        let response = tokio::select! {
            response = shared.client.stream("/v0/agents/stream", &query) => response,
            () = shared.stop.cancelled() => return,
        };
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                shared
                    .stats
                    .error(format!("agent stream {consumer_id}: {error}"));
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
                Some(Ok(message)) => dispatch(&shared, &routes, &message.event, &message.data),
                Some(Err(error)) => {
                    shared
                        .stats
                        .error(format!("agent stream {consumer_id}: {error}"));
                    break;
                }
                None => break,
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Starts a handler for an assignment, or routes a push to the handler it is for.
fn dispatch(shared: &Arc<Shared>, routes: &Routes, event: &str, data: &str) {
    let Ok(data) = serde_json::from_str::<Value>(data) else {
        return;
    };
    let Some(execution_id) = data
        .get("execution_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    if event == "execution.assigned" {
        let Some(session_id) = data
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            shared.stats.error(format!(
                "execution.assigned for {execution_id} without session_id"
            ));
            return;
        };
        let (sender, receiver) = mpsc::unbounded_channel();
        if let Ok(mut routes) = routes.lock() {
            routes.insert(execution_id.clone(), sender);
        }
        let created_micros = data.pointer("/input/created_us").and_then(Value::as_u64);
        let shared = shared.clone();
        let routes = routes.clone();
        tokio::spawn(async move {
            let handler = Handler {
                shared: &shared,
                execution_id: &execution_id,
                session_id: &session_id,
            };
            // Once the run is over, unfinished handlers stop without counting as failures.
            let outcome = tokio::select! {
                outcome = handler.run(receiver) => outcome,
                () = shared.stop.cancelled() => return,
            };
            if let Ok(mut routes) = routes.lock() {
                routes.remove(&execution_id);
            }
            shared.finish(&execution_id, outcome, created_micros);
        });
        return;
    }
    let sender = routes
        .lock()
        .ok()
        .and_then(|routes| routes.get(&execution_id).cloned());
    if let Some(sender) = sender {
        let _ = sender.send((event.to_owned(), data));
    }
}

/// One execution being played.
struct Handler<'a> {
    shared: &'a Shared,
    execution_id: &'a str,
    session_id: &'a str,
}

impl Handler<'_> {
    /// Plays the script; returns why it gave up, if it did.
    async fn run(
        &self,
        mut pushes: mpsc::UnboundedReceiver<(String, Value)>,
    ) -> Result<(), String> {
        let mut early_results: HashMap<String, Value> = HashMap::new();
        for index in 0..self.shared.tools_per_execution {
            let remote = index % 2 == 1;
            let tool_id = if remote { REMOTE_TOOL } else { LOCAL_TOOL };
            let intent = json!({
                "type": "invoke_tool",
                "tool_id": tool_id,
                "arguments": { "index": index },
                "idempotency_key": format!("{}:{tool_id}:{index}", self.execution_id),
                "remote": remote,
            });
            let started = Instant::now();
            let answer = self.intent(intent).await?;
            let step_id = answer
                .get("step_id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("accepted invoke_tool without step_id: {answer}"))?
                .to_owned();
            if remote {
                self.wait_tool_result(&mut pushes, &mut early_results, &step_id)
                    .await?;
                self.shared.stats.remote_tool.record(started.elapsed());
            } else {
                self.step_result(&step_id, index).await?;
            }
        }
        self.intent(
            json!({ "type": "complete", "output": { "tools": self.shared.tools_per_execution } }),
        )
        .await
        .map(|_| ())
    }

    /// Sends an intent, records its latency, and fails on a denial.
    async fn intent(&self, intent: Value) -> Result<Value, String> {
        let body = json!({ "execution_id": self.execution_id, "session_id": self.session_id, "intent": intent });
        let started = Instant::now();
        let answer = self
            .shared
            .client
            .post("/v0/agents/intent", Some(&body))
            .await
            .map_err(|error| error.to_string())?;
        self.shared.stats.intent.record(started.elapsed());
        if answer.get("accepted").and_then(Value::as_bool) != Some(true) {
            let reason = answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no reason given");
            return Err(format!(
                "intent denied: {reason} (run the kernel with a policy allowing {LOCAL_TOOL} and {REMOTE_TOOL}, e.g. keel dev)"
            ));
        }
        Ok(answer)
    }

    /// Reports a local step as succeeded and records the latency.
    async fn step_result(&self, step_id: &str, index: u32) -> Result<(), String> {
        let body = json!({
            "execution_id": self.execution_id,
            "session_id": self.session_id,
            "step_id": step_id,
            "success": true,
            "data": { "index": index },
        });
        let started = Instant::now();
        self.shared
            .client
            .post("/v0/agents/step-result", Some(&body))
            .await
            .map_err(|error| error.to_string())?;
        self.shared.stats.step_result.record(started.elapsed());
        Ok(())
    }

    /// Waits for the `tool.result` of `step_id`, keeping results of other steps for later.
    async fn wait_tool_result(
        &self,
        pushes: &mut mpsc::UnboundedReceiver<(String, Value)>,
        early_results: &mut HashMap<String, Value>,
        step_id: &str,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + TOOL_RESULT_TIMEOUT;
        let mut result = early_results.remove(step_id);
        while result.is_none() {
            let push = tokio::time::timeout_at(deadline, pushes.recv())
                .await
                .map_err(|_| {
                    format!("no tool.result for step {step_id} within {TOOL_RESULT_TIMEOUT:?}")
                })?
                .ok_or_else(|| "agent stream closed".to_owned())?;
            match push.0.as_str() {
                "execution.cancelled" => {
                    return Err(format!(
                        "execution {} cancelled by the kernel",
                        self.execution_id
                    ));
                }
                "tool.result" => {
                    let pushed_step = push
                        .1
                        .get("step_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    if pushed_step == step_id {
                        result = Some(push.1);
                    } else {
                        early_results.insert(pushed_step, push.1);
                    }
                }
                _ => {}
            }
        }
        let result = result.unwrap_or_default();
        match result.get("status").and_then(Value::as_str) {
            Some("failed") => Err(format!(
                "remote step {step_id} failed: {}",
                result.get("error").unwrap_or(&Value::Null)
            )),
            _ => Ok(()),
        }
    }
}
