//! The pure half of `keel runner --exec`: the job a kernel assigns (`job.assigned`), the line
//! a worker reads on stdin, the line it answers on stdout, and how a worker's ending becomes
//! the runner result posted to `POST /v0/runners/{id}/results` (WIRE.md §11.2, §13.2).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Error recorded when a worker reports a failure without a message.
pub const NO_MESSAGE: &str = "tool failed without a message";

/// A job as the kernel sends it in `job.assigned`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Job {
    /// Job id (`id` on the wire).
    pub id: String,
    /// Execution the step belongs to.
    pub execution_id: String,
    /// Step the job runs.
    pub step_id: String,
    /// Tool to run.
    pub tool_id: String,
    /// Attempt number, from 1.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// Tool arguments (any JSON; `null` when absent).
    #[serde(default)]
    pub arguments: Value,
    /// When the kernel stops waiting for the result (RFC 3339), if it said.
    #[serde(default)]
    pub deadline: Option<String>,
    /// Key of the logical call, the same for its retries, runner failovers and re-runs
    /// (Keel kernels send it; absent from older ones).
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Environment variable that gives a worker its job's idempotency key.
pub const IDEMPOTENCY_KEY_ENV: &str = "KEEL_IDEMPOTENCY_KEY";

fn first_attempt() -> u32 {
    1
}

/// A `job.cancelled` notice: the step of a job ended by another path.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Cancellation {
    /// The job to stop.
    pub job_id: String,
    /// Why the step ended (`cancelled`, `timeout`, …).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Parses `job.assigned` data. The ids are required; a job without them cannot be answered.
pub fn parse_job(data: &str) -> Result<Job, String> {
    let job: Job = serde_json::from_str(data).map_err(|error| error.to_string())?;
    for (name, value) in [
        ("id", &job.id),
        ("execution_id", &job.execution_id),
        ("step_id", &job.step_id),
        ("tool_id", &job.tool_id),
    ] {
        if value.is_empty() {
            return Err(format!("{name} is empty"));
        }
    }
    Ok(job)
}

/// Returns the line written to a worker's stdin, newline included.
pub fn job_line(job: &Job) -> Vec<u8> {
    let line = serde_json::json!({
        "job_id": job.id,
        "execution_id": job.execution_id,
        "step_id": job.step_id,
        "tool_id": job.tool_id,
        "arguments": job.arguments,
        "attempt": job.attempt,
        "deadline": job.deadline,
    });
    let mut line = line;
    if let Some(key) = &job.idempotency_key {
        line["idempotency_key"] = Value::from(key.as_str());
    }
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// The line a worker writes on stdout.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResultLine {
    /// Whether the tool succeeded.
    pub success: bool,
    /// The tool's result (success) or extra detail (failure).
    #[serde(default)]
    pub data: Option<Value>,
    /// What went wrong (failure).
    #[serde(default)]
    pub error: Option<String>,
    /// Whether the kernel may run the step again (failure).
    #[serde(default)]
    pub retryable: bool,
    /// What the call cost, passed on to the kernel as it is (e.g. `{"usd": 0.01}`).
    #[serde(default)]
    pub cost: Option<Value>,
}

/// Reads a worker's stdout: exactly one non-blank line holding a [`ResultLine`] object.
pub fn parse_result(stdout: &[u8]) -> Result<ResultLine, String> {
    let text = std::str::from_utf8(stdout).map_err(|_| "stdout is not UTF-8".to_owned())?;
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let Some(line) = lines.next() else {
        return Err("no result line".to_owned());
    };
    if lines.next().is_some() {
        return Err("more than one line on stdout".to_owned());
    }
    let value: Value =
        serde_json::from_str(line).map_err(|error| format!("invalid result line: {error}"))?;
    // Deserialising into the struct directly would also accept an array such as `[true]`.
    if !value.is_object() {
        return Err("the result line is not a JSON object".to_owned());
    }
    let line: ResultLine =
        serde_json::from_value(value).map_err(|error| format!("invalid result line: {error}"))?;
    // The kernel refuses a result whose cost it cannot count; a bad cost fails the attempt here.
    if let Some(cost) = &line.cost {
        keel_actors::guardrails::budget::parse_cost(cost)
            .map_err(|problem| format!("invalid result line: {problem}"))?;
    }
    Ok(line)
}

