//! The connection side of the kernel handle: agents' and runners' push streams, runners'
//! tool catalogues, and what runners report back (step started, step result).

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::handle::Kernel;
use super::types::{KernelError, PushStream, ToolEntry, ToolSchema};
use crate::agent_group::AgentGroupMsg;
use crate::execution::{ExecutionMsg, Rejection, StepOutcome};
use crate::ids::{AgentId, ConsumerId, ExecutionId, RunnerId, StepId, ToolId};
use crate::runner::DispatcherMsg;

impl Kernel {
    /// Records a runner's result; always frees the runner connection named by
    /// `(runner_id, consumer_id)` afterwards, whatever the outcome.
    pub async fn runner_result(
        &self,
        runner_id: &RunnerId,
        consumer_id: Option<&ConsumerId>,
        execution_id: &ExecutionId,
        outcome: StepOutcome,
    ) -> Result<(), KernelError> {
        let step_id = outcome.step_id.clone();
        let result = self
            .ask(execution_id, |reply| ExecutionMsg::ReportRunnerResult {
                outcome: outcome.clone(),
                reply,
            })
            .await
            .map_err(|error| unknown_step(error, &step_id));
        self.count_runner_result(runner_id, result.is_ok().then_some(outcome.success));
        if let Some(consumer_id) = consumer_id {
            self.release_runner(runner_id, consumer_id);
        }
        result
    }

    /// Checks that a runner's result or `started` comes from the connection holding the job;
    /// `Ok(Err(reason))` when another connection holds it (nothing is recorded then).
    pub async fn check_job_report(
        &self,
        report: crate::runner::JobReport,
    ) -> Result<Result<(), String>, KernelError> {
        crate::runner::holders::check(&self.ctx, report).await
    }

    /// Frees a runner connection without recording anything (a result that could not be
    /// parsed still means the runner is done with its job).
    pub fn release_runner(&self, runner_id: &RunnerId, consumer_id: &ConsumerId) {
        if runner_id.as_str().is_empty() || consumer_id.as_str().is_empty() {
            return;
        }
        self.ctx.tell_dispatcher(DispatcherMsg::ConnectionFree {
            runner_id: runner_id.clone(),
            consumer_id: consumer_id.clone(),
        });
    }

    /// Records that a runner started a step.
    pub async fn step_started(
        &self,
        execution_id: &ExecutionId,
        step_id: &StepId,
        runner_id: &RunnerId,
    ) -> Result<(), KernelError> {
        self.ask(execution_id, |reply| ExecutionMsg::MarkStepStarted {
            step_id: step_id.clone(),
            runner_id: runner_id.clone(),
            reply,
        })
        .await
        .map_err(|error| unknown_step(error, step_id))
    }

    /// Records a runner's progress report of a step it holds (bounded, docs/mcp.md).
    pub async fn step_progress(
        &self,
        execution_id: &ExecutionId,
        step_id: &StepId,
        runner_id: &RunnerId,
        report: crate::execution::machine::Progress,
    ) -> Result<(), KernelError> {
        self.ask(execution_id, |reply| ExecutionMsg::RecordStepProgress {
            step_id: step_id.clone(),
            runner_id: runner_id.clone(),
            report: report.clone(),
            reply,
        })
        .await
        .map_err(|error| unknown_step(error, step_id))
    }

    /// Registers an agent connection; its pushes arrive on the returned stream.
    pub async fn connect_agent(
        &self,
        agent_id: AgentId,
        consumer_id: ConsumerId,
    ) -> Result<PushStream, KernelError> {
        let group = self.group(&agent_id).await?;
        let (sender, receiver) = mpsc::channel(self.ctx.config.push_buffer.max(1));
        let connection = self.ctx.connections.fetch_add(1, Ordering::Relaxed);
        let consumer = consumer_id.clone();
        group
            .send_message(AgentGroupMsg::ConsumerConnected {
                consumer_id,
                connection,
                sender,
            })
            .map_err(|_| KernelError::Unavailable("agent group is not running".into()))?;
        let on_close = Box::new(move || {
            let _ = group.send_message(AgentGroupMsg::ConsumerDisconnected {
                consumer_id: consumer,
                connection,
            });
        });
        Ok(PushStream::new(receiver, on_close))
    }

    /// Registers a runner connection offering `capabilities` (tool ids).
    pub async fn connect_runner(
        &self,
        runner_id: RunnerId,
        consumer_id: ConsumerId,
        capabilities: Vec<ToolId>,
    ) -> Result<PushStream, KernelError> {
        let dispatcher = self
            .ctx
            .dispatcher()
            .ok_or_else(|| KernelError::Unavailable("dispatcher is not running".into()))?;
        let (sender, receiver) = mpsc::channel(self.ctx.config.push_buffer.max(1));
        let connection = self.ctx.connections.fetch_add(1, Ordering::Relaxed);
        let (runner, consumer) = (runner_id.clone(), consumer_id.clone());
        dispatcher
            .send_message(DispatcherMsg::RunnerConnected {
                runner_id,
                consumer_id,
                connection,
                capabilities,
                sender,
            })
            .map_err(|_| KernelError::Unavailable("dispatcher is not running".into()))?;
        let on_close = Box::new(move || {
            let _ = dispatcher.send_message(DispatcherMsg::RunnerDisconnected {
                runner_id: runner,
                consumer_id: consumer,
                connection,
            });
        });
        Ok(PushStream::new(receiver, on_close))
    }

    /// Replaces the tool schemas published by a runner.
    pub async fn publish_tools(
        &self,
        runner_id: &RunnerId,
        tools: Vec<ToolSchema>,
    ) -> Result<(), KernelError> {
        let ids: Vec<ToolId> = tools.iter().map(|tool| tool.id.clone()).collect();
        self.ctx.tools.publish(runner_id, tools);
        self.ctx.tell_dispatcher(DispatcherMsg::SetCapabilities {
            runner_id: runner_id.clone(),
            tools: ids,
        });
        Ok(())
    }

    /// Returns the tool directory filtered by prefix (WIRE.md §13.7 plus `prefix.`).
    pub fn tools(&self, prefix: &str) -> Vec<ToolEntry> {
        self.ctx.tools.list(prefix)
    }

    /// Replaces the capabilities of every connection of a runner.
    pub async fn update_capabilities(
        &self,
        runner_id: &RunnerId,
        tools: Vec<ToolId>,
    ) -> Result<(), KernelError> {
        self.ctx.tell_dispatcher(DispatcherMsg::SetCapabilities {
            runner_id: runner_id.clone(),
            tools,
        });
        Ok(())
    }

    /// Drops a runner's published schemas.
    pub async fn unregister_runner(&self, runner_id: &RunnerId) -> Result<(), KernelError> {
        self.ctx.tools.remove_runner(runner_id);
        Ok(())
    }
}

fn unknown_step(error: KernelError, step_id: &StepId) -> KernelError {
    match error {
        KernelError::Rejected(Rejection::ExecutionNotFound(_)) => {
            Rejection::StepNotFound(step_id.to_string()).into()
        }
        other => other,
    }
}
