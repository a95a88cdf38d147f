//! Client load for the failure checks (issue check 5): tasks that create executions with an
//! `Idempotency-Key` and signal them, against a kernel picked at random for every request,
//! retrying a 503 after its `Retry-After` (on another random kernel, the same key). At the end
//! [`Tally::verify`] checks the database: every request answered 2xx is in the log exactly once.
//!
//! A refused connection (nothing listens: the kernel is restarting) is not an answer; the
//! client picks another kernel, as a load balancer would. Every other transport error (a
//! connection dropped with a request in flight) and every status other than 2xx and 503 with
//! `Retry-After` is an error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::task::JoinHandle;

use super::harness::Database;

/// Longest time one operation is retried before it counts as failed.
const OPERATION_LIMIT: Duration = Duration::from_secs(12);

/// The kernel URLs requests go to; the test replaces one when a kernel moves.
pub type Targets = Arc<Mutex<Vec<String>>>;

/// What the clients saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Creations answered 2xx: `(idempotency key, execution id)`.
    pub created: Vec<(String, String)>,
    /// Signals answered 2xx: `(execution id, tag)`.
    pub signalled: Vec<(String, String)>,
    /// Operations that got no 2xx within [`OPERATION_LIMIT`].
    pub failed_operations: usize,
    /// Answers that were 2xx.
    pub ok_answers: usize,
    /// Answers that were 503 with `Retry-After`.
    pub unavailable_answers: usize,
    /// Connections refused (the kernel was not listening).
    pub refused: usize,
    /// Requests that met a pooled keep-alive connection a stopping kernel closed before
    /// reading them (hyper's `IncompleteMessage`, no answer at all): retried, as HTTP clients
    /// (the rebuno SDK among them) retry a request the server never answered.
    pub closed: usize,
    /// Anything else: the status or error, with the kernel.
    pub errors: Vec<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.created.extend(other.created);
        self.signalled.extend(other.signalled);
        self.failed_operations += other.failed_operations;
        self.ok_answers += other.ok_answers;
        self.unavailable_answers += other.unavailable_answers;
        self.refused += other.refused;
        self.closed += other.closed;
        self.errors.extend(other.errors);
    }

    /// Operations that ended 2xx.
    pub fn operations_ok(&self) -> usize {
        self.created.len() + self.signalled.len()
    }

    /// Share of the operations that ended 2xx.
    pub fn ok_share(&self) -> f64 {
        let total = self.operations_ok() + self.failed_operations;
        if total == 0 {
            0.0
        } else {
            self.operations_ok() as f64 / total as f64
        }
    }

    /// Share of all answers that were 2xx (503s count against it).
    pub fn ok_answer_share(&self) -> f64 {
        let total = self.ok_answers + self.unavailable_answers + self.errors.len();
        if total == 0 {
            0.0
        } else {
            self.ok_answers as f64 / total as f64
        }
    }

    /// Checks the log: each creation answered 2xx is the one execution created with its key,
    /// and each signal answered 2xx was recorded exactly once.
    pub async fn verify(&self, database: &Database) {
        for (key, id) in &self.created {
            let found: Vec<String> = sqlx::query_scalar(
                "SELECT execution_id FROM events \
                 WHERE type = 'execution.created' AND idempotency_key = $1",
            )
            .bind(key)
            .fetch_all(&database.pool)
            .await
            .expect("read creations");
            assert_eq!(found, vec![id.clone()], "creation {key} in the log once");
        }
        for (id, tag) in &self.signalled {
            let count: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM events WHERE execution_id = $1 \
                 AND type = 'signal.received' AND payload -> 'payload' ->> 'tag' = $2",
            )
            .bind(id)
            .bind(tag)
            .fetch_one(&database.pool)
            .await
            .expect("read signals");
            assert_eq!(count, 1, "signal {tag} to {id} in the log once");
        }
    }
}

/// Running client tasks.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Tally>>,
}

