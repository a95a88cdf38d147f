//! The step journal: the recorded outcomes of the tool calls that completed in earlier runs of
//! an execution, looked up by content when a re-run (after `execution.reset`) makes a call
//! again (docs/failure-semantics.md, "What a re-run repeats and what it does not").
//!
//! A call is identified by its tool id, its canonical arguments (object keys sorted, numbers
//! written by value: `1`, `1.0` and `1e0` are the same) and its occurrence: the n-th call of a
//! run with the same tool and arguments matches the n-th such call that completed in earlier
//! runs. Order across different calls does not matter. The journal is built from the folded
//! state when a run starts after the first one, so an execution that never re-runs pays
//! nothing; it lives in memory only as a projection of the log.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::records::{ConsumedSignal, HistoryEntry, StepState};
use crate::ids::{StepId, ToolId};
use crate::status::StepStatus;

/// The recorded outcome of one completed call of an earlier run.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalEntry {
    /// Step that ran the call.
    pub step_id: StepId,
    /// Whether it succeeded.
    pub success: bool,
    /// Result on success.
    pub result: Option<Value>,
    /// Error on failure.
    pub error: Option<String>,
    /// Whether the failure was an operator's denial of its approval (replayed as that denial).
    pub approval_denied: bool,
    /// Whether it is an at-most-once call whose outcome is unknown (its run was reset while a
    /// runner held the job): never replayed, and never run again without an operator's answer.
    pub outcome_unknown: bool,
}

/// The journal of a run after the first: recorded calls by content, and how many calls of the
/// current run had each content so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Journal {
    /// Recorded outcomes by call identity, indexed by the call's occurrence in its run.
    entries: HashMap<String, Vec<Option<JournalEntry>>>,
    seen: HashMap<String, usize>,
    /// Steps whose approval was granted, by call identity.
    grants: HashMap<String, Vec<StepId>>,
    /// Payloads of the signals consumed by waits, by signal type.
    signals: HashMap<String, Vec<Value>>,
    /// Waits of the current run so far, by signal type.
    waits: HashMap<String, usize>,
    /// The step that first held each journal position (call identity, occurrence), whose
    /// idempotency key every later call at that position keeps.
    positions: HashMap<String, Vec<StepId>>,
}

impl Journal {
    /// Builds the journal from the steps of earlier runs: at each position (call identity and
    /// occurrence in its run), the latest step that ended `succeeded` or `failed` (not
    /// cancelled or timed out) or was cancelled with its outcome unknown, replays aside; the
    /// steps whose approval was granted; the signals waits consumed. `None` when there is
    /// nothing to replay.
    pub fn build(
        steps: &[StepState],
        history: &[HistoryEntry],
        consumed: &[ConsumedSignal],
    ) -> Option<Self> {
        let mut last: HashMap<&StepId, &HistoryEntry> = HashMap::new();
        for entry in history {
            last.insert(&entry.step_id, entry);
        }
        let mut journal = Self::default();
        let mut occurrences: HashMap<(u32, String), usize> = HashMap::new();
        for step in steps {
            let key = call_key(&step.tool_id, step.call_arguments());
            let counter = occurrences.entry((step.run, key.clone())).or_default();
            let occurrence = *counter;
            *counter += 1;
            let held = journal.positions.entry(key.clone()).or_default();
            if occurrence == held.len() {
                held.push(step.key_of.clone().unwrap_or_else(|| step.id.clone()));
            }
            if step.replay_of.is_some() {
                continue;
            }
            if step.approval_answer == Some(true) {
                journal
                    .grants
                    .entry(key.clone())
                    .or_default()
                    .push(step.id.clone());
            }
            let Some(entry) = recorded(step, last.get(&step.id).copied()) else {
                continue;
            };
            // A position's latest outcome wins: a later run records one only where it ran
            // the call again (`replay: false`, a local tool, an answered unknown outcome).
            let slots = journal.entries.entry(key).or_default();
            if slots.len() <= occurrence {
                slots.resize(occurrence + 1, None);
            }
            slots[occurrence] = Some(entry);
        }
        for signal in consumed {
            journal
                .signals
                .entry(signal.signal_type.clone())
                .or_default()
                .push(signal.payload.clone());
        }
        let empty = journal.positions.is_empty() && journal.signals.is_empty();
        (!empty).then_some(journal)
    }

    /// Returns the recorded outcome the next call of `tool_id` with `arguments` in the current
    /// run replays, if any.
    pub fn lookup(&self, tool_id: &ToolId, arguments: &Value) -> Option<&JournalEntry> {
        self.at_position(tool_id, arguments)
            .filter(|entry| !entry.outcome_unknown)
    }

