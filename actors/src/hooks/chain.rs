//! Running a chain of hooks over one value, recording each decision.

use std::time::Instant;

use serde_json::{Value, json};

use super::{FailureMode, HookCaller, HookPoint, HookSpec, HookVerdict, LocalModify};
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

/// Who applies a modification of the chain's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applier {
    /// The kernel or a runner (a remote tool), or an agent that said it applies them
    /// (`Keel-Capabilities: modify`): every modification goes on.
    Applied,
    /// An agent that runs the tool itself and cannot apply a modification (rebuno 0.4.8): each
    /// hook's `local_modify` decides between refusing the call and recording the decision only.
    NotApplied,
}

/// Calls `hooks` in order with `request` (whose `field` — `arguments` or `result` — is replaced
/// by each modification before the next hook sees it), stopping at the first abort. With
/// [`Applier::NotApplied`] a modification either stops the chain (`local_modify: refuse`, with
/// a reason that says why) or is recorded and not passed on (`record_only`).
#[allow(clippy::too_many_arguments)]
pub async fn run_chain(
    caller: &dyn HookCaller,
    hooks: &[HookSpec],
    point: HookPoint,
    tool_id: &ToolId,
    mut request: Value,
    field: &str,
    value: Value,
    applier: Applier,
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
            Ok(HookVerdict::Modify(_)) if applier == Applier::NotApplied => {
                let why = format!(
                    "hook {} changed the {field} of local tool {tool_id}, which this agent \
                     cannot apply (its SDK does not send Keel-Capabilities: modify)",
                    hook.id
                );
                match hook.local_modify {
                    LocalModify::Refuse => {
                        let reason = format!("{why}; the call is refused");
                        events.push(record("modify", Some(reason.clone()), None));
                        return ChainRun {
                            outcome: ChainOutcome::Abort {
                                hook_id: hook.id.clone(),
                                reason,
                            },
                            modified,
                            events,
                        };
                    }
                    LocalModify::RecordOnly => {
                        let reason = format!("{why}; recorded only, not applied");
                        events.push(record("modify", Some(reason), None));
                    }
                }
            }
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
