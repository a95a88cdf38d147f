//! What an execution has used against its budget ([`BudgetUsage`], folded from its events) and
//! the cost a step result reports ([`parse_cost`]). The limits themselves are in `budget.rs`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};

use super::budget::{MAX_COST_UNIT_BYTES, MAX_COST_UNITS};
use crate::events::{Event, EventBody};
use crate::ids::ToolId;

/// What an execution has used, folded from its events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetUsage {
    /// Tool steps created (`step.created`).
    pub steps: u64,
    /// Steps created per tool id.
    pub calls: HashMap<ToolId, u64>,
    /// Retries (`step.retried`).
    pub retries: u64,
    /// Cost reported with step results and model calls, summed per unit.
    pub cost: BTreeMap<String, f64>,
    /// Tokens (input + output) of the model calls made through the LLM gateway.
    pub llm_tokens: u64,
    /// Cost limits an operator raised for this execution (`budget.raised`), per unit.
    pub raised_cost: BTreeMap<String, f64>,
    /// The token limit an operator raised for this execution (`budget.raised`).
    pub raised_tokens: Option<u64>,
}

impl BudgetUsage {
    /// Returns the usage recorded by a complete event log.
    pub fn from_events(events: &[Event]) -> Self {
        let mut usage = Self::default();
        for event in events {
            usage.apply(&event.body);
        }
        usage
    }

    /// Counts one event.
    pub fn apply(&mut self, body: &EventBody) {
        match body {
            // A replayed step ran nothing: it is not charged again.
            EventBody::StepCreated {
                replay_of: Some(_), ..
            } => {}
            EventBody::StepCreated { tool_id, .. } => {
                self.steps += 1;
                *self.calls.entry(tool_id.clone()).or_default() += 1;
            }
            EventBody::StepRetried { .. } => self.retries += 1,
            EventBody::StepCompleted {
                cost: Some(cost), ..
            }
            | EventBody::StepFailed {
                cost: Some(cost), ..
            } => {
                for (unit, amount) in cost {
                    *self.cost.entry(unit.clone()).or_default() += amount;
                }
            }
            EventBody::LlmCalled(call) => {
                for (unit, amount) in call.cost.iter().flatten() {
                    *self.cost.entry(unit.clone()).or_default() += amount;
                }
                let tokens = call.input_tokens.unwrap_or(0) + call.output_tokens.unwrap_or(0);
                self.llm_tokens = self.llm_tokens.saturating_add(tokens);
            }
            EventBody::BudgetRaised {
                max_cost,
                max_tokens,
            } => {
                self.raised_cost.extend(max_cost.clone());
                if max_tokens.is_some() {
                    self.raised_tokens = *max_tokens;
                }
            }
            _ => {}
        }
    }

    /// Returns the steps created for `tool_id`.
    pub fn calls(&self, tool_id: &ToolId) -> u64 {
        self.calls.get(tool_id).copied().unwrap_or(0)
    }

    /// Returns the usage as JSON.
    pub fn json(&self, elapsed: Duration) -> Value {
        let calls: BTreeMap<&str, u64> = self
            .calls
            .iter()
            .map(|(tool, calls)| (tool.as_str(), *calls))
            .collect();
        json!({
            "steps": self.steps,
            "calls_per_tool": calls,
            "retries": self.retries,
            "wall_time_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            "cost": self.cost,
            "tokens": self.llm_tokens,
        })
    }
}

/// The cost a step result reported: amounts per unit.
pub type Cost = BTreeMap<String, f64>;

/// Reads the `cost` of a step result: an object of at most [`MAX_COST_UNITS`] units, each a
/// non-empty name of at most [`MAX_COST_UNIT_BYTES`] bytes with a finite number `>= 0`.
/// `null` means no cost. Returns the message of a validation error otherwise.
pub fn parse_cost(value: &Value) -> Result<Option<Cost>, String> {
    let object = match value {
        Value::Null => return Ok(None),
        Value::Object(object) => object,
        _ => return Err("cost must be an object of numbers, e.g. {\"usd\": 0.01}".to_owned()),
    };
    if object.len() > MAX_COST_UNITS {
        return Err(format!("cost has more than {MAX_COST_UNITS} units"));
    }
    let mut cost = Cost::new();
    for (unit, amount) in object {
        if unit.is_empty() || unit.len() > MAX_COST_UNIT_BYTES {
            return Err(format!(
                "cost unit names must be 1 to {MAX_COST_UNIT_BYTES} bytes"
            ));
        }
        match amount.as_f64() {
            Some(amount) if amount.is_finite() && amount >= 0.0 => {
                cost.insert(unit.clone(), amount);
            }
            _ => {
                return Err(format!(
                    "cost.{unit} must be a number of at least 0, got {amount}"
                ));
            }
        }
    }
    Ok(Some(cost))
}
