//! The column arrays a round of a commit group binds (`write.rs`): one vector per column,
//! borrowing the commits' text where it is text already.

use std::collections::HashMap;

use keel_actors::error::StoreError;
use keel_actors::store::Commit;
use keel_actors::time;

use super::super::rows::{encode_json, encode_payload};
use super::write::Unit;
use keel_actors::ids::{ConsumerId, JobId, RunnerId, SessionId};

/// The commits of the units, in group order.
fn commits<'a>(group: &'a [Commit], units: &[Unit]) -> Vec<&'a Commit> {
    let mut indexes: Vec<usize> = units
        .iter()
        .flat_map(|unit| unit.commits.iter().copied())
        .collect();
    indexes.sort_unstable();
    indexes.into_iter().map(|index| &group[index]).collect()
}

/// The epoch of each event of `units` (each unit's from `epochs`), in the order
/// [`EventColumns`] lists the events: by commit, in group order. Bound per event so the
/// statement records it without looking each event's execution up in the fence.
pub(super) fn event_epochs(group: &[Commit], units: &[Unit], epochs: &[i64]) -> Vec<i64> {
    let mut of_commit: Vec<(usize, i64)> = units
        .iter()
        .zip(epochs)
        .flat_map(|(unit, epoch)| unit.commits.iter().map(move |&index| (index, *epoch)))
        .collect();
    of_commit.sort_unstable_by_key(|(index, _)| *index);
    of_commit
        .into_iter()
        .flat_map(|(index, epoch)| std::iter::repeat_n(epoch, group[index].events.len()))
        .collect()
}

/// Projection rows, one per unit: the fields fixed at creation from its first commit (only
/// for new executions; updates never rewrite them), the others from its last.
pub(super) struct ExecutionColumns<'a> {
    pub id: Vec<&'a str>,
    pub agent_id: Vec<Option<&'a str>>,
    pub status: Vec<&'a str>,
    pub labels: Vec<Option<String>>,
    pub input: Vec<Option<String>>,
    pub output: Vec<Option<String>>,
    pub created_at: Vec<Option<String>>,
    pub updated_at: Vec<String>,
    pub session_id: Vec<Option<&'a str>>,
    pub consumer_id: Vec<Option<&'a str>>,
    pub last_sequence: Vec<i64>,
    pub previous: Vec<i64>,
}

impl<'a> ExecutionColumns<'a> {
    pub fn new(group: &'a [Commit], units: &[Unit]) -> Result<Self, StoreError> {
        let n = units.len();
        let mut columns = Self {
            id: Vec::with_capacity(n),
            agent_id: Vec::with_capacity(n),
            status: Vec::with_capacity(n),
            labels: Vec::with_capacity(n),
            input: Vec::with_capacity(n),
            output: Vec::with_capacity(n),
            created_at: Vec::with_capacity(n),
            updated_at: Vec::with_capacity(n),
            session_id: Vec::with_capacity(n),
            consumer_id: Vec::with_capacity(n),
            last_sequence: Vec::with_capacity(n),
            previous: Vec::with_capacity(n),
        };
        for unit in units {
            let (Some(&first), Some(&last)) = (unit.commits.first(), unit.commits.last()) else {
                continue;
            };
            let first = &group[first].execution;
            let last = &group[last].execution;
            columns.id.push(first.id.as_str());
            if unit.previous == 0 {
                columns.agent_id.push(Some(first.agent_id.as_str()));
                columns.labels.push(match &first.labels {
                    Some(labels) => Some(encode_json("executions.labels", labels)?),
                    None => None,
                });
                columns
                    .input
                    .push(Some(encode_json("executions.input", &first.input)?));
                columns
                    .created_at
                    .push(Some(time::format(&first.created_at)));
            } else {
                columns.agent_id.push(None);
                columns.labels.push(None);
                columns.input.push(None);
                columns.created_at.push(None);
            }
            columns.status.push(last.status.as_str());
            columns.output.push(match &last.output {
                Some(output) => Some(encode_json("executions.output", output)?),
                None => None,
            });
            columns.updated_at.push(time::format(&last.updated_at));
            columns
                .session_id
                .push(last.session_id.as_ref().map(SessionId::as_str));
            columns
                .consumer_id
                .push(last.consumer_id.as_ref().map(ConsumerId::as_str));
            columns.last_sequence.push(last.last_sequence);
            columns.previous.push(unit.previous);
        }
        Ok(columns)
    }
}

/// Label rows of the new executions (units that start at sequence 0).
pub(super) struct LabelColumns<'a> {
    pub execution_id: Vec<&'a str>,
    pub key: Vec<&'a str>,
    pub value: Vec<&'a str>,
}

