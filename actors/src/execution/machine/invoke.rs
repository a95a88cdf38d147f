//! `invoke_tool`: the policy verdict turned into a step (or a denial, a pending approval, or the
//! replay of an earlier call with the same idempotency key), with the rule's timeout, retry and
//! budget settings recorded on `step.created`.

use super::super::commands::{Effect, ExecutionSettings, IntentReply, JobSpec};
use super::super::state::ExecutionState;
use super::*;
use crate::events::{BlockReason, EventBody, NewEvent};
use crate::ids::{JobId, RunnerId, StepId, ToolId};
use crate::policy::{Decision, PolicyDecision};
use crate::time::Timestamp;
use serde_json::{Value, json};
use std::time::Duration;

pub(super) struct ToolCall<'a> {
    pub(super) tool_id: &'a ToolId,
    pub(super) arguments: &'a Value,
    /// The agent's arguments when a `pre_tool` hook replaced them (the journal identity).
    pub(super) proposed: Option<&'a Value>,
    pub(super) key: Option<&'a String>,
    pub(super) remote: bool,
    /// Step of an earlier run whose idempotency key this call keeps (a re-run).
    pub(super) key_of: Option<StepId>,
    /// Step of an earlier run whose recorded outcome this call runs again.
    pub(super) repeats: Option<StepId>,
    /// At-most-once step of an earlier run at this call's position whose outcome is unknown.
    pub(super) in_doubt_of: Option<StepId>,
}

pub(super) fn invoke_tool(
    state: &ExecutionState,
    call: &ToolCall<'_>,
    verdict: &PolicyDecision,
    now: Timestamp,
    settings: &ExecutionSettings,
) -> (Transition, IntentReply) {
    let mut transition = Transition::default();
    let key = call.key.cloned();
    if verdict.decision == Decision::Deny {
        transition.event(
            NewEvent::execution(EventBody::IntentDenied {
                intent_type: "invoke_tool".to_owned(),
                tool_id: Some(call.tool_id.clone()),
                arguments: Some(call.arguments.clone()),
                idempotency_key: key.clone(),
                reason: verdict.reason.clone(),
                rule_id: verdict.rule_id.clone(),
            })
            .with_key(key),
        );
        let error = verdict.denial_text();
        return (
            transition,
            IntentReply {
                accepted: false,
                error: Some(error),
                ..IntentReply::default()
            },
        );
    }
    let step_id = StepId::generate();
    let step_timeout = verdict
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(settings.step_timeout);
    let deadline = add(now, step_timeout);
    if verdict.decision == Decision::RequireApproval {
        let terms = verdict.approval.as_deref();
        let step_deadline = add(now, settings.step_timeout);
        let rule = RuleSettings {
            timeout_ms: verdict.timeout_ms,
            retry: None,
            max_retries: max_retries(verdict),
            at_most_once: verdict.at_most_once && call.remote,
        };
        transition
            .event(step_created(&step_id, call, 1, step_deadline, rule).with_key(key.clone()));
        transition.event(
            NewEvent::step(
                &step_id,
                EventBody::StepApprovalRequired {
                    tool_id: call.tool_id.clone(),
                    arguments: call.arguments.clone(),
                    remote: call.remote,
                    reason: verdict.reason.clone(),
                    rule_id: Some(verdict.rule_id.clone()),
                    arguments_digest: Some(crate::approvals::arguments_digest(call.arguments)),
                    approvers: terms
                        .map(|terms| terms.approvers.clone())
                        .filter(|approvers| !approvers.is_empty()),
                    expires_at: terms
                        .and_then(|terms| terms.expires_after)
                        .map(|after| add(now, after)),
                    on_expiry: terms.and_then(crate::approvals::ApprovalTerms::on_expiry),
                    self_approval: terms.is_some_and(|terms| terms.self_approval),
                },
            )
            .with_key(key),
        );
        transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: BlockReason::Approval,
            reference: step_id.to_string(),
            tool_id: Some(call.tool_id.clone()),
            arguments: Some(call.arguments.clone()),
            remote: Some(call.remote),
        }));
        transition.event(super::approvals::requested(
            state, &step_id, call, verdict, terms, now,
        ));
        let reply = IntentReply {
            accepted: true,
            step_id: Some(step_id),
            pending_approval: true,
            error: None,
            ..IntentReply::default()
        };
        return (transition, reply);
    }
    let mut details = json!({ "tool_id": call.tool_id });
    if !call.arguments.is_null() {
        details["arguments"] = call.arguments.clone();
    }
    if let Some(key) = call.key {
        details["idempotency_key"] = json!(key);
    }
    transition.event(NewEvent::execution(EventBody::IntentAccepted {
        intent_type: "invoke_tool".to_owned(),
        details: Some(details),
    }));
    let max_attempts = match (call.remote, verdict.retry) {
        (false, _) => 1,
        (true, Some(retry)) => i64::from(retry.max_attempts.max(1)),
        (true, None) => settings.remote_max_attempts,
    };
    let rule = RuleSettings {
        timeout_ms: verdict.timeout_ms,
        retry: verdict.retry.filter(|_| call.remote),
        max_retries: max_retries(verdict),
        at_most_once: verdict.at_most_once && call.remote,
    };
    let in_doubt = call.in_doubt_of.as_ref().filter(|_| rule.at_most_once);
    transition.event(step_created(&step_id, call, max_attempts, deadline, rule).with_key(key));
    if let Some(earlier) = in_doubt {
        // The same call of an earlier run may have happened: no job until an operator answers.
        transition.event(NewEvent::step(
            &step_id,
            EventBody::StepOutcomeUnknown {
                runner_id: None,
                reason: format!(
                    "the same call of an earlier run (step {earlier}) may have happened"
                ),
            },
        ));
    } else if call.remote {
        let job_id = JobId::generate();
        transition.event(NewEvent::step(
            &step_id,
            EventBody::StepDispatched {
                runner_id: RunnerId::default(),
                job_id: job_id.clone(),
                deadline,
            },
        ));
        transition.effect(Effect::EnqueueJob(JobSpec {
            job_id,
            execution_id: state.id.clone(),
            step_id: step_id.clone(),
            attempt: 1,
            tool_id: call.tool_id.clone(),
            arguments: call.arguments.clone(),
            deadline,
            not_before: None,
            traceparent: None,
            idempotency_key: None,
        }));
    }
    if !state.tool_blocked {
        transition.event(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: BlockReason::Tool,
            reference: step_id.to_string(),
            tool_id: None,
            arguments: None,
            remote: None,
        }));
    }
    (
        transition,
        IntentReply {
            accepted: true,
            step_id: Some(step_id),
            pending_approval: false,
            error: None,
            ..IntentReply::default()
        },
    )
}

