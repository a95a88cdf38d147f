//! Running a chain of hooks over one value, recording each decision.

use std::time::Instant;

use serde_json::{Value, json};

use super::{FailureMode, HookCaller, HookPoint, HookSpec, HookVerdict};
use crate::events::{EventBody, NewEvent};
use crate::ids::ToolId;

/// How a chain ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ChainOutcome {
    /// Every hook passed or modified: the value to go on with.
    Continue(Value),
    /// A hook aborted (or failed closed).
    Abort {
        /// Hook that stopped the chain.
        hook_id: String,
        /// Why.
        reason: String,
    },
}

/// The outcome and one `hook.decided` event per hook called.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainRun {
    /// How the chain ended.
    pub outcome: ChainOutcome,
    /// Whether any hook changed the value.
    pub modified: bool,
    /// `hook.decided` events, in call order.
    pub events: Vec<NewEvent>,
}

/// Calls `hooks` in order with `request` (whose `field` — `arguments` or `result` — is replaced
/// by each modification before the next hook sees it), stopping at the first abort.
pub async fn run_chain(
    caller: &dyn HookCaller,
    hooks: &[HookSpec],
    point: HookPoint,
    tool_id: &ToolId,
    mut request: Value,
    field: &str,
    value: Value,
) -> ChainRun {
    let mut value = value;
    let mut events = Vec::with_capacity(hooks.len());
    let mut modified = false;
    for hook in hooks {
        request[field] = value.clone();
        request["hook_id"] = json!(hook.id);
        let started = Instant::now();
        let answer = caller.call(hook, &request).await;
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let record = |decision: &str, reason: Option<String>, failure: Option<FailureMode>| {
            NewEvent::execution(EventBody::HookDecided {
                hook_id: hook.id.clone(),
                point: point.as_str().to_owned(),
                decision: decision.to_owned(),
                latency_ms,
                tool_id: Some(tool_id.to_owned()),
                reason,
                failure_mode: failure.map(|mode| mode.as_str().to_owned()),
                labels: None,
            })
        };
        match answer {
            Ok(HookVerdict::Pass) => events.push(record("pass", None, None)),
            Ok(HookVerdict::Modify(new_value)) => {
                events.push(record("modify", None, None));
                value = new_value;
                modified = true;
            }
            Ok(HookVerdict::Abort(reason)) => {
                events.push(record("abort", Some(reason.clone()), None));
                return ChainRun {
                    outcome: ChainOutcome::Abort {
                        hook_id: hook.id.clone(),
                        reason,
                    },
                    modified,
                    events,
                };
            }
            Err(error) => {
                events.push(record("error", Some(error.clone()), Some(hook.failure)));
                if hook.failure == FailureMode::FailClosed {
                    return ChainRun {
                        outcome: ChainOutcome::Abort {
                            hook_id: hook.id.clone(),
                            reason: format!("hook {} failed: {error}", hook.id),
                        },
                        modified,
                        events,
                    };
                }
            }
        }
    }
    ChainRun {
        outcome: ChainOutcome::Continue(value),
        modified,
        events,
    }
}
