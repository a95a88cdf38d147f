//! The bookkeeping `ExecutionState::apply` shares between events: clearing a blocker on
//! resume, ending a step into the history, and finishing the execution.

use super::*;
use crate::events::{Cleared, ResumeReason};

impl ExecutionState {
    pub(super) fn apply_resumed(&mut self, reason: &ResumeReason) {
        match reason.cleared() {
            Cleared::Signal(signal_type) => {
                if let Some(index) = self
                    .pending_signals
                    .iter()
                    .position(|(kind, _)| kind == signal_type)
                    && let Some((signal_type, payload)) = self.pending_signals.remove(index)
                {
                    self.consumed_signals.push(ConsumedSignal {
                        run: self.runs,
                        signal_type,
                        payload,
                    });
                }
                if self.signal_wait.as_deref() == Some(signal_type) {
                    self.signal_wait = None;
                }
            }
            Cleared::Approval => self.approval = None,
            Cleared::Wait => self.signal_wait = None,
            Cleared::Budget => self.budget_wait = None,
            Cleared::Tool => self.tool_blocked = false,
        }
    }

    pub(super) fn end_step(
        &mut self,
        id: Option<&StepId>,
        status: StepStatus,
        result: Option<Value>,
        error: Option<String>,
        at: Timestamp,
    ) {
        let Some(step) = self.step_mut(id) else {
            return;
        };
        step.status = status;
        step.outcome = Some(status == StepStatus::Succeeded);
        step.awaiting_approval = false;
        step.deadline = None;
        step.updated_at = at;
        let entry = HistoryEntry {
            step_id: step.id.clone(),
            tool_id: step.tool_id.clone(),
            status,
            arguments: step.arguments.clone(),
            result,
            error,
            completed_at: at,
        };
        self.history.push(entry);
    }

    pub(super) fn clear_blockers(&mut self) {
        self.tool_blocked = false;
        self.signal_wait = None;
        self.approval = None;
        self.budget_wait = None;
    }

    pub(super) fn finish(&mut self, status: ExecutionStatus) {
        self.status = status;
        self.clear_blockers();
        self.pending_signals.clear();
        self.journal = None;
    }
}
