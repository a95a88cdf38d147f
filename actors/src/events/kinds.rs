//! What an event body says about its type: the wire name, the payload as stored, the rebuild
//! from a stored type and payload, and whether it ends the execution.

use serde_json::Value;

use super::EventBody;

impl EventBody {
    /// Returns the wire name of this event's type, e.g. `step.created`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::ExecutionCreated { .. } => "execution.created",
            Self::ExecutionStarted { .. } => "execution.started",
            Self::ExecutionBlocked { .. } => "execution.blocked",
            Self::ExecutionResumed { .. } => "execution.resumed",
            Self::ExecutionCompleted { .. } => "execution.completed",
            Self::ExecutionFailed { .. } => "execution.failed",
            Self::ExecutionCancelled { .. } => "execution.cancelled",
            Self::ExecutionReset { .. } => "execution.reset",
            Self::IntentAccepted { .. } => "intent.accepted",
            Self::IntentDenied { .. } => "intent.denied",
            Self::StepCreated { .. } => "step.created",
            Self::StepDispatched { .. } => "step.dispatched",
            Self::StepStarted { .. } => "step.started",
            Self::StepCompleted { .. } => "step.completed",
            Self::StepFailed { .. } => "step.failed",
            Self::StepProgress { .. } => "step.progress",
            Self::StepTimedOut {} => "step.timed_out",
            Self::StepRetried { .. } => "step.retried",
            Self::StepCancelled { .. } => "step.cancelled",
            Self::StepOutcomeUnknown { .. } => "step.outcome_unknown",
            Self::StepReconciled { .. } => "step.reconciled",
            Self::StepApprovalRequired { .. } => "step.approval_required",
            Self::SignalReceived { .. } => "signal.received",
            Self::AgentTimeout { .. } => "agent.timeout",
            Self::ExecutionStalled { .. } => "execution.stalled",
            Self::HookDecided { .. } => "hook.decided",
            Self::ToolCircuitOpened { .. } => "tool.circuit_opened",
            Self::ToolCircuitClosed { .. } => "tool.circuit_closed",
            Self::LlmCalled(_) => "llm.called",
            Self::BudgetRaised { .. } => "budget.raised",
            Self::ApprovalRequested(_) => "approval.requested",
            Self::ApprovalResolved(_) => "approval.resolved",
        }
    }

    /// Returns the payload object as it is stored and sent.
    pub fn payload(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => map.remove("payload").unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }

    /// Rebuilds a body from a stored type name and payload.
    pub fn from_parts(type_name: &str, payload: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(serde_json::json!({ "type": type_name, "payload": payload }))
    }

    /// Returns whether this event ends the execution.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::ExecutionCompleted { .. }
                | Self::ExecutionFailed { .. }
                | Self::ExecutionCancelled { .. }
        )
    }
}

/// Returns whether an event type name ends an execution's stream.
pub fn is_terminal_type(type_name: &str) -> bool {
    matches!(
        type_name,
        "execution.completed" | "execution.failed" | "execution.cancelled"
    )
}
