//! `pre_create` hooks (docs/hooks.md): called before an execution exists, in the task of the
//! request that creates it (no actor holds the execution yet, so nothing can wait behind it).
//! Each hook sees the creation as it stands — the request's labels plus what earlier hooks
//! added — and passes, adds labels, or refuses. A refusal ends the chain and nothing is
//! created; otherwise the `hook.decided` events are committed with `execution.created`.
//!
//! Labels are only ever added: a hook answering a label that is already set to another value
//! gave an invalid answer (a failed call, which its failure mode turns into a refusal or a
//! pass), so the labels a client set are never changed behind its back.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::{FailureMode, HookCaller, HookSpec, HookVerdict};
use crate::events::{EventBody, NewEvent};

/// Labels of an execution.
pub type Labels = BTreeMap<String, String>;

/// A creation as its hooks see it.
#[derive(Clone, Copy, Debug)]
pub struct CreationRequest<'a> {
    /// Agent that will run it.
    pub agent_id: &'a str,
    /// Its input.
    pub input: &'a Value,
    /// The labels the request gave.
    pub labels: Option<&'a Labels>,
    /// Queue priority (sent to hooks when not 0).
    pub priority: i64,
    /// `Idempotency-Key` of the request.
    pub idempotency_key: Option<&'a str>,
    /// Principal whose request creates it (sent to hooks when known).
    pub created_by: Option<&'a str>,
    /// End user it is created for (sent to hooks when given).
    pub on_behalf_of: Option<&'a str>,
}

/// How a `pre_create` chain ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CreationOutcome {
    /// Create the execution with these labels: the request's plus every addition (`None`
    /// when the request gave none and no hook added any).
    Create(Option<Labels>),
    /// A hook refused (or failed closed): create nothing.
    Refuse {
        /// Hook that refused.
        hook_id: String,
        /// Why.
        reason: String,
    },
}

/// The outcome and one `hook.decided` event per hook called.
#[derive(Clone, Debug, PartialEq)]
pub struct CreationRun {
    /// How the chain ended.
    pub outcome: CreationOutcome,
    /// `hook.decided` events, in call order (committed after `execution.created`).
    pub events: Vec<NewEvent>,
}

/// Returns the labels of a hook's `labels` answer that `current` does not have yet. The answer
/// must be an object of string values (as creation labels are); a key already set to a
/// different value is refused, one set to the same value is left out.
pub fn labels_to_add(current: &Labels, answer: &Value) -> Result<Labels, String> {
    let Value::Object(answer) = answer else {
        return Err("labels must be an object of string values".to_owned());
    };
    let mut added = Labels::new();
    for (key, value) in answer {
        let Value::String(value) = value else {
            return Err(format!("label {key:?} must be a string"));
        };
        match current.get(key) {
            Some(existing) if existing == value => {}
            Some(existing) => {
                return Err(format!(
                    "label {key:?} is already set to {existing:?}; hooks only add labels"
                ));
            }
            None => {
                added.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(added)
}

/// What one call came to, once a `modify` answer's labels are checked.
enum Answer {
    Pass,
    Add(Labels),
    Refuse(String),
    Failed(String),
}

/// Calls the `pre_create` `hooks` in order, stopping at the first refusal.
pub async fn run_creation_chain(
    caller: &dyn HookCaller,
    hooks: &[HookSpec],
    creation: CreationRequest<'_>,
) -> CreationRun {
    let mut labels = creation.labels.cloned().unwrap_or_default();
    let mut labelled = creation.labels.is_some();
    let mut events = Vec::with_capacity(hooks.len());
    let mut request = json!({
        "point": "pre_create",
        "agent_id": creation.agent_id,
        "input": creation.input,
    });
    if creation.priority != 0 {
        request["priority"] = json!(creation.priority);
    }
    if let Some(key) = creation.idempotency_key {
        request["idempotency_key"] = json!(key);
    }
    if let Some(created_by) = creation.created_by {
        request["created_by"] = json!(created_by);
    }
    if let Some(on_behalf_of) = creation.on_behalf_of {
        request["on_behalf_of"] = json!(on_behalf_of);
    }
    for hook in hooks {
        request["hook_id"] = json!(hook.id);
        request["labels"] = json!(labels);
        let started = Instant::now();
        let answer = match caller.call(hook, &request).await {
            Ok(HookVerdict::Pass) => Answer::Pass,
            Ok(HookVerdict::Modify(answer)) => match labels_to_add(&labels, &answer) {
                Ok(added) => Answer::Add(added),
                Err(error) => Answer::Failed(error),
            },
            Ok(HookVerdict::Abort(reason)) => Answer::Refuse(reason),
            Err(error) => Answer::Failed(error),
        };
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let record = |decision: &str, reason: Option<String>, added: Option<Labels>| {
            let failure_mode = (decision == "error").then(|| hook.failure.as_str().to_owned());
            NewEvent::execution(EventBody::HookDecided {
                hook_id: hook.id.clone(),
                point: "pre_create".to_owned(),
                decision: decision.to_owned(),
                latency_ms,
                tool_id: None,
                reason,
                failure_mode,
                labels: added,
            })
        };
        let refusal = match answer {
            Answer::Pass => {
                events.push(record("pass", None, None));
                None
            }
            Answer::Add(added) => {
                events.push(record("modify", None, Some(added.clone())));
                labelled |= !added.is_empty();
                labels.extend(added);
                None
            }
            Answer::Refuse(reason) => {
                events.push(record("abort", Some(reason.clone()), None));
                Some(reason)
            }
            Answer::Failed(error) => {
                events.push(record("error", Some(error.clone()), None));
                (hook.failure == FailureMode::FailClosed)
                    .then(|| format!("hook {} failed: {error}", hook.id))
            }
        };
        if let Some(reason) = refusal {
            return CreationRun {
                outcome: CreationOutcome::Refuse {
                    hook_id: hook.id.clone(),
                    reason,
                },
                events,
            };
        }
    }
    CreationRun {
        outcome: CreationOutcome::Create(labelled.then_some(labels)),
        events,
    }
}

#[cfg(test)]
#[path = "creation_tests.rs"]
mod tests;