/// What the matching policy rule says about a step beyond allow/deny, recorded in
/// `step.created` so that retries and approvals use it after a restart too.
struct RuleSettings {
    timeout_ms: Option<u64>,
    retry: Option<crate::policy::RetrySettings>,
    /// The retry budget in force (`budget.max_retries`).
    max_retries: Option<u64>,
    /// `idempotency: at_most_once` (remote steps only).
    at_most_once: bool,
}

fn max_retries(verdict: &PolicyDecision) -> Option<u64> {
    verdict
        .budget
        .as_ref()
        .and_then(|budget| budget.max_retries)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn step_created(
    step_id: &StepId,
    call: &ToolCall<'_>,
    max_attempts: i64,
    deadline: Timestamp,
    rule: RuleSettings,
) -> NewEvent {
    NewEvent::step(
        step_id,
        EventBody::StepCreated {
            tool_id: call.tool_id.clone(),
            tool_version: 0,
            arguments: call.arguments.clone(),
            max_attempts,
            attempt: 1,
            deadline,
            remote: call.remote,
            timeout_ms: rule.timeout_ms,
            retry_base_delay_ms: rule.retry.map(|retry| millis(retry.base_delay)),
            retry_max_delay_ms: rule.retry.map(|retry| millis(retry.max_delay)),
            max_retries: rule.max_retries,
            replay_of: None,
            key_of: call.key_of.clone(),
            repeats: call.repeats.clone(),
            proposed_arguments: call.proposed.cloned(),
            at_most_once: rule.at_most_once,
        },
    )
}
