//! The projection rows an execution writes with each commit: its `executions` row and the
//! `steps` rows of the steps a commit touched.

use super::state::{ExecutionState, StepState};
use crate::store::{ExecutionRow, StepRow};

impl ExecutionState {
    /// Returns the projection row of this execution.
    pub fn row(&self) -> ExecutionRow {
        ExecutionRow {
            id: self.id.clone(),
            agent_id: self.agent_id.clone(),
            status: self.status,
            labels: self.labels.clone(),
            input: self.input.clone(),
            output: self.output.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            session_id: self.session.as_ref().map(|session| session.id.clone()),
            consumer_id: self
                .session
                .as_ref()
                .map(|session| session.consumer_id.clone()),
            last_sequence: self.last_sequence,
        }
    }

    /// Returns the projection row of one step.
    pub fn step_row(&self, step: &StepState) -> StepRow {
        StepRow {
            id: step.id.clone(),
            execution_id: self.id.clone(),
            tool_id: step.tool_id.clone(),
            status: step.status,
            attempt: step.attempt,
            max_attempts: step.max_attempts,
            remote: step.remote,
            job_id: step.job_id.clone(),
            runner_id: step.runner_id.clone(),
            deadline: step.deadline,
            updated_at: step.updated_at,
        }
    }
}
