//! `RunnerActor`: one runner connection. It claims each job it is handed from the job's
//! execution (which drops stale jobs) and only then writes `job.assigned` to the stream;
//! it also relays cancel notices. Temporary: never restarted, its connection is gone.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use tokio::sync::mpsc;

use super::messages::{DispatcherMsg, RunnerMsg};
use crate::execution::{ExecutionMsg, JobSpec};
use crate::ids::{ConsumerId, RunnerId};
use crate::kernel::context::{Ctx, call};
use crate::push::Push;

/// Arguments of a runner actor.
pub struct RunnerArgs {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Runner id.
    pub runner_id: RunnerId,
    /// Consumer id of the connection.
    pub consumer_id: ConsumerId,
    /// Connection number.
    pub connection: u64,
    /// The stream's sender.
    pub sender: mpsc::Sender<Push>,
}

/// The actor of one runner connection.
pub struct RunnerActor;

impl Actor for RunnerActor {
    type Msg = RunnerMsg;
    type State = RunnerArgs;
    type Arguments = RunnerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: RunnerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RunnerMsg::Deliver(job) => {
                let delivered = claim(state, job).await;
                let sent = delivered.is_some_and(|job| {
                    let span = push_span(state, &job);
                    span.in_scope(|| state.sender.try_send(job_assigned(&job)).is_ok())
                });
                if !sent {
                    state.ctx.tell_dispatcher(DispatcherMsg::ConnectionFree {
                        runner_id: state.runner_id.clone(),
                        consumer_id: state.consumer_id.clone(),
                    });
                }
            }
            RunnerMsg::Notify(push) => {
                let _ = state.sender.try_send(push);
            }
        }
        Ok(())
    }
}

async fn claim(state: &RunnerArgs, job: JobSpec) -> Option<JobSpec> {
    let execution = state.ctx.execution(&job.execution_id)?;
    let runner_id = state.runner_id.clone();
    let message = |reply| ExecutionMsg::ClaimJob {
        job,
        runner_id,
        reply,
    };
    call(
        &execution,
        message,
        state.ctx.config.call_timeout,
        "execution actor",
    )
    .await
    .ok()
    .flatten()
}

/// The span of a `job.assigned` push, a child of the job's trace context (disabled when traces
/// are off).
fn push_span(state: &RunnerArgs, job: &JobSpec) -> tracing::Span {
    let Some(traces) = state.ctx.config.traces.as_ref() else {
        return tracing::Span::none();
    };
    let span = tracing::info_span!(
        target: crate::trace::TARGET,
        parent: None,
        "push",
        otel.name = "push job.assigned",
        push.event = "job.assigned",
        execution.id = %job.execution_id,
        step.id = %job.step_id,
        tool.id = %job.tool_id,
        job.id = %job.job_id,
        runner.id = %state.runner_id,
        consumer.id = %state.consumer_id,
    );
    if let Some(traceparent) = job.traceparent.as_deref() {
        traces.set_parent(&span, traceparent);
    }
    span
}

fn job_assigned(job: &JobSpec) -> Push {
    let not_before = job.not_before.map_or_else(
        || "0001-01-01T00:00:00Z".to_owned(),
        |at| crate::time::format(&at),
    );
    let mut push = Push {
        event: "job.assigned",
        data: json!({
            "id": job.job_id,
            "execution_id": job.execution_id,
            "step_id": job.step_id.as_str(),
            "attempt": job.attempt,
            "tool_id": job.tool_id,
            "tool_version": 0,
            "arguments": job.arguments,
            "deadline": crate::time::format(&job.deadline),
            "not_before": not_before,
        }),
    };
    if let Some(key) = &job.idempotency_key {
        push.data["idempotency_key"] = json!(key);
    }
    crate::trace::stamp(&mut push, job.traceparent.as_deref());
    push
}