/// How a worker ended, as far as the result is concerned.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// The worker exited (or was killed by a signal it did not get from the runner).
    Exited {
        /// `exit status 3`, `killed by signal 9`: for messages.
        status: String,
        /// Whether the exit status was 0.
        ok: bool,
    },
    /// The runner killed it: the job's deadline or the runner's wall-time limit passed.
    TimedOut(String),
    /// The runner killed it: stdout grew past the limit.
    OutputTooLarge(usize),
    /// The worker could not be started.
    SpawnFailed(String),
    /// The runner is stopping and killed it.
    ShuttingDown,
}

/// The body of a runner result, without the ids.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// Whether the tool succeeded.
    pub success: bool,
    /// Result data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Failure message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Sent only when true, as the SDK does.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retryable: bool,
    /// Cost reported by the worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Value>,
}

impl Outcome {
    /// A failure with `message`.
    pub fn failure(message: String, retryable: bool) -> Self {
        Self {
            success: false,
            data: None,
            error: Some(message),
            retryable,
            cost: None,
        }
    }

    /// Returns the JSON body for `POST /v0/runners/{id}/results`.
    pub fn body(&self, job: &Job, consumer_id: &str) -> Value {
        let mut body = Map::new();
        body.insert("job_id".into(), Value::String(job.id.clone()));
        body.insert(
            "execution_id".into(),
            Value::String(job.execution_id.clone()),
        );
        body.insert("step_id".into(), Value::String(job.step_id.clone()));
        body.insert("consumer_id".into(), Value::String(consumer_id.to_owned()));
        if let Ok(Value::Object(fields)) = serde_json::to_value(self) {
            body.extend(fields);
        }
        Value::Object(body)
    }
}

/// Turns a worker's ending into the result to post. A worker failure (no line, garbage, a
/// crash, a kill) is retryable when `worker_failures_retryable`; a result line decides for
/// itself, whatever the exit status.
pub fn outcome(
    ending: &Ending,
    stdout: &[u8],
    stderr_tail: &str,
    worker_failures_retryable: bool,
) -> Outcome {
    let fail =
        |what: String| Outcome::failure(with_stderr(what, stderr_tail), worker_failures_retryable);
    match ending {
        Ending::TimedOut(why) => fail(format!("worker killed: {why}")),
        Ending::OutputTooLarge(limit) => fail(format!(
            "worker killed: output exceeded the limit of {limit} bytes"
        )),
        Ending::SpawnFailed(error) => fail(format!("cannot start the worker: {error}")),
        Ending::ShuttingDown => Outcome::failure(
            "worker killed: the runner is shutting down".to_owned(),
            true,
        ),
        Ending::Exited { status, ok } => {
            if stdout.iter().all(u8::is_ascii_whitespace) {
                let how = if *ok {
                    "worker exited".to_owned()
                } else {
                    format!("worker ended with {status}")
                };
                return fail(format!("{how} without a result line"));
            }
            match parse_result(stdout) {
                Ok(line) => from_line(line),
                Err(problem) => fail(format!(
                    "worker ended with {status} and an unusable stdout ({problem}): {}",
                    preview(stdout)
                )),
            }
        }
    }
}

/// Shape of a valid result line.
fn from_line(line: ResultLine) -> Outcome {
    if line.success {
        Outcome {
            success: true,
            data: line.data,
            error: None,
            retryable: false,
            cost: line.cost,
        }
    } else {
        let error = line
            .error
            .filter(|error| !error.trim().is_empty())
            .unwrap_or_else(|| NO_MESSAGE.to_owned());
        Outcome {
            success: false,
            data: line.data,
            error: Some(error),
            retryable: line.retryable,
            cost: line.cost,
        }
    }
}

/// Appends the stderr tail to a failure message.
fn with_stderr(message: String, stderr_tail: &str) -> String {
    let tail = stderr_tail.trim();
    if tail.is_empty() {
        message
    } else {
        format!("{message}; stderr: {tail}")
    }
}

/// Longest part of a bad stdout quoted in a failure message.
const PREVIEW_CHARS: usize = 200;

/// Returns the start of a worker's stdout for a message.
fn preview(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    let mut cut: String = text.chars().take(PREVIEW_CHARS).collect();
    if text.chars().count() > PREVIEW_CHARS {
        cut.push('…');
    }
    format!("{cut:?}")
}
