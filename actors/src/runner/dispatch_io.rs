//! The dispatcher core's vocabulary: the inputs it decides on ([`DispatchInput`]) and the
//! effects it asks its actor shell to carry out ([`DispatchEffect`]). The core is in
//! `dispatch.rs`.

use std::time::Duration;

use crate::execution::JobSpec;
use crate::guardrails::breaker::{BreakerChange, BreakerSet};
use crate::guardrails::concurrency::ToolLimits;
use crate::ids::{ConsumerId, JobId, RunnerId, StepId, ToolId};

/// A runner connection, by runner id and consumer id.
pub type ConnectionKey = (RunnerId, ConsumerId);

/// What happened, as the core sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum DispatchInput {
    /// A connection opened (replacing one with the same key).
    Connected {
        /// Runner and consumer.
        key: ConnectionKey,
        /// Connection number.
        connection: u64,
        /// Tool ids it offers.
        capabilities: Vec<ToolId>,
    },
    /// A connection closed; ignored unless `connection` is the current one of `key`.
    Disconnected {
        /// Runner and consumer.
        key: ConnectionKey,
        /// Connection number.
        connection: u64,
    },
    /// The runner actor of a connection failed: the connection is dropped and a job it held is
    /// kept for the runner grace, as when a connection closes.
    RunnerFailed(ConnectionKey),
    /// Replaces the capabilities of every connection of a runner.
    SetCapabilities {
        /// Runner.
        runner_id: RunnerId,
        /// Tool ids.
        tools: Vec<ToolId>,
    },
    /// Queue a job.
    Enqueue(JobSpec),
    /// A job a runner may still hold from before a restart: held for the runner grace.
    Recovered(JobSpec),
    /// A job of an `at_most_once` step a runner may hold from before a restart: held for the
    /// runner grace, then reported lost (never queued again) unless its step ended meanwhile.
    RecoveredAtMostOnce(JobSpec),
    /// The hold of a recovered job ended.
    ReleaseRecovered {
        /// Job id.
        job_id: JobId,
    },
    /// A connection is idle again.
    ConnectionFree(ConnectionKey),
    /// A remote step ended.
    StepEnded {
        /// Step id.
        step_id: StepId,
        /// Why the runner should stop, if not by its own result.
        cancel_reason: Option<String>,
    },
    /// The grace of a connection that left holding a job ended.
    GraceExpired {
        /// Runner and consumer.
        key: ConnectionKey,
        /// Generation the timer was armed for.
        generation: u64,
    },
    /// Time passed (jobs whose `not_before` came may go now).
    Tick,
    /// The policy's `concurrency.tools` limits replace the previous ones.
    SetToolLimits(ToolLimits),
    /// The policy's runner circuit breakers replace the previous ones.
    SetRunnerBreakers(BreakerSet),
    /// A runner reported a result its execution took.
    RunnerResult {
        /// Runner.
        runner_id: RunnerId,
        /// Whether the tool succeeded.
        success: bool,
    },
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum DispatchEffect {
    /// Stop the runner actor of a connection that closed. (A connection replaced by a new
    /// one with the same key has its actor replaced by the shell when it spawns the new one.)
    StopRunner(ConnectionKey),
    /// Hand a job to a connection's runner actor (it is marked busy with it already).
    Deliver {
        /// Runner and consumer.
        key: ConnectionKey,
        /// The job.
        job: JobSpec,
    },
    /// Tell a connection's runner to stop working on a job.
    Cancel {
        /// Runner and consumer.
        key: ConnectionKey,
        /// The job.
        job: JobSpec,
        /// Why.
        reason: String,
    },
    /// Pass again after `delay` (a job's `not_before`).
    TickAfter(Duration),
    /// Send `GraceExpired { key, generation }` after the runner grace.
    ArmRunnerGrace {
        /// Runner and consumer.
        key: ConnectionKey,
        /// Generation.
        generation: u64,
    },
    /// Send `ReleaseRecovered { job_id }` after the runner grace.
    ArmRelease {
        /// Job id.
        job_id: JobId,
    },
    /// Tell the job's execution that no runner will report on it.
    RunnerLost(JobSpec),
    /// A runner's circuit breaker opened or closed (`tool_id` of the change is the runner id).
    RunnerCircuit(BreakerChange),
}
