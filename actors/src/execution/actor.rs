//! `ExecutionActor`: the single writer of one execution. Each message is decoded, decided by the
//! pure state machine, made durable through the store writer, applied to the in-memory state,
//! and only then are replies sent and neighbours told. The mailbox is the lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;

use super::commands::{Effect, JobSpec, StepOutcome};
use super::machine::{self, Transition};
use super::messages::ExecutionMsg;
use super::rejection::Rejection;
use super::state::ExecutionState;
use super::watchdog;
use crate::agent_group::AgentGroupMsg;
use crate::events::{Event, seal};
use crate::ids::{ExecutionId, StepId};
use crate::kernel::KernelError;
use crate::kernel::context::{Ctx, call, write};
use crate::policy::{PolicyDecision, PolicyInput, PolicyMsg};
use crate::runner::DispatcherMsg;
use crate::status::StepStatus;
use crate::store::Commit;
use crate::time::{self, Timestamp};

/// How an execution actor comes to life.
pub enum StartMode {
    /// A new execution whose `execution.created` is already durable.
    Created(Box<ExecutionState>),
    /// An existing execution, rebuilt from its events.
    Rehydrate,
    /// An execution whose actor kept crashing: rebuilt, then failed with this error.
    GiveUp {
        /// Error recorded in `execution.failed`.
        error: String,
    },
}

