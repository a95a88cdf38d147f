//! The envelope of an event: what the log stores and the wire carries around an [`EventBody`],
//! and [`seal`], which gives new events their envelopes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{EventBody, SCHEMA_VERSION};
use crate::ids::{ExecutionId, StepId};
use crate::time::{self, Timestamp};

/// One event as stored in the log and sent on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// UUIDv7 of the event.
    pub id: String,
    /// Execution it belongs to.
    pub execution_id: ExecutionId,
    /// Step it concerns, if step-scoped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    /// Type and payload.
    #[serde(flatten)]
    pub body: EventBody,
    /// Payload schema version (always [`SCHEMA_VERSION`]).
    pub schema_version: i64,
    /// When it was recorded.
    #[serde(with = "time::serde_micros")]
    pub timestamp: Timestamp,
    /// Event that caused it.
    pub causation_id: String,
    /// Shared by all events of one atomic batch.
    pub correlation_id: String,
    /// Idempotency key of the intent that produced it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Position within the execution, from 1, contiguous.
    pub sequence: i64,
    /// Who caused it: a key name, `admin` (the bearer token), `anonymous` (a kernel without
    /// authentication) or `system` (timers, recovery, expiry). Keel's addition; absent in
    /// events recorded before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Arc<str>>,
}

/// An event the state machine wants to append, before it gets its envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// Step it concerns, if step-scoped.
    pub step_id: Option<StepId>,
    /// Type and payload.
    pub body: EventBody,
    /// Idempotency key of the intent that produced it.
    pub idempotency_key: Option<String>,
}

impl NewEvent {
    /// Returns an event not tied to a step.
    pub fn execution(body: EventBody) -> Self {
        Self {
            step_id: None,
            body,
            idempotency_key: None,
        }
    }

    /// Returns an event about one step.
    pub fn step(step_id: &StepId, body: EventBody) -> Self {
        Self {
            step_id: Some(step_id.clone()),
            body,
            idempotency_key: None,
        }
    }

    /// Returns the same event carrying an idempotency key.
    pub fn with_key(mut self, key: Option<String>) -> Self {
        self.idempotency_key = key;
        self
    }
}

/// Wraps new events into envelopes: contiguous sequences after `last_sequence`, one
/// correlation id for the batch, each event caused by the previous one.
pub fn seal(
    execution_id: &ExecutionId,
    last_sequence: i64,
    timestamp: Timestamp,
    causation: Option<&str>,
    new_events: Vec<NewEvent>,
) -> Vec<Event> {
    let mut sealed = Vec::with_capacity(new_events.len());
    let mut previous: Option<String> = causation.map(str::to_owned);
    let mut correlation: Option<String> = None;
    for (index, new_event) in new_events.into_iter().enumerate() {
        let id = crate::ids::new_uuid_v7();
        let correlation_id = correlation.get_or_insert_with(|| id.clone()).clone();
        let causation_id = previous.clone().unwrap_or_else(|| id.clone());
        previous = Some(id.clone());
        sealed.push(Event {
            id,
            execution_id: execution_id.clone(),
            step_id: new_event.step_id,
            body: new_event.body,
            schema_version: SCHEMA_VERSION,
            timestamp,
            causation_id,
            correlation_id,
            idempotency_key: new_event.idempotency_key,
            sequence: last_sequence + 1 + index as i64,
            principal: None,
        });
    }
    sealed
}