    /// Returns the at-most-once step of an earlier run whose outcome is unknown at the position
    /// of the next call of `tool_id` with `arguments`, if any.
    pub fn in_doubt(&self, tool_id: &ToolId, arguments: &Value) -> Option<&StepId> {
        self.at_position(tool_id, arguments)
            .filter(|entry| entry.outcome_unknown)
            .map(|entry| &entry.step_id)
    }

    fn at_position(&self, tool_id: &ToolId, arguments: &Value) -> Option<&JournalEntry> {
        let key = call_key(tool_id, arguments);
        let occurrence = self.seen.get(&key).copied().unwrap_or(0);
        self.entries.get(&key)?.get(occurrence)?.as_ref()
    }

    /// Returns the step of an earlier run whose granted approval the next call of `tool_id`
    /// with `arguments` reuses, if any (same tool, arguments and occurrence).
    pub fn grant(&self, tool_id: &ToolId, arguments: &Value) -> Option<&StepId> {
        let key = call_key(tool_id, arguments);
        let occurrence = self.seen.get(&key).copied().unwrap_or(0);
        self.grants.get(&key)?.get(occurrence)
    }

    /// Returns the payload an earlier run's wait consumed that the next `wait` for
    /// `signal_type` of the current run gets again, if any.
    pub fn signal(&self, signal_type: &str) -> Option<&Value> {
        let occurrence = self.waits.get(signal_type).copied().unwrap_or(0);
        self.signals.get(signal_type)?.get(occurrence)
    }

    /// Returns the step whose idempotency key the next call of `tool_id` with `arguments` in
    /// the current run keeps, if an earlier run made a call at that position.
    pub fn key_of(&self, tool_id: &ToolId, arguments: &Value) -> Option<&StepId> {
        let key = call_key(tool_id, arguments);
        let occurrence = self.seen.get(&key).copied().unwrap_or(0);
        self.positions.get(&key)?.get(occurrence)
    }

    /// Counts a `wait` of the current run (live or replayed).
    pub fn saw_wait(&mut self, signal_type: &str) {
        *self.waits.entry(signal_type.to_owned()).or_default() += 1;
    }

    /// Counts a step of the current run (live or replayed) as one occurrence of its call.
    pub fn saw(&mut self, tool_id: &ToolId, arguments: &Value) {
        *self.seen.entry(call_key(tool_id, arguments)).or_default() += 1;
    }
}

/// Returns what the journal holds for a step of an earlier run: its outcome when it succeeded
/// or failed, an unknown outcome when it was cancelled while its outcome was unknown.
fn recorded(step: &StepState, last: Option<&HistoryEntry>) -> Option<JournalEntry> {
    let (success, outcome_unknown) = match step.status {
        StepStatus::Succeeded => (true, false),
        StepStatus::Failed => (false, false),
        StepStatus::Cancelled if step.outcome_unknown => (false, true),
        _ => return None,
    };
    let outcome = last?;
    Some(JournalEntry {
        step_id: step.id.clone(),
        success,
        result: outcome.result.clone().filter(|_| !outcome_unknown),
        error: outcome.error.clone().filter(|_| !outcome_unknown),
        approval_denied: step.approval_answer == Some(false),
        outcome_unknown,
    })
}

/// Returns the identity of a call: tool id and canonical arguments.
pub fn call_key(tool_id: &ToolId, arguments: &Value) -> String {
    let mut key = String::with_capacity(64);
    key.push_str(tool_id.as_str());
    key.push('\u{0}');
    canonical(arguments, &mut key);
    key
}

/// Writes `value` as canonical JSON: object keys sorted, no white space, numbers by value.
pub fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => canonical_number(number, out),
        Value::String(text) => out.push_str(&Value::String(text.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(item) = map.get(key) {
                    canonical(item, out);
                }
            }
            out.push('}');
        }
    }
}

/// Integers as integers; a float with an integral value within ±2^53 as that integer; any
/// other float in its shortest round-trip form.
fn canonical_number(number: &serde_json::Number, out: &mut String) {
    if let Some(int) = number.as_i64() {
        let _ = write!(out, "{int}");
    } else if let Some(int) = number.as_u64() {
        let _ = write!(out, "{int}");
    } else if let Some(float) = number.as_f64() {
        const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
        if float.fract() == 0.0 && float.abs() <= EXACT {
            #[allow(clippy::cast_possible_truncation)] // integral and within ±2^53
            let int = float as i64;
            let _ = write!(out, "{int}");
        } else {
            let _ = write!(out, "{float:e}");
        }
    } else {
        out.push_str(&number.to_string());
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
