//! Load during an outage: creators post executions, an agent consumer plays each assigned
//! execution (one local tool call with an idempotency key, its step result, `complete`),
//! retrying every write the kernel answered 503 until it is acknowledged. A [`Ledger`] keeps
//! what was acknowledged (2xx) and every answer that is neither 2xx nor 503.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Agent id of the load's executions.
pub const LOAD_AGENT: &str = "outage-load";
/// Pause between two creates of one creator, and between a 503 and its retry.
const PACE: Duration = Duration::from_millis(20);

/// What the kernel answered.
#[derive(Default)]
pub struct Ledger {
    /// Acknowledged creates.
    pub created: BTreeSet<String>,
    /// `(execution, step)` of acknowledged `invoke_tool` intents.
    pub intents: Vec<(String, String)>,
    /// Executions whose `complete` was acknowledged.
    pub completed: BTreeSet<String>,
    /// Answers that were 503 `SERVICE_UNAVAILABLE`.
    pub unavailable: usize,
    /// Answers that were neither 2xx nor a 503 envelope (must stay empty).
    pub violations: Vec<String>,
}

/// The ledger, shared by the load's tasks.
pub type SharedLedger = Arc<Mutex<Ledger>>;

/// Running load tasks.
pub struct Load {
    /// What was acknowledged.
    pub ledger: SharedLedger,
    stop_creating: CancellationToken,
    stop_all: CancellationToken,
    tasks: JoinSet<()>,
}

impl Load {
    /// Starts two creators and one agent consumer against `base_url`.
    pub fn start(client: &reqwest::Client, base_url: &str) -> Self {
        let ledger = SharedLedger::default();
        let stop_creating = CancellationToken::new();
        let stop_all = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for _ in 0..2 {
            tasks.spawn(creator(
                client.clone(),
                base_url.to_owned(),
                ledger.clone(),
                stop_creating.clone(),
            ));
        }
        tasks.spawn(agent(
            client.clone(),
            base_url.to_owned(),
            ledger.clone(),
            stop_all.clone(),
        ));
        Self {
            ledger,
            stop_creating,
            stop_all,
            tasks,
        }
    }

    /// Stops creating; the agent keeps finishing what was created.
    pub fn stop_creating(&self) {
        self.stop_creating.cancel();
    }

    /// Stops every task, waits for them and returns what they recorded.
    pub async fn stop(mut self) -> Ledger {
        self.stop_creating.cancel();
        self.stop_all.cancel();
        while self.tasks.join_next().await.is_some() {}
        std::mem::take(&mut *self.ledger.lock().expect("ledger"))
    }
}

/// How one write ended.
enum Answer {
    /// 2xx with this body.
    Acknowledged(Value),
    /// 503 `SERVICE_UNAVAILABLE`: retry.
    Unavailable,
    /// Anything else (recorded as a violation unless the caller expects it).
    Other(StatusCode, Value),
}

/// POSTs `body` and classifies the answer; a transport failure (including the client's
/// request timeout) is a violation.
async fn post(client: &reqwest::Client, url: &str, body: &Value, ledger: &SharedLedger) -> Answer {
    let response = match client.post(url).json(body).send().await {
        Ok(response) => response,
        Err(error) => {
            let mut ledger = ledger.lock().expect("ledger");
            ledger.violations.push(format!("POST {url}: {error}"));
            return Answer::Other(StatusCode::INTERNAL_SERVER_ERROR, Value::Null);
        }
    };
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Answer::Acknowledged(body)
    } else if status == StatusCode::SERVICE_UNAVAILABLE && body["code"] == "SERVICE_UNAVAILABLE" {
        ledger.lock().expect("ledger").unavailable += 1;
        Answer::Unavailable
    } else {
        Answer::Other(status, body)
    }
}

/// Records an unexpected answer.
fn violation(ledger: &SharedLedger, what: &str, status: StatusCode, body: &Value) {
    let mut ledger = ledger.lock().expect("ledger");
    ledger.violations.push(format!("{what}: {status} {body}"));
}

/// Creates executions until stopped.
async fn creator(
    client: reqwest::Client,
    base_url: String,
    ledger: SharedLedger,
    stop: CancellationToken,
) {
    let url = format!("{base_url}/v0/executions");
    let mut index = 0_u64;
    while !stop.is_cancelled() {
        index += 1;
        let body = json!({ "agent_id": LOAD_AGENT, "input": { "n": index } });
        match post(&client, &url, &body, &ledger).await {
            Answer::Acknowledged(execution) => {
                if let Some(id) = execution["id"].as_str() {
                    ledger.lock().expect("ledger").created.insert(id.to_owned());
                }
            }
            Answer::Unavailable => {}
            Answer::Other(status, body) => violation(&ledger, "create", status, &body),
        }
        tokio::time::sleep(PACE).await;
    }
}

