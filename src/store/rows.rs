//! Row shapes of the `events`, `executions` and `steps` tables and their conversions to and from
//! the storage port's types. The SQL adapters read rows back into these records with
//! `query_as` (writes bind the commits' own fields, encoded with the helpers below); nothing
//! outside `src/store/` sees them.
//!
//! Values are kept in portable shapes: times as RFC 3339 text with exactly six fractional digits
//! and a `Z` suffix (so text order is time order), JSON as text, statuses as their wire names.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use keel_actors::error::StoreError;
use keel_actors::events::{Event, EventBody};
use keel_actors::ids::{
    AgentId, ConsumerId, ExecutionId, JobId, RunnerId, SessionId, StepId, ToolId,
};
use keel_actors::status::{ExecutionStatus, StepStatus};
use keel_actors::store::{ExecutionRow, StepRow};
use keel_actors::time::Timestamp;

/// Columns of `events` in the shape [`EventRecord`] reads.
pub(crate) const EVENT_COLUMNS: &str = "id, execution_id, sequence, step_id, type AS event_type, \
     schema_version, timestamp, payload, causation_id, correlation_id, idempotency_key, principal";

/// Columns of `executions` in the shape [`ExecutionRecord`] reads.
pub(crate) const EXECUTION_COLUMNS: &str = "id, agent_id, status, labels, input, output, \
     created_at, updated_at, session_id, consumer_id, last_sequence";

/// Columns of `steps` in the shape [`StepRecord`] reads.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const STEP_COLUMNS: &str = "id, execution_id, tool_id, status, attempt, max_attempts, \
     remote, job_id, runner_id, deadline, updated_at";

/// One row of `events` (without `position`, which the database assigns). Fields mirror the
/// columns of the same names; `event_type` reads `type`.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub(crate) struct EventRecord {
    pub id: String,
    pub execution_id: String,
    pub sequence: i64,
    pub step_id: Option<String>,
    pub event_type: String,
    pub schema_version: i64,
    pub timestamp: String,
    pub payload: String,
    pub causation_id: String,
    pub correlation_id: String,
    pub idempotency_key: Option<String>,
    pub principal: Option<String>,
}

impl EventRecord {
    /// Rebuilds the event this record stores.
    pub fn into_event(self) -> Result<Event, StoreError> {
        let payload = decode_json("events.payload", &self.payload)?;
        let body = EventBody::from_parts(&self.event_type, payload).map_err(|error| {
            StoreError::Internal(format!(
                "event {} of type {} does not decode: {error}",
                self.id, self.event_type
            ))
        })?;
        Ok(Event {
            timestamp: parse_time("events.timestamp", &self.timestamp)?,
            id: self.id,
            execution_id: ExecutionId::new(self.execution_id),
            step_id: self.step_id.map(StepId::new),
            body,
            schema_version: self.schema_version,
            causation_id: self.causation_id,
            correlation_id: self.correlation_id,
            idempotency_key: self.idempotency_key,
            sequence: self.sequence,
            principal: self.principal.map(std::sync::Arc::from),
        })
    }
}

/// One row of `executions`. Fields mirror the columns of the same names.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub(crate) struct ExecutionRecord {
    pub id: String,
    pub agent_id: String,
    pub status: String,
    pub labels: Option<String>,
    pub input: String,
    pub output: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub session_id: Option<String>,
    pub consumer_id: Option<String>,
    pub last_sequence: i64,
}

impl ExecutionRecord {
    /// Rebuilds the projection row this record stores.
    pub fn into_row(self) -> Result<ExecutionRow, StoreError> {
        let status = self.status.parse::<ExecutionStatus>().map_err(|value| {
            StoreError::Internal(format!(
                "execution {} has invalid status {value:?}",
                self.id
            ))
        })?;
        let labels = match &self.labels {
            Some(text) => Some(Arc::new(decode_labels(text)?)),
            None => None,
        };
        let output = match &self.output {
            Some(text) => Some(decode_json("executions.output", text)?),
            None => None,
        };
        Ok(ExecutionRow {
            agent_id: AgentId::new(self.agent_id),
            status,
            labels,
            input: Arc::new(decode_json("executions.input", &self.input)?),
            output,
            created_at: parse_time("executions.created_at", &self.created_at)?,
            updated_at: parse_time("executions.updated_at", &self.updated_at)?,
            session_id: self.session_id.map(SessionId::new),
            consumer_id: self.consumer_id.map(ConsumerId::new),
            last_sequence: self.last_sequence,
            id: ExecutionId::new(self.id),
        })
    }
}

/// One row of `steps`. Fields mirror the columns of the same names.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub(crate) struct StepRecord {
    pub id: String,
    pub execution_id: String,
    pub tool_id: String,
    pub status: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub remote: bool,
    pub job_id: Option<String>,
    pub runner_id: Option<String>,
    pub deadline: Option<String>,
    pub updated_at: String,
}

