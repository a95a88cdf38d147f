//! Building an execution actor's state: recording a creation, rebuilding from the log (at
//! start, and after a failed commit), and re-announcing a rebuilt execution to its neighbours.

use super::actor::ExecutionActorState;
use super::commands::JobSpec;
use super::machine::{self};
use super::messages::{ExecutionMsg, LlmAdmission};
use super::rejection::Rejection;
use super::state::ExecutionState;
use crate::agent_group::AgentGroupMsg;
use crate::events::{Event, NewEvent, seal};
use crate::guardrails::CreateOptions;
use crate::guardrails::concurrency::LabelSet;
use crate::ids::{AgentId, ExecutionId};
use crate::kernel::KernelError;
use crate::kernel::context::Ctx;
use crate::runner::DispatcherMsg;
use crate::store::Commit;
use ractor::ActorRef;
use serde_json::Value;
use std::collections::BTreeMap;

/// Records `execution.created` for a new execution (through the store writer, so concurrent
/// creations share transactions) and returns its state.
pub async fn record_creation(
    ctx: &Ctx,
    id: &ExecutionId,
    agent_id: &AgentId,
    input: Value,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<ExecutionState, KernelError> {
    record_creation_with(ctx, id, agent_id, input, labels, CreateOptions::default()).await
}

/// [`record_creation`] with a priority and an idempotency key.
pub async fn record_creation_with(
    ctx: &Ctx,
    id: &ExecutionId,
    agent_id: &AgentId,
    input: Value,
    labels: Option<&BTreeMap<String, String>>,
    options: CreateOptions,
) -> Result<ExecutionState, KernelError> {
    record_creation_decided(ctx, id, agent_id, input, labels, options, Vec::new()).await
}

/// [`record_creation_with`] followed, in the same commit, by the `hook.decided` events of the
/// creation's `pre_create` hooks (`execution.created` stays sequence 1).
pub async fn record_creation_decided(
    ctx: &Ctx,
    id: &ExecutionId,
    agent_id: &AgentId,
    input: Value,
    labels: Option<&BTreeMap<String, String>>,
    options: CreateOptions,
    decisions: Vec<NewEvent>,
) -> Result<ExecutionState, KernelError> {
    let labels_json = labels.map_or(Value::Null, |labels| serde_json::json!(labels));
    let created = machine::create(
        agent_id,
        input,
        labels_json,
        options,
        creation_traceparent(ctx),
    );
    let mut new_events = Vec::with_capacity(1 + decisions.len());
    new_events.push(created);
    new_events.extend(decisions);
    let mut events = seal(id, 0, ctx.now(), None, new_events);
    let principal = crate::principal::current().unwrap_or_else(crate::principal::system);
    for event in &mut events {
        event.principal = Some(principal.clone());
    }
    let exec = ExecutionState::from_events(&events)
        .ok_or_else(|| KernelError::Unavailable("execution.created did not fold".into()))?;
    ctx.commit(Commit {
        execution: exec.row(),
        events,
        steps: Vec::new(),
        previous_status: None,
    })
    .await?;
    ctx.metrics.execution_outcome("created");
    ctx.metrics.execution_moved(&exec.id, None, exec.status);
    Ok(exec)
}

/// The trace context of the creating request (the current span), when traces are exported.
fn creation_traceparent(ctx: &Ctx) -> Option<String> {
    let traces = ctx.config.traces.as_ref()?;
    traces.traceparent(&tracing::Span::current())
}

pub(super) async fn load_events(ctx: &Ctx, id: &ExecutionId) -> Result<Vec<Event>, KernelError> {
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, |event: &Event| event.sequence);
        let page = ctx.store.events(id, after, 1000).await?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

/// Rebuilds the state from the store after a failed commit.
pub(super) async fn reload(state: &mut ExecutionActorState) -> Result<(), KernelError> {
    let events = load_events(&state.ctx, &state.exec.id).await?;
    let exec = ExecutionState::from_events(&events).ok_or_else(|| {
        KernelError::Rejected(Rejection::ExecutionNotFound(state.exec.id.to_string()))
    })?;
    // What the store held before the failed commit (the state in memory has it applied).
    let (status, last_sequence) = state
        .committed
        .unwrap_or((state.exec.status, state.exec.last_sequence));
    if exec.last_sequence != last_sequence {
        tracing::warn!(execution.id = %exec.id, "a commit reported as failed had landed; state reloaded from the store");
        state
            .ctx
            .metrics
            .execution_moved(&exec.id, Some(status), exec.status);
    }
    state.committed = None;
    state.exec = exec;
    state.timers.clear_work();
    state.stale = false;
    resend_landed_assignment(state);
    Ok(())
}

/// An assignment answered as failed makes its agent group offer the execution again later;
/// if the commit had landed, the execution is no longer pending and that offer is refused, so
/// the consumer would never hear of the session the store gave it. The push of the landed
/// assignment goes to that consumer now, through its group, with the session bound to it.
fn resend_landed_assignment(state: &mut ExecutionActorState) {
    let Some((consumer_id, push)) = state.assignment_in_doubt.take() else {
        return;
    };
    let exec = &state.exec;
    let landed = exec.session.as_ref().is_some_and(|session| {
        session.consumer_id == consumer_id
            && push.data["session_id"].as_str() == Some(session.id.as_str())
    });
    if !landed || exec.status.is_terminal() {
        return;
    }
    tracing::info!(execution.id = %exec.id, consumer.id = %consumer_id, "an assignment answered as failed had landed; its push is sent now");
    state.ctx.tell_agent_group(
        &exec.agent_id,
        AgentGroupMsg::SessionRestored {
            consumer_id: consumer_id.clone(),
            execution_id: exec.id.clone(),
            labels: exec.labels.as_deref().map(LabelSet::new),
        },
    );
    state
        .ctx
        .tell_agent_group(&exec.agent_id, AgentGroupMsg::Push { consumer_id, push });
}

/// How long an internal notice waits before it is tried again when the state could not be
/// reloaded (the store is down).
const NOTICE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Answers a message with `error` without handling it (the state could not be reloaded).
/// Internal notices (lost consumer or runner, timers) have nobody to answer: they are sent
/// again a little later, so a store outage delays them instead of losing them.
pub(super) fn refuse(myself: &ActorRef<ExecutionMsg>, message: ExecutionMsg, error: KernelError) {
    match message {
        ExecutionMsg::SubmitIntent { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::ReportStepResult { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::ReportRunnerResult { reply, .. }
        | ExecutionMsg::MarkStepStarted { reply, .. }
        | ExecutionMsg::RecordStepProgress { reply, .. }
        | ExecutionMsg::DeliverSignal { reply, .. }
        | ExecutionMsg::ReconcileStep { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::Cancel { reply } => drop(reply.send(Err(error))),
        ExecutionMsg::OfferToConsumer { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::ClaimJob { reply, .. } => drop(reply.send(None)),
        ExecutionMsg::GetApproval { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::RecordLlmCall { reply, .. } | ExecutionMsg::EndBudgetWait { reply } => {
            drop(reply.send(Err(error)));
        }
        ExecutionMsg::AdmitLlmCall { reply, .. } => drop(reply.send(LlmAdmission::Finished)),
        ExecutionMsg::GetExecution { .. }
        | ExecutionMsg::IdleCheck { .. }
        | ExecutionMsg::Passivate { .. } => {}
        notice @ (ExecutionMsg::ConsumerLost { .. }
        | ExecutionMsg::RunnerLost { .. }
        | ExecutionMsg::Wake) => {
            myself.send_after(NOTICE_RETRY, move || notice);
        }
        #[cfg(any(test, feature = "testing"))]
        ExecutionMsg::Crash => {}
        ExecutionMsg::ActingAs { message, .. } => refuse(myself, *message, error),
    }
}

/// Re-announces a rebuilt execution to its neighbours: pending ones to the agent group, held
/// sessions for a reconnect, remote jobs to the dispatcher (retries waiting for `not_before`
/// queued at once, jobs that may be in a runner's hands held for the runner grace first).
pub(super) fn recover(state: &ExecutionActorState) {
    let exec = &state.exec;
    if exec.status == crate::status::ExecutionStatus::Pending {
        state.ctx.tell_agent_group(
            &exec.agent_id,
            AgentGroupMsg::ExecutionPending {
                execution_id: exec.id.clone(),
                priority: exec.priority,
                labels: exec.labels.as_deref().map(LabelSet::new),
                reply: None,
            },
        );
    } else if let Some(session) = &exec.session {
        state.ctx.tell_agent_group(
            &exec.agent_id,
            AgentGroupMsg::SessionRestored {
                consumer_id: session.consumer_id.clone(),
                execution_id: exec.id.clone(),
                labels: exec.labels.as_deref().map(LabelSet::new),
            },
        );
    }
    // A step whose outcome is unknown waits for an operator's answer: no job until then.
    for step in exec
        .active_steps()
        .filter(|step| step.remote && !step.awaiting_approval && !step.outcome_unknown)
    {
        let job = JobSpec {
            job_id: step
                .job_id
                .clone()
                .unwrap_or_else(crate::ids::JobId::generate),
            execution_id: exec.id.clone(),
            step_id: step.id.clone(),
            attempt: step.attempt,
            tool_id: step.tool_id.clone(),
            arguments: step.arguments.clone(),
            deadline: step.deadline.unwrap_or_else(|| state.ctx.now()),
            not_before: step.not_before,
            traceparent: None,
            idempotency_key: None,
        };
        let waiting_retry = step.status == crate::status::StepStatus::Pending;
        state.ctx.tell_dispatcher(if waiting_retry {
            DispatcherMsg::Enqueue(job)
        } else if step.at_most_once && step.delivered() {
            DispatcherMsg::RecoveredAtMostOnce(job)
        } else {
            DispatcherMsg::Recovered(job)
        });
    }
}
