//! The line formats of `keel client --jsonl`: parsing a command line (never failing: a bad
//! line becomes an error to report), the answer and error lines, and a line reader with a
//! length limit.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::io::BufRead;

use crate::cli::CliError;

/// Operations a line may ask for.
pub const OPS: [&str; 5] = ["create", "get", "cancel", "signal", "watch"];

/// One command.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Command {
    /// `POST /v0/executions`.
    Create {
        /// Agent that runs the execution.
        agent_id: String,
        /// Input (any JSON).
        #[serde(default)]
        input: Option<Value>,
        /// Labels (the kernel checks them).
        #[serde(default)]
        labels: Option<Value>,
    },
    /// `GET /v0/executions/{id}`.
    Get {
        /// Execution id.
        id: String,
    },
    /// `POST /v0/executions/{id}/cancel`.
    Cancel {
        /// Execution id.
        id: String,
    },
    /// `POST /v0/executions/{id}/signal`.
    Signal {
        /// Execution id.
        id: String,
        /// Signal type.
        signal_type: String,
        /// Payload (any JSON).
        #[serde(default)]
        payload: Option<Value>,
    },
    /// Streams an execution's events until its terminal event.
    Watch {
        /// Execution id.
        id: String,
        /// Only events with a greater sequence.
        #[serde(default)]
        after: Option<i64>,
    },
}

impl Command {
    /// Returns the operation name.
    pub fn op(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Get { .. } => "get",
            Self::Cancel { .. } => "cancel",
            Self::Signal { .. } => "signal",
            Self::Watch { .. } => "watch",
        }
    }
}

/// A line's error before any call: code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// `INVALID_JSON`, `INVALID_COMMAND`, `UNKNOWN_OP`, `LINE_TOO_LONG`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

/// A parsed line: its `ref` (echoed on every answer), its `op` when readable, the command.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The caller's correlation value, any JSON.
    pub reference: Option<Value>,
    /// The `op` field, when it is a string.
    pub op: Option<String>,
    /// The command, or why there is none.
    pub command: Result<Command, LineError>,
}

/// Parses one line.
pub fn parse(line: &str) -> Request {
    let invalid = |code, message: String| LineError { code, message };
    let mut object = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(object)) => object,
        Ok(_) => {
            return Request {
                reference: None,
                op: None,
                command: Err(invalid(
                    "INVALID_COMMAND",
                    "a command is a JSON object".to_owned(),
                )),
            };
        }
        Err(error) => {
            return Request {
                reference: None,
                op: None,
                command: Err(invalid("INVALID_JSON", format!("not JSON: {error}"))),
            };
        }
    };
    let reference = object.remove("ref");
    let op = object.get("op").and_then(Value::as_str).map(str::to_owned);
    let command = match op.as_deref() {
        None => Err(invalid(
            "INVALID_COMMAND",
            format!("\"op\" (a string) is required: one of {}", OPS.join(", ")),
        )),
        Some(name) if !OPS.contains(&name) => Err(invalid(
            "UNKNOWN_OP",
            format!("unknown op {name:?}: one of {}", OPS.join(", ")),
        )),
        Some(_) => serde_json::from_value::<Command>(Value::Object(object))
            .map_err(|error| invalid("INVALID_COMMAND", error.to_string()))
            .and_then(|command| {
                check(command).map_err(|message| invalid("INVALID_COMMAND", message))
            }),
    };
    Request {
        reference,
        op,
        command,
    }
}

/// Rejects empty ids (they would address another route).
fn check(command: Command) -> Result<Command, String> {
    let empty = match &command {
        Command::Create { agent_id, .. } => agent_id.is_empty().then_some("agent_id"),
        Command::Get { id } | Command::Cancel { id } | Command::Watch { id, .. } => {
            id.is_empty().then_some("id")
        }
        Command::Signal {
            id, signal_type, ..
        } => {
            if id.is_empty() {
                Some("id")
            } else {
                signal_type.is_empty().then_some("signal_type")
            }
        }
    };
    match empty {
        Some(field) => Err(format!("{field} must not be empty")),
        None => Ok(command),
    }
}

/// Starts an answer line with `ref` (when given) and `op` (when known).
pub fn line(reference: Option<&Value>, op: Option<&str>) -> Map<String, Value> {
    let mut line = Map::new();
    if let Some(reference) = reference {
        line.insert("ref".to_owned(), reference.clone());
    }
    if let Some(op) = op {
        line.insert("op".to_owned(), Value::String(op.to_owned()));
    }
    line
}

/// An error line.
pub fn error_line(
    reference: Option<&Value>,
    op: Option<&str>,
    code: &str,
    message: &str,
    status: Option<u16>,
) -> Value {
    let mut line = line(reference, op);
    let mut error = json!({ "code": code, "message": message });
    if let Some(status) = status {
        error["status"] = json!(status);
    }
    line.insert("ok".to_owned(), Value::Bool(false));
    line.insert("error".to_owned(), error);
    Value::Object(line)
}

/// The error line of a failed call.
pub fn call_error_line(reference: Option<&Value>, op: &str, error: &CliError) -> Value {
    let (code, status) = match error {
        CliError::Api { status, code, .. } => (code.as_str(), Some(status.as_u16())),
        CliError::Connect { .. } => ("UNAVAILABLE", None),
        CliError::Decode(_) => ("BAD_RESPONSE", None),
        CliError::InvalidArgument { .. } => ("INVALID_COMMAND", None),
        CliError::Failed(_) | CliError::Exit(_) => ("FAILED", None),
    };
    let message = match error {
        CliError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    };
    error_line(reference, Some(op), code, &message, status)
}

/// A line read from the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// Its bytes, without the newline.
    Text(Vec<u8>),
    /// It was longer than the limit (its bytes were skipped).
    TooLong,
}

/// Reads the next line of at most `max` bytes; `None` at the end of the input. A longer line
/// is consumed up to its newline and reported as [`Line::TooLong`].
pub fn next_line(reader: &mut impl BufRead, max: usize) -> std::io::Result<Option<Line>> {
    let mut bytes = Vec::new();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(match (too_long, bytes.is_empty()) {
                (true, _) => Some(Line::TooLong),
                (false, true) => None,
                (false, false) => Some(Line::Text(bytes)),
            });
        }
        let (chunk, end) = match available.iter().position(|byte| *byte == b'\n') {
            Some(newline) => (&available[..newline], Some(newline + 1)),
            None => (available, None),
        };
        if !too_long {
            if bytes.len() + chunk.len() > max {
                too_long = true;
                bytes = Vec::new();
            } else {
                bytes.extend_from_slice(chunk);
            }
        }
        let consumed = end.unwrap_or(available.len());
        reader.consume(consumed);
        if end.is_some() {
            return Ok(Some(if too_long {
                Line::TooLong
            } else {
                Line::Text(bytes)
            }));
        }
    }
}