/// One agent consumer: plays every assigned execution until stopped, reconnecting its stream
/// when it ends.
async fn agent(
    client: reqwest::Client,
    base_url: String,
    ledger: SharedLedger,
    stop: CancellationToken,
) {
    let mut scripts = JoinSet::new();
    let stream_url =
        format!("{base_url}/v0/agents/stream?agent_id={LOAD_AGENT}&consumer_id=outage-consumer");
    while !stop.is_cancelled() {
        let Ok(response) = client.get(&stream_url).send().await else {
            tokio::time::sleep(PACE).await;
            continue;
        };
        let mut messages = response.bytes_stream().eventsource();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                () = stop.cancelled() => break,
            };
            let Some(Ok(message)) = message else { break };
            if message.event != "execution.assigned" {
                continue;
            }
            let Ok(data) = serde_json::from_str::<Value>(&message.data) else {
                continue;
            };
            let (Some(execution), Some(session)) =
                (data["execution_id"].as_str(), data["session_id"].as_str())
            else {
                continue;
            };
            scripts.spawn(script(
                client.clone(),
                base_url.clone(),
                execution.to_owned(),
                session.to_owned(),
                ledger.clone(),
                stop.clone(),
            ));
        }
    }
    scripts.abort_all();
}

/// How a retried write ended.
enum Outcome {
    /// Acknowledged with this body.
    Acknowledged(Value),
    /// A retry got 409: an earlier attempt answered 503 but was committed.
    Committed,
    /// Stopped, or an unexpected answer (recorded).
    GaveUp,
}

/// Plays one execution. Every write is retried after a 503; a 409 after a 503 means the
/// earlier attempt was committed although its answer said otherwise, which is allowed.
async fn script(
    client: reqwest::Client,
    base_url: String,
    execution: String,
    session: String,
    ledger: SharedLedger,
    stop: CancellationToken,
) {
    let intent_url = format!("{base_url}/v0/agents/intent");
    let invoke = json!({
        "execution_id": execution, "session_id": session,
        "intent": { "type": "invoke_tool", "tool_id": "outage.tool", "arguments": {},
                    "idempotency_key": format!("{execution}:{session}") },
    });
    // The idempotency key makes a retry of a committed intent answer the same step.
    let Outcome::Acknowledged(answer) =
        retry(&client, &intent_url, &invoke, &ledger, &stop, "intent").await
    else {
        return;
    };
    let Some(step) = answer["step_id"]
        .as_str()
        .filter(|_| answer["accepted"] == true)
    else {
        violation(&ledger, "intent not accepted", StatusCode::OK, &answer);
        return;
    };
    ledger
        .lock()
        .expect("ledger")
        .intents
        .push((execution.clone(), step.to_owned()));
    let result = json!({
        "execution_id": execution, "session_id": session, "step_id": step,
        "success": true, "data": { "ok": true },
    });
    let result_url = format!("{base_url}/v0/agents/step-result");
    if let Outcome::GaveUp = retry(&client, &result_url, &result, &ledger, &stop, "result").await {
        return;
    }
    let complete = json!({
        "execution_id": execution, "session_id": session,
        "intent": { "type": "complete", "output": { "ok": true } },
    });
    if let Outcome::Acknowledged(_) =
        retry(&client, &intent_url, &complete, &ledger, &stop, "complete").await
    {
        ledger.lock().expect("ledger").completed.insert(execution);
    }
}

/// POSTs until acknowledged, retrying after each 503.
async fn retry(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    ledger: &SharedLedger,
    stop: &CancellationToken,
    what: &str,
) -> Outcome {
    let mut retried = false;
    while !stop.is_cancelled() {
        match post(client, url, body, ledger).await {
            Answer::Acknowledged(answer) => return Outcome::Acknowledged(answer),
            Answer::Unavailable => retried = true,
            Answer::Other(StatusCode::CONFLICT, _) if retried => return Outcome::Committed,
            Answer::Other(status, answer) => {
                violation(ledger, what, status, &answer);
                return Outcome::GaveUp;
            }
        }
        tokio::time::sleep(PACE).await;
    }
    Outcome::GaveUp
}
