//! The fold of one event into an execution's state (`ExecutionState::apply`), used both to
//! rebuild an execution from its log and to advance a live one after each commit.

use super::*;
use crate::events::{Blocker, ResumeReason};
use crate::policy::DenialKind;

impl ExecutionState {
    /// Applies one event. Events are trusted: they were produced by the state machine.
    pub fn apply(&mut self, event: &Event) {
        debug_assert_eq!(
            event.sequence,
            self.last_sequence + 1,
            "event sequences are contiguous"
        );
        self.last_sequence = event.sequence;
        self.updated_at = event.timestamp;
        let at = event.timestamp;
        let before = self.status;
        self.usage.apply(&event.body);
        match &event.body {
            EventBody::ExecutionCreated { .. } => {}
            EventBody::ExecutionStarted {
                session_id,
                consumer_id,
            } => {
                self.session = Some(Session {
                    id: session_id.clone(),
                    consumer_id: consumer_id.clone(),
                });
                self.status = ExecutionStatus::Running;
                self.intents.clear();
                self.session_lost = false;
                self.runs = self.runs.saturating_add(1);
                self.journal = if self.runs > 1 {
                    Journal::build(&self.steps, &self.history, &self.consumed_signals)
                } else {
                    None
                };
            }
            EventBody::ExecutionBlocked {
                reason, reference, ..
            } => match reason.blocker() {
                Blocker::Tool => self.tool_blocked = true,
                Blocker::Signal => self.signal_wait = Some(reference.clone()),
                Blocker::Approval => self.approval = Some(StepId::new(reference.clone())),
                Blocker::Budget => self.budget_wait = Some(reference.clone()),
            },
            EventBody::ExecutionResumed { reason } => {
                let answer = match reason {
                    ResumeReason::ApprovalGranted => Some(true),
                    ResumeReason::ApprovalDenied => Some(false),
                    _ => None,
                };
                if answer.is_some() {
                    let waiting = self.approval.clone();
                    if let Some(step) = self.step_mut(waiting.as_ref()) {
                        step.approval_answer = answer;
                    }
                }
                self.apply_resumed(reason);
            }
            EventBody::ExecutionCompleted { output } => {
                self.output = Some(output.clone());
                self.finish(ExecutionStatus::Completed);
            }
            EventBody::ExecutionFailed { .. } => self.finish(ExecutionStatus::Failed),
            EventBody::ExecutionCancelled { .. } => self.finish(ExecutionStatus::Cancelled),
            EventBody::ExecutionReset { .. } => {
                self.status = ExecutionStatus::Pending;
                self.session = None;
                self.clear_blockers();
                self.journal = None;
            }
            EventBody::IntentAccepted {
                intent_type,
                details,
            } => {
                if let Some(journal) = &mut self.journal
                    && intent_type == "wait"
                    && let Some(signal_type) = details
                        .as_ref()
                        .and_then(|details| details.get("signal_type"))
                        .and_then(Value::as_str)
                {
                    journal.saw_wait(signal_type);
                }
            }
            EventBody::ToolCircuitOpened { .. } | EventBody::ToolCircuitClosed { .. } => {}
            EventBody::AgentTimeout { .. } => self.session_lost = true,
            EventBody::IntentDenied {
                tool_id,
                idempotency_key,
                reason,
                rule_id,
                ..
            } => {
                if let Some(key) = idempotency_key {
                    let error =
                        DenialKind::from_stored(reason, rule_id).agent_text(reason, rule_id);
                    let tool_id = tool_id.clone().unwrap_or_default();
                    self.intents
                        .insert(key.clone(), RecordedIntent::Denied { tool_id, error });
                }
            }
            EventBody::StepCreated {
                tool_id,
                arguments,
                max_attempts,
                attempt,
                deadline,
                remote,
                timeout_ms,
                retry_base_delay_ms,
                retry_max_delay_ms,
                max_retries,
                replay_of,
                key_of,
                at_most_once,
                proposed_arguments,
                ..
            } => {
                if let Some(journal) = &mut self.journal {
                    journal.saw(tool_id, proposed_arguments.as_ref().unwrap_or(arguments));
                }
                let step_id = event.step_id.clone().unwrap_or_else(|| StepId::new(""));
                if let Some(key) = &event.idempotency_key {
                    self.intents.insert(
                        key.clone(),
                        RecordedIntent::Accepted {
                            step_id: step_id.clone(),
                            tool_id: tool_id.clone(),
                            remote: *remote,
                            pending_approval: false,
                        },
                    );
                }
                self.step_count += 1;
                self.steps.push(StepState {
                    id: step_id,
                    tool_id: tool_id.clone(),
                    arguments: arguments.clone(),
                    status: StepStatus::Pending,
                    attempt: *attempt,
                    max_attempts: *max_attempts,
                    remote: *remote,
                    deadline: Some(*deadline),
                    job_id: None,
                    runner_id: None,
                    not_before: None,
                    awaiting_approval: false,
                    approval_requested: false,
                    approval_answer: None,
                    outcome: None,
                    updated_at: at,
                    created_at: at,
                    timeout: timeout_ms.map(Duration::from_millis),
                    retry_base_delay: retry_base_delay_ms.map(Duration::from_millis),
                    retry_max_delay: retry_max_delay_ms.map(Duration::from_millis),
                    max_retries: *max_retries,
                    dispatched_at: None,
                    stall_reported: false,
                    run: self.runs,
                    replay_of: replay_of.clone(),
                    key_of: key_of.clone(),
                    proposed_arguments: proposed_arguments.clone(),
                    at_most_once: *at_most_once,
                    outcome_unknown: false,
                    progress_events: 0,
                });
            }
            EventBody::ApprovalRequested(request) => {
                self.approval_expires_at = request.expires_at;
                if let Some(step_id) = &event.step_id {
                    self.approval_requests
                        .insert(step_id.clone(), Arc::new((**request).clone()));
                }
            }
            EventBody::ApprovalResolved(_) => {}
            EventBody::StepApprovalRequired {
                tool_id,
                arguments,
                reason,
                rule_id,
                arguments_digest,
                approvers,
                expires_at,
                on_expiry,
                self_approval,
                ..
            } => {
                let key = event.idempotency_key.clone();
                self.approval_expires_at = *expires_at;
                if let Some(step_id) = &event.step_id {
                    // The terms as this event records them; a following `approval.requested`
                    // (logs since it exists) replaces them with the same and the escalation.
                    let request = crate::events::ApprovalRequest {
                        approval_id: format!("{}.{}", self.id, step_id),
                        tool_id: tool_id.clone(),
                        arguments_digest: arguments_digest
                            .clone()
                            .unwrap_or_else(|| crate::approvals::arguments_digest(arguments)),
                        rule_id: rule_id.clone().unwrap_or_default(),
                        reason: reason.clone(),
                        approvers: approvers.clone(),
                        expires_at: *expires_at,
                        on_expiry: on_expiry.clone(),
                        escalation: None,
                        self_approval: *self_approval,
                        escalated: false,
                    };
                    self.approval_requests
                        .insert(step_id.clone(), Arc::new(request));
                }
                if let Some(step) = self.step_mut(event.step_id.as_ref()) {
                    step.awaiting_approval = true;
                    step.approval_requested = true;
                    step.deadline = None;
                    step.updated_at = at;
                }
                if let Some(RecordedIntent::Accepted {
                    pending_approval, ..
                }) = key.and_then(|key| self.intents.get_mut(&key))
                {
                    *pending_approval = true;
                }
            }
            EventBody::StepDispatched {
                runner_id,
                job_id,
                deadline,
            } => {
                if let Some(step) = self.step_mut(event.step_id.as_ref())
                    && !step.status.is_terminal()
                {
                    step.status = StepStatus::Dispatched;
                    step.deadline = Some(*deadline);
                    step.awaiting_approval = false;
                    step.not_before = None;
                    step.job_id = non_empty(job_id);
                    step.runner_id = non_empty(runner_id);
                    step.updated_at = at;
                    step.dispatched_at = step.remote.then_some(at);
                    step.stall_reported = false;
                }
            }
            EventBody::StepStarted { runner_id } => {
                if let Some(step) = self.step_mut(event.step_id.as_ref())
                    && !step.status.is_terminal()
                    && step.status != StepStatus::Running
                {
                    step.status = StepStatus::Running;
                    step.runner_id = non_empty(runner_id);
                    step.updated_at = at;
                }
            }
            EventBody::StepProgress { .. } => {
                if let Some(step) = self.step_mut(event.step_id.as_ref()) {
                    step.progress_events = step.progress_events.saturating_add(1);
                }
            }
            EventBody::StepCompleted { result, .. } => {
                self.end_step(
                    event.step_id.as_ref(),
                    StepStatus::Succeeded,
                    Some(result.clone()),
                    None,
                    at,
                );
            }
            EventBody::StepFailed { error, .. } => {
                self.end_step(
                    event.step_id.as_ref(),
                    StepStatus::Failed,
                    None,
                    Some(error.clone()),
                    at,
                );
            }
            EventBody::StepTimedOut {} => {
                let error = Some("step timed out".to_owned());
                self.end_step(
                    event.step_id.as_ref(),
                    StepStatus::TimedOut,
                    None,
                    error,
                    at,
                );
            }
            EventBody::StepCancelled { reason } => {
                self.end_step(
                    event.step_id.as_ref(),
                    StepStatus::Cancelled,
                    None,
                    Some(reason.clone()),
                    at,
                );
            }
            EventBody::StepOutcomeUnknown { .. } => {
                if let Some(step) = self.step_mut(event.step_id.as_ref()) {
                    step.outcome_unknown = true;
                    step.deadline = None;
                    step.job_id = None;
                    step.dispatched_at = None;
                    step.updated_at = at;
                }
            }
            // The answer's own step events follow it.
            EventBody::StepReconciled { .. } => {}
            EventBody::StepRetried {
                next_attempt,
                not_before,
            } => {
                if let Some(step) = self.step_mut(event.step_id.as_ref()) {
                    step.outcome_unknown = false;
                    step.status = StepStatus::Pending;
                    step.attempt = *next_attempt;
                    step.outcome = None;
                    step.deadline = None;
                    step.job_id = None;
                    step.runner_id = None;
                    step.not_before = *not_before;
                    step.updated_at = at;
                    step.dispatched_at = None;
                    step.stall_reported = false;
                }
            }
            EventBody::ExecutionStalled {
                step_id: Some(step_id),
                ..
            } => {
                if let Some(step) = self.step_mut(Some(step_id)) {
                    step.stall_reported = true;
                }
            }
            EventBody::ExecutionStalled {
                step_id: None,
                since,
                ..
            } => self.stall_reported_since = Some(*since),
            // Informational: the hook's effect is in the events that follow it.
            EventBody::HookDecided { .. } => {}
            // Counted by `usage` above; it changes nothing else.
            EventBody::LlmCalled(_) | EventBody::BudgetRaised { .. } => {}
            EventBody::SignalReceived {
                signal_type,
                payload,
                ..
            } => {
                self.pending_signals
                    .push_back((signal_type.clone(), payload.clone()));
            }
        }
        self.status = self.derived_status();
        let intent = matches!(
            event.body,
            EventBody::IntentAccepted { .. } | EventBody::IntentDenied { .. }
        );
        if self.status == ExecutionStatus::Running && (before != ExecutionStatus::Running || intent)
        {
            self.idle_since = at;
        }
    }
}
