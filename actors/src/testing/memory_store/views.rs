//! The memory store's derived views, scans over its tables: what startup recovery needs, the
//! guardrails' windows (tool results, allowed calls), status counts and pending approvals.

use crate::events::EventBody;
use crate::store::{AllowedToolCall, ExecutionRow, ListFilter};
use crate::time::Timestamp;

use super::Tables;

impl Tables {
    pub(super) fn recovery_index(&self) -> Vec<crate::store::RecoveryEntry> {
        let mut rows: Vec<&ExecutionRow> = self
            .executions
            .values()
            .filter(|row| !row.status.is_terminal())
            .collect();
        rows.sort_by_key(|row| row.created_at);
        rows.into_iter()
            .map(|row| crate::store::RecoveryEntry {
                id: row.id.clone(),
                agent_id: row.agent_id.clone(),
                status: row.status,
                created_at: row.created_at,
                session_id: row.session_id.clone(),
                consumer_id: row.consumer_id.clone(),
                live_steps: self
                    .steps
                    .get(&row.id)
                    .is_some_and(|steps| steps.values().any(|step| !step.status.is_terminal())),
            })
            .collect()
    }

    pub(super) fn tool_results_since(&self, since: Timestamp) -> Vec<crate::store::ToolResult> {
        let mut results = Vec::new();
        for events in self.events.values() {
            for event in events.iter().filter(|event| event.timestamp >= since) {
                let success = match &event.body {
                    EventBody::StepCompleted { .. } => true,
                    EventBody::StepFailed { .. } | EventBody::StepTimedOut {} => false,
                    _ => continue,
                };
                let tool = events.iter().find_map(|other| match &other.body {
                    EventBody::StepCreated { tool_id, .. } if other.step_id == event.step_id => {
                        Some(tool_id.clone())
                    }
                    _ => None,
                });
                if let Some(tool_id) = tool {
                    results.push(crate::store::ToolResult {
                        tool_id,
                        success,
                        at: event.timestamp,
                    });
                }
            }
        }
        results.sort_by_key(|result| result.at);
        results
    }

    pub(super) fn runner_results_since(
        &self,
        since: Timestamp,
    ) -> Vec<crate::store::RunnerToolResult> {
        let mut results = Vec::new();
        for events in self.events.values() {
            for (index, event) in events.iter().enumerate() {
                let success = match &event.body {
                    EventBody::StepCompleted { .. } => true,
                    EventBody::StepFailed { error, .. } => {
                        if error.starts_with(crate::execution::RUNNER_LOST_ERROR) {
                            continue;
                        }
                        false
                    }
                    _ => continue,
                };
                if event.timestamp < since {
                    continue;
                }
                let holder = events[..index]
                    .iter()
                    .rev()
                    .find_map(|other| match &other.body {
                        EventBody::StepDispatched { runner_id, .. }
                        | EventBody::StepStarted { runner_id }
                            if other.step_id == event.step_id =>
                        {
                            Some(runner_id.clone())
                        }
                        _ => None,
                    });
                if let Some(runner_id) = holder.filter(|runner| !runner.as_str().is_empty()) {
                    results.push(crate::store::RunnerToolResult {
                        runner_id,
                        success,
                        at: event.timestamp,
                    });
                }
            }
        }
        results.sort_by_key(|result| result.at);
        results
    }

    pub(super) fn tool_calls_since(&self, since: Timestamp) -> Vec<AllowedToolCall> {
        let mut calls = Vec::new();
        for (id, events) in &self.events {
            let Some(row) = self.executions.get(id) else {
                continue;
            };
            for event in events.iter().filter(|event| event.timestamp >= since) {
                let EventBody::StepCreated { tool_id, .. } = &event.body else {
                    continue;
                };
                let gated = events.iter().any(|other| {
                    other.step_id == event.step_id
                        && matches!(other.body, EventBody::StepApprovalRequired { .. })
                });
                if !gated {
                    calls.push(AllowedToolCall {
                        agent_id: row.agent_id.clone(),
                        tool_id: tool_id.clone(),
                        at: event.timestamp,
                    });
                }
            }
        }
        calls.sort_by_key(|call| call.at);
        calls
    }

    pub(super) fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Vec<(crate::status::ExecutionStatus, u64)> {
        let mut counts =
            std::collections::BTreeMap::<&'static str, (crate::status::ExecutionStatus, u64)>::new(
            );
        for row in self.executions.values() {
            let agent_matches = filter
                .agent_id
                .as_ref()
                .is_none_or(|agent| row.agent_id == *agent);
            let labels_match = filter.labels.iter().all(|(key, value)| {
                row.labels
                    .as_ref()
                    .and_then(|labels| labels.get(key))
                    .is_some_and(|found| found == value)
            });
            if agent_matches && labels_match {
                counts
                    .entry(row.status.as_str())
                    .or_insert((row.status, 0))
                    .1 += 1;
            }
        }
        counts.into_values().collect()
    }

    pub(super) fn pending_approvals(&self, limit: i64) -> Vec<crate::store::PendingApproval> {
        let mut found = Vec::new();
        for row in self.executions.values() {
            if row.status != crate::status::ExecutionStatus::Blocked {
                continue;
            }
            let events = self
                .events
                .get(&row.id)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (index, event) in events.iter().enumerate() {
                let Some(step_id) = &event.step_id else {
                    continue;
                };
                let answered = events[index + 1..].iter().any(|later| {
                    later.step_id.as_ref() == Some(step_id)
                        && !matches!(later.body, EventBody::ApprovalRequested(_))
                });
                if matches!(event.body, EventBody::StepApprovalRequired { .. }) && !answered {
                    let latest_request = events[index + 1..]
                        .iter()
                        .rev()
                        .find(|later| {
                            later.step_id.as_ref() == Some(step_id)
                                && matches!(later.body, EventBody::ApprovalRequested(_))
                        })
                        .map(|later| later.body.payload());
                    found.push(crate::store::PendingApproval {
                        execution_id: row.id.clone(),
                        agent_id: row.agent_id.clone(),
                        step_id: step_id.clone(),
                        request: event.body.payload(),
                        requested_at: event.timestamp,
                        latest_request,
                    });
                }
            }
        }
        found.sort_by_key(|approval| approval.requested_at);
        found.truncate(usize::try_from(limit).unwrap_or(0));
        found
    }
}