impl Load {
    /// Starts `clients` tasks against `targets`.
    pub fn start(targets: Targets, clients: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..clients)
            .map(|client| tokio::spawn(run(client, targets.clone(), stop.clone())))
            .collect();
        Self { stop, tasks }
    }

    /// Stops the clients (each finishes its operation) and returns what they saw.
    pub async fn finish(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        for task in self.tasks {
            tally.merge(task.await.expect("client task"));
        }
        tally
    }
}

/// One request's outcome.
enum Answer {
    Ok(serde_json::Value),
    /// 503 with `Retry-After` (seconds).
    Unavailable(u64),
    Refused,
    /// The connection was closed before any answer (see [`Tally::closed`]).
    Closed,
    Error(String),
}

async fn send(
    http: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &serde_json::Value,
) -> Answer {
    let mut request = http.post(url).json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) if error.is_connect() => return Answer::Refused,
        Err(error) if format!("{error:?}").contains("IncompleteMessage") => return Answer::Closed,
        Err(error) => return Answer::Error(format!("{url}: {error:?}")),
    };
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    match (status, retry) {
        (200..=299, _) => Answer::Ok(body),
        (503, Some(seconds)) => Answer::Unavailable(seconds),
        _ => Answer::Error(format!("{url}: {status} {body}")),
    }
}

/// Sends `body(try)` to `path` on random kernels until a 2xx, an error or the limit; returns
/// the answer and the try it answered.
async fn operation(
    http: &reqwest::Client,
    targets: &Targets,
    path: &str,
    key: Option<&str>,
    body: impl Fn(usize) -> serde_json::Value,
    tally: &mut Tally,
) -> Option<(serde_json::Value, usize)> {
    let deadline = tokio::time::Instant::now() + OPERATION_LIMIT;
    let mut attempt = 0;
    while tokio::time::Instant::now() < deadline {
        attempt += 1;
        let target = {
            let targets = targets.lock().expect("targets");
            targets[rand::rng().random_range(0..targets.len())].clone()
        };
        match send(http, &format!("{target}{path}"), key, &body(attempt)).await {
            Answer::Ok(body) => {
                tally.ok_answers += 1;
                return Some((body, attempt));
            }
            Answer::Unavailable(seconds) => {
                tally.unavailable_answers += 1;
                tokio::time::sleep(Duration::from_secs(seconds.min(2))).await;
            }
            Answer::Refused => {
                tally.refused += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Answer::Closed => {
                tally.closed += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Answer::Error(error) => {
                tally.errors.push(error);
                return None;
            }
        }
    }
    None
}

async fn run(client: usize, targets: Targets, stop: Arc<AtomicBool>) -> Tally {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let mut tally = Tally::default();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let signal_to = if tally.created.is_empty() || n.is_multiple_of(2) {
            None
        } else {
            let index = rand::rng().random_range(0..tally.created.len());
            Some(tally.created[index].1.clone())
        };
        match signal_to {
            None => {
                let key = format!("load-{client}-{n}");
                let body = serde_json::json!({"agent_id": "load-agent", "input": {"key": key}});
                let created = operation(
                    &http,
                    &targets,
                    "/v0/executions",
                    Some(&key),
                    |_| body.clone(),
                    &mut tally,
                )
                .await;
                match created.as_ref().and_then(|(body, _)| body["id"].as_str()) {
                    Some(id) => tally.created.push((key, id.to_owned())),
                    None => tally.failed_operations += 1,
                }
            }
            Some(id) => {
                // A signal has no idempotency key: each try carries its own tag, and only the
                // tag of the try answered 2xx must be in the log once.
                let tag = |attempt: usize| format!("s-{client}-{n}-{attempt}");
                let body = |attempt: usize| serde_json::json!({"signal_type": "load", "payload": {"tag": tag(attempt)}});
                let path = format!("/v0/executions/{id}/signal");
                match operation(&http, &targets, &path, None, body, &mut tally).await {
                    Some((_, attempt)) => tally.signalled.push((id, tag(attempt))),
                    None => tally.failed_operations += 1,
                }
            }
        }
    }
    tally
}