/// Records `execution.created` for a new execution (through the store writer, so concurrent
/// creations share transactions) and returns its state.
pub async fn record_creation(
    ctx: &Ctx,
    id: &ExecutionId,
    agent_id: &str,
    input: Value,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<ExecutionState, KernelError> {
    let labels_json = labels.map_or(Value::Null, |labels| serde_json::json!(labels));
    let created = machine::create(agent_id, input, labels_json);
    let events = seal(id, 0, ctx.now(), None, vec![created]);
    let exec = ExecutionState::from_events(&events)
        .ok_or_else(|| KernelError::Unavailable("execution.created did not fold".into()))?;
    ctx.commit(Commit { execution: exec.row(), events, steps: Vec::new() }).await?;
    ctx.metrics.execution_outcome("created");
    ctx.metrics.execution_moved(None, exec.status);
    Ok(exec)
}

/// Arguments of an execution actor.
pub struct ExecutionArgs {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Execution id.
    pub id: ExecutionId,
    /// How it starts.
    pub mode: StartMode,
}

/// State of an execution actor.
pub struct ExecutionActorState {
    ctx: Arc<Ctx>,
    exec: ExecutionState,
    rehydrated: bool,
    /// A commit failed: the store may hold more than memory (a `COMMIT` whose answer was lost),
    /// so the state is reloaded from the store before the next message.
    stale: bool,
    armed: HashMap<StepId, Timestamp>,
    /// Due times of the stall watchdog timers already armed.
    checks: BTreeSet<Timestamp>,
    span: tracing::Span,
}

/// The actor owning one execution.
pub struct ExecutionActor;

async fn load_events(ctx: &Ctx, id: &ExecutionId) -> Result<Vec<Event>, KernelError> {
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

impl Actor for ExecutionActor {
    type Msg = ExecutionMsg;
    type State = ExecutionActorState;
    type Arguments = ExecutionArgs;

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, args: ExecutionArgs) -> Result<Self::State, ActorProcessingErr> {
        let span = tracing::info_span!("execution", execution.id = %args.id);
        let ctx = args.ctx;
        let give_up = match &args.mode {
            StartMode::GiveUp { error } => Some(error.clone()),
            _ => None,
        };
        let (exec, rehydrated) = match args.mode {
            StartMode::Created(exec) => (*exec, false),
            StartMode::Rehydrate | StartMode::GiveUp { .. } => {
                let events = load_events(&ctx, &args.id).await?;
                let exec = ExecutionState::from_events(&events)
                    .ok_or_else(|| KernelError::Rejected(Rejection::ExecutionNotFound(args.id.to_string())))?;
                ctx.metrics.execution_moved(None, exec.status);
                (exec, true)
            }
        };
        let mut state = ExecutionActorState {
            ctx,
            exec,
            rehydrated,
            stale: false,
            armed: HashMap::new(),
            checks: BTreeSet::new(),
            span,
        };
        if let Some(error) = give_up
            && let Some(transition) = machine::fail_by_kernel(&state.exec, &error) {
                apply(&mut state, transition).await?;
            }
        Ok(state)
    }

    async fn post_start(&self, myself: ActorRef<Self::Msg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        if state.exec.status.is_terminal() {
            return Ok(());
        }
        let deadline = add(state.exec.created_at, state.ctx.config.execution.execution_timeout);
        send_at(&myself, state.ctx.now(), deadline, || ExecutionMsg::ExecutionDeadlineReached);
        arm_step_timers(&myself, state);
        arm_stall_checks(&myself, state);
        if let Some(session) = &state.exec.session {
            write(&state.ctx.sessions).insert(session.id.clone(), state.exec.id.clone());
        }
        if state.rehydrated {
            recover(state);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        let _entered = span.enter();
        if state.stale
            && let Err(error) = reload(state).await
        {
            refuse(message, error);
            return Ok(());
        }
        handle_message(&myself, message, state).await?;
        arm_step_timers(&myself, state);
        arm_stall_checks(&myself, state);
        if state.exec.status.is_terminal() {
            myself.stop(Some("terminal".into()));
        }
        Ok(())
    }
}

/// Rebuilds the state from the store after a failed commit.
async fn reload(state: &mut ExecutionActorState) -> Result<(), KernelError> {
    let events = load_events(&state.ctx, &state.exec.id).await?;
    let exec = ExecutionState::from_events(&events)
        .ok_or_else(|| KernelError::Rejected(Rejection::ExecutionNotFound(state.exec.id.to_string())))?;
    if exec.last_sequence != state.exec.last_sequence {
        tracing::warn!(execution.id = %exec.id, "a commit reported as failed had landed; state reloaded from the store");
        state.ctx.metrics.execution_moved(Some(state.exec.status), exec.status);
    }
    state.exec = exec;
    state.armed.clear();
    state.checks.clear();
    state.stale = false;
    Ok(())
}

/// Answers a message with `error` without handling it (the state could not be reloaded).
fn refuse(message: ExecutionMsg, error: KernelError) {
    match message {
        ExecutionMsg::SubmitIntent { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::ReportStepResult { reply, .. }
        | ExecutionMsg::ReportRunnerResult { reply, .. }
        | ExecutionMsg::MarkStepStarted { reply, .. }
        | ExecutionMsg::DeliverSignal { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::Cancel { reply } => drop(reply.send(Err(error))),
        ExecutionMsg::OfferToConsumer { reply, .. } => drop(reply.send(Err(error))),
        ExecutionMsg::ClaimJob { reply, .. } => drop(reply.send(None)),
        ExecutionMsg::GetExecution { .. }
        | ExecutionMsg::ConsumerLost { .. }
        | ExecutionMsg::RunnerLost { .. }
        | ExecutionMsg::StepDeadlineReached { .. }
        | ExecutionMsg::ExecutionDeadlineReached
        | ExecutionMsg::StallCheck => {}
        #[cfg(any(test, feature = "testing"))]
        ExecutionMsg::Crash => {}
    }
}

/// Re-announces a rebuilt execution to its neighbours: pending ones to the agent group, held
/// sessions for a reconnect, remote jobs to the dispatcher (retries waiting for `not_before`
/// queued at once, jobs that may be in a runner's hands held for the runner grace first).
fn recover(state: &ExecutionActorState) {
    let exec = &state.exec;
    if exec.status == crate::status::ExecutionStatus::Pending {
        state.ctx.tell_agent_group(&exec.agent_id, AgentGroupMsg::ExecutionPending { execution_id: exec.id.clone(), reply: None });
    } else if let Some(session) = &exec.session {
        state.ctx.tell_agent_group(&exec.agent_id, AgentGroupMsg::SessionRestored {
            consumer_id: session.consumer_id.clone(),
            execution_id: exec.id.clone(),
        });
    }
    for step in exec.active_steps().filter(|step| step.remote && !step.awaiting_approval) {
        let job = JobSpec {
            job_id: step.job_id.clone().unwrap_or_else(|| crate::ids::JobId::generate().into_string()),
            execution_id: exec.id.to_string(),
            step_id: step.id.clone(),
            attempt: step.attempt,
            tool_id: step.tool_id.clone(),
            arguments: step.arguments.clone(),
            deadline: step.deadline.unwrap_or_else(|| state.ctx.now()),
            not_before: step.not_before,
        };
        let waiting_retry = step.status == crate::status::StepStatus::Pending;
        state.ctx.tell_dispatcher(if waiting_retry { DispatcherMsg::Enqueue(job) } else { DispatcherMsg::Recovered(job) });
    }
}

async fn handle_message(
    myself: &ActorRef<ExecutionMsg>,
    message: ExecutionMsg,
    state: &mut ExecutionActorState,
) -> Result<(), ActorProcessingErr> {
    let settings = state.ctx.config.execution.clone();
    match message {
        ExecutionMsg::SubmitIntent { session_id, session_owner, intent, reply } => {
            let result = submit_intent(state, &session_id, session_owner.as_ref(), intent).await;
            let _ = reply.send(result);
        }
        ExecutionMsg::ReportStepResult { session_id, session_owner, outcome, reply } => {
            let result = match machine::check_session(&state.exec, &session_id, session_owner.as_ref()) {
                Ok(()) => decide_and_apply(state, |exec| machine::agent_step_result(exec, &outcome)).await,
                Err(rejection) => Err(rejection.into()),
            };
            count_step(state, &outcome, &result);
            let _ = reply.send(result);
        }
        ExecutionMsg::ReportRunnerResult { outcome, reply } => {
            let (now, jitter) = (state.ctx.now(), jitter(&settings));
            let result =
                decide_and_apply(state, |exec| machine::runner_result(exec, &outcome, now, &settings, jitter)).await;
            count_step(state, &outcome, &result);
            let _ = reply.send(result);
        }
        ExecutionMsg::MarkStepStarted { step_id, runner_id, reply } => {
            let result = decide_and_apply(state, |exec| machine::step_started(exec, &step_id, &runner_id)).await;
            let _ = reply.send(result);
        }
        ExecutionMsg::DeliverSignal { signal_type, payload, reply } => {
            let now = state.ctx.now();
            let result =
                {
                let holder_lost = state.exec.session.as_ref().is_some_and(|session| {
                    state.ctx.consumer_lost(&state.exec.agent_id, &session.consumer_id)
                });
                decide_and_apply(state, |exec| machine::signal(exec, &signal_type, &payload, now, &settings, holder_lost))
                    .await
            };
            let _ = reply.send(result);
        }
        ExecutionMsg::Cancel { reply } => {
            let result = decide_and_apply(state, machine::cancel).await.map(|()| state.exec.row());
            if result.is_ok() {
                state.ctx.metrics.execution_outcome("cancelled");
            }
            let _ = reply.send(result);
        }
        ExecutionMsg::OfferToConsumer { consumer_id, reply } => {
            let result = match machine::assign(&state.exec, &consumer_id) {
                Ok((transition, push)) => apply(state, transition).await.map(|()| push),
                Err(rejection) => Err(rejection.into()),
            };
            if result.is_ok() {
                state.rehydrated = false;
            }
            let _ = reply.send(result);
        }
        ExecutionMsg::ClaimJob { job, runner_id, reply } => {
            let claimed = match machine::claim_job(&state.exec, &job, &runner_id, state.ctx.now(), &settings) {
                Some((transition, delivered)) => apply(state, transition).await.ok().map(|()| delivered),
                None => None,
            };
            let _ = reply.send(claimed);
        }
        ExecutionMsg::ConsumerLost { consumer_id, reason } => {
            if let Some(transition) = machine::consumer_lost(&state.exec, &consumer_id, &reason) {
                apply(state, transition).await?;
            }
        }
        ExecutionMsg::RunnerLost { step_id, job_id } => {
            let (now, jitter) = (state.ctx.now(), jitter(&settings));
            if let Some(transition) = machine::runner_lost(&state.exec, &step_id, &job_id, now, &settings, jitter) {
                apply(state, transition).await?;
            }
        }
        ExecutionMsg::StepDeadlineReached { step_id } => {
            state.armed.remove(&step_id);
            if let Some(transition) = machine::step_deadline(&state.exec, &step_id, state.ctx.now()) {
                apply(state, transition).await?;
            }
        }
        ExecutionMsg::ExecutionDeadlineReached => {
            let deadline = add(state.exec.created_at, settings.execution_timeout);
            let now = state.ctx.now();
            if let Some(transition) = machine::execution_deadline(&state.exec, deadline, now) {
                apply(state, transition).await?;
            } else if !state.exec.status.is_terminal() {
                send_at(myself, now, deadline, || ExecutionMsg::ExecutionDeadlineReached);
            }
        }
        ExecutionMsg::StallCheck => {
            let now = state.ctx.now();
            state.checks.retain(|due| *due > now);
            if let Some(transition) = watchdog::check(&state.exec, now, &settings) {
                let stalls = transition.events.clone();
                apply(state, transition).await?;
                report_stalls(state, &stalls);
            }
        }
        ExecutionMsg::GetExecution { reply } => {
            let _ = reply.send(state.exec.row());
        }
        #[cfg(any(test, feature = "testing"))]
        ExecutionMsg::Crash => return Err("crash requested".into()),
    }
    Ok(())
}

async fn submit_intent(
    state: &mut ExecutionActorState,
    session_id: &str,
    session_owner: Option<&ExecutionId>,
    intent: super::commands::Intent,
) -> Result<super::commands::IntentReply, KernelError> {
    machine::check_session(&state.exec, session_id, session_owner)?;
    if let Some(reply) = machine::precheck_intent(&state.exec, &intent)? {
        return Ok(reply);
    }
    let verdict = match &intent {
        super::commands::Intent::InvokeTool { tool_id, arguments, .. } => Some(check_policy(state, tool_id, arguments).await?),
        _ => None,
    };
    let settings = state.ctx.config.execution.clone();
    let (transition, reply) = machine::intent(&state.exec, &intent, verdict.as_ref(), state.ctx.now(), &settings)?;
    apply(state, transition).await?;
    let decision = match (&reply, &verdict) {
        (reply, _) if reply.pending_approval => "pending_approval",
        (reply, Some(verdict)) if !reply.accepted && verdict.reason.starts_with("rate limit") => "rate_limited",
        (reply, _) if !reply.accepted => "denied",
        _ => "accepted",
    };
    state.ctx.metrics.intent(intent.type_name(), decision);
    match &intent {
        super::commands::Intent::Complete { .. } => state.ctx.metrics.execution_outcome("completed"),
        super::commands::Intent::Fail { .. } => state.ctx.metrics.execution_outcome("failed"),
        _ => {}
    }
    Ok(reply)
}

async fn check_policy(state: &ExecutionActorState, tool_id: &str, arguments: &Value) -> Result<PolicyDecision, KernelError> {
    let policy = state.ctx.policy().ok_or_else(|| KernelError::Unavailable("policy actor is not running".into()))?;
    let now = state.ctx.now();
    let input = PolicyInput {
        action: "tool.invoke".to_owned(),
        agent_id: state.exec.agent_id.to_string(),
        tool_id: tool_id.to_owned(),
        execution_id: state.exec.id.to_string(),
        labels: state.exec.labels.clone().unwrap_or_default(),
        arguments: arguments.clone(),
        step_count: state.exec.step_count,
        duration_ms: u64::try_from((now - state.exec.created_at).num_milliseconds()).unwrap_or(0),
        now,
    };
    call(&policy, |reply| PolicyMsg::CheckIntent(input, reply), state.ctx.config.call_timeout, "policy actor").await
}

fn count_step(state: &ExecutionActorState, outcome: &StepOutcome, result: &Result<(), KernelError>) {
    if result.is_ok()
        && let Some(step) = state.exec.step(&outcome.step_id)
            && step.status.is_terminal() {
                state.ctx.metrics.step_ended(step.status.as_str());
            }
}

async fn decide_and_apply(
    state: &mut ExecutionActorState,
    decide: impl FnOnce(&ExecutionState) -> Result<Transition, Rejection>,
) -> Result<(), KernelError> {
    let transition = decide(&state.exec)?;
    apply(state, transition).await
}

/// Makes a transition durable, applies it, then runs its effects. On a store failure nothing
/// changes in memory and the error is returned.
async fn apply(state: &mut ExecutionActorState, transition: Transition) -> Result<(), KernelError> {
    let consumer = state.exec.session.as_ref().map(|session| session.consumer_id.clone());
    let session_before = state.exec.session.as_ref().map(|session| session.id.clone());
    if !transition.events.is_empty() {
        let events = seal(&state.exec.id, state.exec.last_sequence, state.ctx.now(), None, transition.events);
        let mut next = state.exec.clone();
        let mut touched: Vec<StepId> = Vec::new();
        for event in &events {
            next.apply(event);
            if let Some(step_id) = &event.step_id
                && !touched.contains(step_id) {
                    touched.push(step_id.clone());
                }
        }
        let steps = touched.iter().filter_map(|id| next.step(id)).map(|step| next.step_row(step)).collect();
        if let Err(error) = state.ctx.commit(Commit { execution: next.row(), events, steps }).await {
            state.stale = true;
            return Err(error);
        }
        state.ctx.metrics.execution_moved(Some(state.exec.status), next.status);
        state.exec = next;
    }
    let session_after = state.exec.session.as_ref().map(|session| session.id.clone());
    if session_before != session_after {
        let mut sessions = write(&state.ctx.sessions);
        if let Some(old) = &session_before {
            sessions.remove(old);
        }
        if let Some(new) = &session_after {
            sessions.insert(new.clone(), state.exec.id.clone());
        }
    }
    run_effects(state, consumer, transition.effects);
    Ok(())
}

fn run_effects(state: &ExecutionActorState, consumer: Option<String>, effects: Vec<Effect>) {
    let exec = &state.exec;
    for effect in effects {
        match effect {
            Effect::PushToAgent(push) => {
                if let Some(consumer_id) = &consumer {
                    let message = AgentGroupMsg::Push { consumer_id: consumer_id.clone(), push };
                    state.ctx.tell_agent_group(&exec.agent_id, message);
                }
            }
            Effect::EnqueueJob(job) => state.ctx.tell_dispatcher(DispatcherMsg::Enqueue(job)),
            Effect::StepEnded { step_id, cancel_reason } => {
                state.ctx.tell_dispatcher(DispatcherMsg::StepEnded { step_id, cancel_reason });
            }
            Effect::BecamePending => {
                let message = AgentGroupMsg::ExecutionPending { execution_id: exec.id.clone(), reply: None };
                state.ctx.tell_agent_group(&exec.agent_id, message);
            }
            Effect::SessionEnded { consumer_id } => {
                let message = AgentGroupMsg::SessionEnded { consumer_id, execution_id: exec.id.clone() };
                state.ctx.tell_agent_group(&exec.agent_id, message);
            }
        }
    }
}

fn arm_step_timers(myself: &ActorRef<ExecutionMsg>, state: &mut ExecutionActorState) {
    // Step deadlines are not enforced while a signal wait or an approval blocks the
    // execution; the next message after the resume re-arms them.
    if state.exec.hard_blocked() || state.exec.status.is_terminal() {
        return;
    }
    let mut wanted: Vec<(StepId, Timestamp)> = Vec::new();
    for step in state.exec.active_steps() {
        if let Some(deadline) = step.deadline
            && (step.status != StepStatus::Pending || !step.remote || step.not_before.is_none()) {
                wanted.push((step.id.clone(), deadline));
            }
    }
    let now = state.ctx.now();
    for (step_id, deadline) in wanted {
        if state.armed.get(&step_id) == Some(&deadline) {
            continue;
        }
        state.armed.insert(step_id.clone(), deadline);
        send_at(myself, now, deadline, move || ExecutionMsg::StepDeadlineReached { step_id });
    }
}

/// Arms a watchdog timer for every stall that is not recorded yet and has no timer.
fn arm_stall_checks(myself: &ActorRef<ExecutionMsg>, state: &mut ExecutionActorState) {
    let now = state.ctx.now();
    for due in watchdog::due_times(&state.exec, &state.ctx.config.execution) {
        if state.checks.insert(due) {
            send_at(myself, now, due, || ExecutionMsg::StallCheck);
        }
    }
}

/// Logs and counts the stalls just recorded.
fn report_stalls(state: &ExecutionActorState, stalls: &[crate::events::NewEvent]) {
    for stall in stalls {
        if let crate::events::EventBody::ExecutionStalled { reason, step_id, runner_id, since } = &stall.body {
            tracing::warn!(
                execution.id = %state.exec.id,
                agent.id = %state.exec.agent_id,
                reason = %reason,
                step.id = step_id.as_deref().unwrap_or(""),
                runner.id = runner_id.as_deref().unwrap_or(""),
                since = %time::format(since),
                "execution stalled"
            );
            state.ctx.metrics.stall(reason);
        }
    }
}

/// Draws where a retry delay falls within its jitter range (1.0, the full backoff, when
/// jitter is off).
fn jitter(settings: &super::commands::ExecutionSettings) -> f64 {
    if settings.retry_jitter { rand::random::<f64>() } else { 1.0 }
}

fn send_at(
    myself: &ActorRef<ExecutionMsg>,
    now: Timestamp,
    at: Timestamp,
    message: impl FnOnce() -> ExecutionMsg + Send + 'static,
) {
    let delay = (at - now).to_std().unwrap_or_default();
    myself.send_after(delay, message);
}

fn add(at: Timestamp, duration: std::time::Duration) -> Timestamp {
    chrono::Duration::from_std(duration).ok().and_then(|delta| at.checked_add_signed(delta)).unwrap_or(at)
}
