//! Domain refusals of the execution state machine, with the exact texts of WIRE.md §3.3.

use crate::error::ErrorCode;
use crate::status::ExecutionStatus;

/// Why a command to an execution was refused. Nothing was recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The session id is unknown or was ended.
    #[error("session not found: session {0}")]
    SessionNotFound(String),
    /// The session's agent went away and it was not renewed.
    #[error("session expired: session {0}")]
    SessionExpired(String),
    /// The session belongs to another execution.
    #[error("validation error: session {session} does not belong to execution {execution}")]
    SessionMismatch {
        /// Session id given.
        session: String,
        /// Execution addressed.
        execution: String,
    },
    /// The execution does not exist.
    #[error("not found: execution {0}")]
    ExecutionNotFound(String),
    /// The step does not exist in this execution.
    #[error("not found: step {0}")]
    StepNotFound(String),
    /// The execution has ended.
    #[error("execution is in terminal state: execution {execution} is already {status}")]
    Terminal {
        /// Execution id.
        execution: String,
        /// Its terminal status.
        status: ExecutionStatus,
    },
    /// A signal was sent to an ended execution.
    #[error("execution is in terminal state: execution {execution} is in terminal state {status}")]
    TerminalSignal {
        /// Execution id.
        execution: String,
        /// Its terminal status.
        status: ExecutionStatus,
    },
    /// A signal wait or an approval blocks the execution.
    #[error("execution is blocked: execution {0} is blocked pending approval")]
    Blocked(String),
    /// `complete` or `fail` while steps are active.
    #[error("conflict: cannot {0} with active steps in progress")]
    ActiveSteps(&'static str),
    /// The step already has a different terminal outcome.
    #[error("step already resolved")]
    StepResolved,
    /// The step waits for approval and cannot take a result yet.
    #[error("conflict: step {0} is awaiting approval")]
    AwaitingApproval(String),
    /// An idempotency key was reused for a different call.
    #[error("idempotency conflict: key {0} was used for a different tool call")]
    IdempotencyConflict(String),
    /// A `step.approve` names a step whose approval was already answered.
    #[error("conflict: the approval of step {0} was already answered")]
    ApprovalAnswered(String),
    /// A `step.approve` came after the approval's expiry.
    #[error("conflict: the approval of step {0} expired")]
    ApprovalExpired(String),
    /// A reconciliation names a step whose outcome is not unknown.
    #[error("conflict: the outcome of step {0} is not unknown")]
    OutcomeKnown(String),
    /// The execution is not pending (assignment refused).
    #[error("conflict: execution {0} is not pending")]
    NotPending(String),
    /// Malformed command.
    #[error("validation error: {0}")]
    Validation(String),
}

impl Rejection {
    /// Returns the client-facing class of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::SessionNotFound(_) | Self::SessionExpired(_) => ErrorCode::Unauthorized,
            Self::SessionMismatch { .. } | Self::Validation(_) => ErrorCode::BadRequest,
            Self::ExecutionNotFound(_) | Self::StepNotFound(_) => ErrorCode::NotFound,
            Self::Terminal { .. }
            | Self::TerminalSignal { .. }
            | Self::Blocked(_)
            | Self::ActiveSteps(_)
            | Self::StepResolved
            | Self::AwaitingApproval(_)
            | Self::IdempotencyConflict(_)
            | Self::ApprovalAnswered(_)
            | Self::ApprovalExpired(_)
            | Self::OutcomeKnown(_)
            | Self::NotPending(_) => ErrorCode::Conflict,
        }
    }
}