impl<'a> LabelColumns<'a> {
    pub fn new(group: &'a [Commit], units: &[Unit]) -> Self {
        let mut columns = Self {
            execution_id: Vec::new(),
            key: Vec::new(),
            value: Vec::new(),
        };
        for unit in units.iter().filter(|unit| unit.previous == 0) {
            let execution = &group[unit.commits[0]].execution;
            for (key, value) in execution.labels.as_deref().into_iter().flatten() {
                columns.execution_id.push(execution.id.as_str());
                columns.key.push(key);
                columns.value.push(value);
            }
        }
        columns
    }
}

/// Events of the units' commits, in group order.
pub(super) struct EventColumns<'a> {
    pub id: Vec<&'a str>,
    pub execution_id: Vec<&'a str>,
    pub sequence: Vec<i64>,
    pub step_id: Vec<Option<&'a str>>,
    pub event_type: Vec<&'static str>,
    pub schema_version: Vec<i64>,
    pub timestamp: Vec<String>,
    pub payload: Vec<String>,
    pub causation_id: Vec<&'a str>,
    pub correlation_id: Vec<&'a str>,
    pub idempotency_key: Vec<Option<&'a str>>,
    pub principal: Vec<Option<&'a str>>,
}

impl<'a> EventColumns<'a> {
    pub fn new(group: &'a [Commit], units: &[Unit]) -> Result<Self, StoreError> {
        let commits = commits(group, units);
        let n = commits.iter().map(|commit| commit.events.len()).sum();
        let mut columns = Self {
            id: Vec::with_capacity(n),
            execution_id: Vec::with_capacity(n),
            sequence: Vec::with_capacity(n),
            step_id: Vec::with_capacity(n),
            event_type: Vec::with_capacity(n),
            schema_version: Vec::with_capacity(n),
            timestamp: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            causation_id: Vec::with_capacity(n),
            correlation_id: Vec::with_capacity(n),
            idempotency_key: Vec::with_capacity(n),
            principal: Vec::with_capacity(n),
        };
        for event in commits.iter().flat_map(|commit| &commit.events) {
            columns.id.push(&event.id);
            columns.execution_id.push(event.execution_id.as_str());
            columns.sequence.push(event.sequence);
            columns
                .step_id
                .push(event.step_id.as_ref().map(|step| step.as_str()));
            columns.event_type.push(event.body.type_name());
            columns.schema_version.push(event.schema_version);
            columns.timestamp.push(time::format(&event.timestamp));
            columns.payload.push(encode_payload(&event.body)?);
            columns.causation_id.push(&event.causation_id);
            columns.correlation_id.push(&event.correlation_id);
            columns
                .idempotency_key
                .push(event.idempotency_key.as_deref());
            columns.principal.push(event.principal.as_deref());
        }
        Ok(columns)
    }
}

/// Step rows of the units' commits; a step changed twice keeps its last state, as
/// consecutive upserts would (one statement may not upsert a row twice).
pub(super) struct StepColumns<'a> {
    pub id: Vec<&'a str>,
    pub execution_id: Vec<&'a str>,
    pub tool_id: Vec<&'a str>,
    pub status: Vec<&'a str>,
    pub attempt: Vec<i64>,
    pub max_attempts: Vec<i64>,
    pub remote: Vec<bool>,
    pub job_id: Vec<Option<&'a str>>,
    pub runner_id: Vec<Option<&'a str>>,
    pub deadline: Vec<Option<String>>,
    pub updated_at: Vec<String>,
}

impl<'a> StepColumns<'a> {
    pub fn new(group: &'a [Commit], units: &[Unit]) -> Self {
        let commits = commits(group, units);
        let mut latest: Vec<&'a keel_actors::store::StepRow> = Vec::new();
        let mut position: HashMap<&'a str, usize> = HashMap::new();
        for step in commits.iter().flat_map(|commit| &commit.steps) {
            match position.get(step.id.as_str()) {
                Some(&index) => latest[index] = step,
                None => {
                    position.insert(step.id.as_str(), latest.len());
                    latest.push(step);
                }
            }
        }
        Self {
            id: latest.iter().map(|step| step.id.as_str()).collect(),
            execution_id: latest
                .iter()
                .map(|step| step.execution_id.as_str())
                .collect(),
            tool_id: latest.iter().map(|step| step.tool_id.as_str()).collect(),
            status: latest.iter().map(|step| step.status.as_str()).collect(),
            attempt: latest.iter().map(|step| step.attempt).collect(),
            max_attempts: latest.iter().map(|step| step.max_attempts).collect(),
            remote: latest.iter().map(|step| step.remote).collect(),
            job_id: latest
                .iter()
                .map(|step| step.job_id.as_ref().map(JobId::as_str))
                .collect(),
            runner_id: latest
                .iter()
                .map(|step| step.runner_id.as_ref().map(RunnerId::as_str))
                .collect(),
            deadline: latest
                .iter()
                .map(|step| step.deadline.as_ref().map(time::format))
                .collect(),
            updated_at: latest
                .iter()
                .map(|step| time::format(&step.updated_at))
                .collect(),
        }
    }
}
