//! Trace spans of an execution actor (docs/tracing.md). Each handled message that can change
//! the execution runs in a span that is a child of the execution's recorded trace context; each
//! step has a span from `step.created` to its terminal event; each push gets a span. Everything
//! here returns at once when traces are off (`ctx.config.traces` is `None`): no span is built,
//! nothing is formatted or allocated.

use std::collections::HashMap;

use tracing::Span;
use tracing::field::Empty;

use super::actor::ExecutionActorState;
use super::commands::Intent;
use super::messages::ExecutionMsg;
use super::state::StepState;
use crate::events::{Event, EventBody};
use crate::ids::{ConsumerId, JobId, RunnerId, StepId, ToolId};
use crate::push::Push;
use crate::trace::TARGET;

/// The open spans of the execution's active steps (empty when traces are off).
#[derive(Default)]
pub struct StepSpans(HashMap<StepId, Span>);

impl Drop for StepSpans {
    /// The actor stops before these steps end (passivated while an approval is pending, a
    /// restart, shutdown): their spans end here, marked; each step gets a closing span when it
    /// ends (see [`observe_steps`]).
    fn drop(&mut self) {
        for span in self.0.values() {
            span.record("step.status", "unfinished");
        }
    }
}

/// Returns the span `message` is handled in: disabled when traces are off or the message
/// changes nothing (reads, passivation bookkeeping).
pub(super) fn message_span(state: &ExecutionActorState, message: &ExecutionMsg) -> Span {
    let Some(traces) = state.ctx.config.traces.as_ref() else {
        return Span::none();
    };
    let Some(name) = message_name(message) else {
        return Span::none();
    };
    let exec = &state.exec;
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "execution message",
        otel.name = name,
        execution.id = %exec.id,
        agent.id = %exec.agent_id,
        intent.type = Empty,
        tool.id = Empty,
        step.id = Empty,
        policy.decision = Empty,
        intent.decision = Empty,
    );
    if let Some(traceparent) = exec.traceparent.as_deref() {
        traces.set_parent(&span, traceparent);
    }
    // The sender's span (ractor runs a handler in it), e.g. the agent's intent request: linked.
    span.follows_from(Span::current().id());
    match message {
        ExecutionMsg::SubmitIntent { intent, .. } => {
            span.record("intent.type", intent.type_name());
            if let Intent::InvokeTool { tool_id, .. } = intent {
                span.record("tool.id", tool_id.as_str());
            }
        }
        ExecutionMsg::ReportStepResult { outcome, .. }
        | ExecutionMsg::ReportRunnerResult { outcome, .. } => {
            span.record("step.id", outcome.step_id.as_str());
        }
        ExecutionMsg::MarkStepStarted { step_id, .. }
        | ExecutionMsg::RecordStepProgress { step_id, .. }
        | ExecutionMsg::RunnerLost { step_id, .. } => {
            span.record("step.id", step_id.as_str());
        }
        ExecutionMsg::ClaimJob { job, .. } => {
            span.record("step.id", job.step_id.as_str());
            span.record("tool.id", job.tool_id.as_str());
        }
        _ => {}
    }
    span
}

fn message_name(message: &ExecutionMsg) -> Option<&'static str> {
    Some(match message {
        ExecutionMsg::SubmitIntent { .. } => "intent",
        ExecutionMsg::ReportStepResult { .. } => "step result",
        ExecutionMsg::ReportRunnerResult { .. } => "runner result",
        ExecutionMsg::MarkStepStarted { .. } => "step started",
        ExecutionMsg::RecordStepProgress { .. } => "step progress",
        ExecutionMsg::DeliverSignal { .. } => "signal",
        ExecutionMsg::ReconcileStep { .. } => "reconcile",
        ExecutionMsg::AdmitLlmCall { .. } => "llm admission",
        ExecutionMsg::RecordLlmCall { .. } => "llm call",
        ExecutionMsg::EndBudgetWait { .. } => "llm budget wait ended",
        ExecutionMsg::Cancel { .. } => "cancel",
        ExecutionMsg::OfferToConsumer { .. } => "assign",
        ExecutionMsg::ClaimJob { .. } => "job claim",
        ExecutionMsg::ConsumerLost { .. } => "consumer lost",
        ExecutionMsg::RunnerLost { .. } => "runner lost",
        ExecutionMsg::Wake => "wake-up",
        ExecutionMsg::GetExecution { .. }
        | ExecutionMsg::GetApproval { .. }
        | ExecutionMsg::IdleCheck { .. }
        | ExecutionMsg::Passivate { .. } => return None,
        #[cfg(any(test, feature = "testing"))]
        ExecutionMsg::Crash => return None,
        ExecutionMsg::ActingAs { message, .. } => return message_name(message),
    })
}

/// Returns the span of a policy check, a child of the current (intent) span.
pub(super) fn policy_span(state: &ExecutionActorState, tool_id: &ToolId) -> Span {
    if state.ctx.config.traces.is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "policy",
        tool.id = tool_id.as_str(),
        policy.decision = Empty,
        policy.rule_id = Empty,
    )
}

/// Records the policy's verdict on its span and on the current (intent) span.
pub(super) fn record_verdict(span: &Span, verdict: &crate::policy::PolicyDecision) {
    if span.is_disabled() {
        return;
    }
    let decision = verdict.decision.as_str();
    span.record("policy.decision", decision);
    span.record("policy.rule_id", verdict.rule_id.as_str());
    Span::current().record("policy.decision", decision);
}

