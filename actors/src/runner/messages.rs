//! Messages of the dispatcher and of runner actors.

use ractor::RpcReplyPort;
use tokio::sync::mpsc;

use super::dispatch::DispatcherSnapshot;
use super::holders::JobReport;
use crate::execution::JobSpec;
use crate::ids::{ConsumerId, JobId, RunnerId, StepId, ToolId};
use crate::push::Push;

/// Messages of the dispatcher.
pub enum DispatcherMsg {
    /// A runner connection opened (replacing one with the same ids).
    RunnerConnected {
        /// Runner id.
        runner_id: RunnerId,
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Connection number.
        connection: u64,
        /// Tool ids it offers.
        capabilities: Vec<ToolId>,
        /// Its stream.
        sender: mpsc::Sender<Push>,
    },
    /// A runner connection closed.
    RunnerDisconnected {
        /// Runner id.
        runner_id: RunnerId,
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Connection number.
        connection: u64,
    },
    /// Replaces the capabilities of every connection of a runner.
    SetCapabilities {
        /// Runner id.
        runner_id: RunnerId,
        /// Tool ids.
        tools: Vec<ToolId>,
    },
    /// Queues a job.
    Enqueue(JobSpec),
    /// A job that was in a runner's hands when the kernel stopped (startup recovery): held for
    /// `runner_grace`, so that a runner still working on it can post its result, then queued.
    Recovered(JobSpec),
    /// A job of an `at_most_once` step that was in a runner's hands when the kernel stopped:
    /// held for `runner_grace` like `Recovered`, then reported lost to its execution (which
    /// records that its outcome is unknown) instead of queued again.
    RecoveredAtMostOnce(JobSpec),
    /// The hold of a recovered job ended (sent to itself).
    ReleaseRecovered {
        /// Job id.
        job_id: JobId,
    },
    /// A connection is idle again (result received, or a job it was handed was stale).
    ConnectionFree {
        /// Runner id.
        runner_id: RunnerId,
        /// Consumer id.
        consumer_id: ConsumerId,
    },
    /// A remote step ended: drop its queued jobs, free its runner, notify it if cancelled.
    StepEnded {
        /// Step id.
        step_id: StepId,
        /// Why the runner should stop, if not by its own result.
        cancel_reason: Option<String>,
    },
    /// The grace of a runner that left holding a job ended (sent to itself).
    RunnerGraceExpired {
        /// Runner id.
        runner_id: RunnerId,
        /// Consumer id.
        consumer_id: ConsumerId,
        /// Orphan generation the timer was armed for.
        generation: u64,
    },
    /// Periodic pass for jobs whose `not_before` has come.
    Tick,
    /// A policy was loaded: the tool limits and runner breakers are read again.
    PolicyReplaced,
    /// A runner reported a result its execution took (for the runner's circuit breaker).
    RunnerResult {
        /// Runner id.
        runner_id: RunnerId,
        /// Whether the tool succeeded.
        success: bool,
    },
    /// Answers the runner circuit breakers that are open, half-open or counting failures.
    Breakers(RpcReplyPort<Vec<serde_json::Value>>),
    /// Is a runner's report (result, `started`) from the connection holding the job?
    CheckReport {
        /// The report.
        report: JobReport,
        /// Answer: `Err(reason)` when another connection holds the job.
        reply: RpcReplyPort<Result<(), String>>,
    },
    /// Answers a snapshot of the dispatcher's state.
    Observe(RpcReplyPort<DispatcherSnapshot>),
}

/// Messages of a runner actor.
pub enum RunnerMsg {
    /// Delivers a job (the dispatcher marked this connection busy with it).
    Deliver(JobSpec),
    /// Writes a notice (e.g. `job.cancelled`) to the stream.
    Notify(Push),
}
