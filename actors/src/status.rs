//! Execution and step statuses with their exact wire names (WIRE.md §1.2).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Status of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Waiting for an agent.
    Pending,
    /// Held by an agent, nothing blocks it.
    Running,
    /// Waiting on tool steps, a signal or an approval.
    Blocked,
    /// Finished by the agent with an output.
    Completed,
    /// Failed (agent, timeout or supervision).
    Failed,
    /// Cancelled.
    Cancelled,
}

impl ExecutionStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::Running,
        Self::Blocked,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Returns whether no further change can happen.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExecutionStatus {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
            .ok_or_else(|| value.to_owned())
    }
}

/// Status of a tool step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Created, not handed out.
    Pending,
    /// Handed to a runner (or to the agent after approval).
    Dispatched,
    /// A runner started it.
    Running,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Passed its deadline.
    TimedOut,
    /// Cancelled.
    Cancelled,
}

impl StepStatus {
    /// Every status.
    pub const ALL: [Self; 7] = [
        Self::Pending,
        Self::Dispatched,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
    ];

    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Dispatched => "dispatched",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
        }
    }

    /// Returns whether the step can no longer change.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::TimedOut | Self::Cancelled
        )
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StepStatus {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
            .ok_or_else(|| value.to_owned())
    }
}