/// Records how the kernel answered an intent (`accepted`, `denied`, `pending_approval`, ...)
/// on the current (intent) span.
pub(super) fn record_intent_decision(state: &ExecutionActorState, decision: &'static str) {
    if state.ctx.config.traces.is_some() {
        Span::current().record("intent.decision", decision);
    }
}

/// What a committed event did to a step, as far as its span is concerned.
pub(super) enum StepMark {
    /// `step.created`.
    Created(StepId),
    /// `step.dispatched`.
    Dispatched(StepId, RunnerId, JobId),
    /// `step.started`.
    Started(StepId, RunnerId),
    /// `step.retried`.
    Retried(StepId, i64),
    /// A terminal step event.
    Ended(StepId),
}

/// Returns the step marks of `events` (nothing when traces are off).
pub(super) fn step_marks(state: &ExecutionActorState, events: &[Event]) -> Vec<StepMark> {
    if state.ctx.config.traces.is_none() {
        return Vec::new();
    }
    let mut marks = Vec::new();
    for event in events {
        let Some(step_id) = event.step_id.clone() else {
            continue;
        };
        marks.push(match &event.body {
            EventBody::StepCreated { .. } => StepMark::Created(step_id),
            EventBody::StepDispatched {
                runner_id, job_id, ..
            } => StepMark::Dispatched(step_id, runner_id.clone(), job_id.clone()),
            EventBody::StepStarted { runner_id } => StepMark::Started(step_id, runner_id.clone()),
            EventBody::StepRetried { next_attempt, .. } => {
                StepMark::Retried(step_id, *next_attempt)
            }
            EventBody::StepCompleted { .. }
            | EventBody::StepFailed { .. }
            | EventBody::StepTimedOut { .. }
            | EventBody::StepCancelled { .. } => StepMark::Ended(step_id),
            _ => continue,
        });
    }
    marks
}

/// Follows the steps through the marks of a committed transition: opens a step's span at
/// `step.created` (a child of the current span), adds its transitions as span events and closes
/// it once the step is terminal, with its status and duration. A step whose span was lost (the
/// actor was rebuilt in between) gets one at its end, with the duration taken from the log.
pub(super) fn observe_steps(state: &mut ExecutionActorState, marks: Vec<StepMark>) {
    for mark in marks {
        match mark {
            StepMark::Created(step_id) => {
                if let Some(step) = state.exec.step(&step_id) {
                    let span = step_span(step);
                    state.step_spans.0.insert(step_id, span);
                }
            }
            StepMark::Dispatched(step_id, runner_id, job_id) => {
                if let Some(span) = state.step_spans.0.get(&step_id) {
                    tracing::event!(target: TARGET, parent: span, tracing::Level::INFO, runner.id = %runner_id, job.id = %job_id, "step dispatched");
                }
            }
            StepMark::Started(step_id, runner_id) => {
                if let Some(span) = state.step_spans.0.get(&step_id) {
                    tracing::event!(target: TARGET, parent: span, tracing::Level::INFO, runner.id = %runner_id, "step started");
                }
            }
            StepMark::Retried(step_id, next_attempt) => {
                if let Some(span) = state.step_spans.0.get(&step_id) {
                    tracing::event!(target: TARGET, parent: span, tracing::Level::INFO, step.next_attempt = next_attempt, "step retried");
                }
            }
            StepMark::Ended(step_id) => {
                let Some(step) = state.exec.step(&step_id) else {
                    continue;
                };
                if !step.status.is_terminal() {
                    continue;
                }
                let span = state
                    .step_spans
                    .0
                    .remove(&step_id)
                    .unwrap_or_else(|| step_span(step));
                let took = (step.updated_at - step.created_at)
                    .num_milliseconds()
                    .max(0);
                span.record("step.status", step.status.as_str());
                span.record("step.duration_ms", took);
                span.record("step.attempt", step.attempt);
            }
        }
    }
}

fn step_span(step: &StepState) -> Span {
    tracing::info_span!(
        target: TARGET,
        "step",
        step.id = %step.id,
        tool.id = %step.tool_id,
        step.remote = step.remote,
        step.attempt = step.attempt,
        step.status = Empty,
        step.duration_ms = Empty,
    )
}

/// Returns the W3C context a runner continues for a step's job: the step's span when it is
/// open, else the execution's.
pub(super) fn job_traceparent(state: &ExecutionActorState, step_id: &StepId) -> Option<String> {
    let traces = state.ctx.config.traces.as_ref()?;
    state
        .step_spans
        .0
        .get(step_id)
        .and_then(|span| traces.traceparent(span))
        .or_else(|| state.exec.traceparent.clone())
}

/// Stamps a push to the agent with the execution's trace context (when traces are on).
pub(super) fn stamp(state: &ExecutionActorState, push: &mut Push) {
    if state.ctx.config.traces.is_some() {
        crate::trace::stamp(push, state.exec.traceparent.as_deref());
    }
}

/// Stamps a push to the agent with the execution's trace context and returns its span (a
/// child of the current span), to be entered while it is handed on. Disabled when traces are
/// off, and then the push is left as it is.
pub(super) fn push(state: &ExecutionActorState, push: &mut Push, consumer_id: &ConsumerId) -> Span {
    if state.ctx.config.traces.is_none() {
        return Span::none();
    }
    crate::trace::stamp(push, state.exec.traceparent.as_deref());
    tracing::info_span!(
        target: TARGET,
        "push",
        otel.name = %format_args!("push {}", push.event),
        push.event = push.event,
        execution.id = %state.exec.id,
        consumer.id = consumer_id.as_str(),
        step.id = push.data.get("step_id").and_then(serde_json::Value::as_str),
    )
}