impl StepRecord {
    /// Rebuilds the projection row this record stores.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn into_step(self) -> Result<StepRow, StoreError> {
        let status = self.status.parse::<StepStatus>().map_err(|value| {
            StoreError::Internal(format!("step {} has invalid status {value:?}", self.id))
        })?;
        let deadline = match &self.deadline {
            Some(text) => Some(parse_time("steps.deadline", text)?),
            None => None,
        };
        Ok(StepRow {
            execution_id: ExecutionId::new(self.execution_id),
            tool_id: ToolId::new(self.tool_id),
            status,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            remote: self.remote,
            job_id: self.job_id.map(JobId::new),
            runner_id: self.runner_id.map(RunnerId::new),
            deadline,
            updated_at: parse_time("steps.updated_at", &self.updated_at)?,
            id: StepId::new(self.id),
        })
    }
}

/// Serializes the payload of an event body straight from the typed body. The body serializes
/// as `{"type":"<type>","payload":<payload>}` (adjacently tagged), so the payload is that text
/// between the fixed prefix and the closing brace; no JSON tree is built on the way.
pub(crate) fn encode_payload(body: &EventBody) -> Result<String, StoreError> {
    let mut text = encode_json("events.payload", body)?;
    let head = br#"{"type":""#;
    let middle = br#"","payload":"#;
    let type_name = body.type_name().as_bytes();
    let prefix_len = head.len() + type_name.len() + middle.len();
    let bytes = text.as_bytes();
    // Every byte checked here is ASCII, so both cuts below fall on character boundaries.
    let framed = bytes.len() > prefix_len
        && bytes.ends_with(b"}")
        && bytes.starts_with(head)
        && bytes[head.len()..].starts_with(type_name)
        && bytes[head.len() + type_name.len()..].starts_with(middle);
    if !framed {
        // Not the shape above (a payload-less variant): take the slow, general path.
        return encode_json("events.payload", &body.payload());
    }
    text.truncate(text.len() - 1);
    text.drain(..prefix_len);
    Ok(text)
}

/// Serializes a value stored in a JSON text column.
pub(crate) fn encode_json<T: serde::Serialize>(
    column: &str,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|error| StoreError::Internal(format!("{column} does not encode: {error}")))
}

/// Parses a JSON text column.
fn decode_json(column: &str, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|error| StoreError::Internal(format!("{column} is not valid json: {error}")))
}

/// Parses the labels column, a JSON object of strings.
pub(crate) fn decode_labels(text: &str) -> Result<BTreeMap<String, String>, StoreError> {
    serde_json::from_str(text).map_err(|error| {
        StoreError::Internal(format!("executions.labels is not a string map: {error}"))
    })
}

/// Parses a stored RFC 3339 time.
pub(crate) fn parse_time(column: &str, text: &str) -> Result<Timestamp, StoreError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|parsed| parsed.with_timezone(&chrono::Utc))
        .map_err(|error| {
            StoreError::Internal(format!(
                "{column} {text:?} is not an rfc 3339 time: {error}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The payload cut from the typed body's text is the payload the JSON tree holds, for
    /// object payloads with nested JSON, strings that need escaping, and the empty payload.
    #[test]
    fn encode_payload_matches_the_payload_of_the_json_tree() {
        let bodies = [
            EventBody::ExecutionCreated {
                agent_id: "agent \"a\" é".into(),
                input: json!({"z": [1, 2, {"}": "{\"type\":"}], "a": null}),
                labels: json!({"k": "v"}),
                priority: 0,
                traceparent: None,
                created_by: None,
                on_behalf_of: None,
            },
            EventBody::ExecutionFailed {
                error: "payload\":}".into(),
            },
            EventBody::StepTimedOut {},
            EventBody::ExecutionCompleted {
                output: json!("done"),
            },
        ];
        for body in bodies {
            let encoded = encode_payload(&body).expect("encodes");
            let decoded: Value = serde_json::from_str(&encoded).expect("valid json");
            assert_eq!(decoded, body.payload(), "{encoded}");
            let rebuilt = EventBody::from_parts(body.type_name(), decoded).expect("decodes");
            assert_eq!(rebuilt, body);
        }
    }

    /// The fast path is taken: fields keep their declaration order (a JSON tree sorts them).
    #[test]
    fn encode_payload_writes_the_typed_body_without_a_json_tree() {
        let started = EventBody::ExecutionStarted {
            session_id: "s".into(),
            consumer_id: "c".into(),
        };
        assert_eq!(
            encode_payload(&started).expect("encodes"),
            r#"{"session_id":"s","consumer_id":"c"}"#
        );
        assert_eq!(
            encode_payload(&EventBody::StepTimedOut {}).expect("encodes"),
            "{}"
        );
    }
}
