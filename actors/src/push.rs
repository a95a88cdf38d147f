//! Transient pushes sent on the agent and runner SSE streams. They are not events: they never
//! enter the log (WIRE.md §15, last paragraph).

use crate::ids::{ExecutionId, JobId, SessionId, StepId};
use serde_json::{Value, json};

/// One SSE message for an agent or runner connection: an `event:` name and a JSON object.
#[derive(Clone, Debug, PartialEq)]
pub struct Push {
    /// SSE event name (`execution.assigned`, `tool.result`, `job.assigned`, ...).
    pub event: &'static str,
    /// JSON object sent as `data:`.
    pub data: Value,
}

impl Push {
    /// Returns `tool.result` for a step's terminal outcome.
    pub fn tool_result(
        execution_id: &ExecutionId,
        step_id: &StepId,
        success: bool,
        result: Option<&Value>,
        error: Option<&str>,
    ) -> Self {
        let mut data = json!({
            "execution_id": execution_id,
            "step_id": step_id,
            "status": if success { "succeeded" } else { "failed" },
        });
        if let Some(result) = result {
            data["result"] = result.clone();
        }
        if let Some(error) = error.filter(|error| !error.is_empty()) {
            data["error"] = json!(error);
        }
        Self {
            event: "tool.result",
            data,
        }
    }

    /// Returns `signal.received` (always with `execution_id`, WIRE.md §10.4.3).
    pub fn signal_received(execution_id: &ExecutionId, signal_type: &str, payload: &Value) -> Self {
        let data =
            json!({ "execution_id": execution_id, "signal_type": signal_type, "payload": payload });
        Self {
            event: "signal.received",
            data,
        }
    }

    /// Returns `approval.resolved`; `reason` (the answer's reason, when one was given) is an
    /// extra field: the rebuno SDK ignores it, the step's `step.failed` carries it too.
    pub fn approval_resolved(
        execution_id: &ExecutionId,
        step_id: &StepId,
        approved: bool,
        reason: Option<&str>,
        session_id: &SessionId,
    ) -> Self {
        let mut data = json!({
            "execution_id": execution_id, "step_id": step_id, "approved": approved, "session_id": session_id,
        });
        if let Some(reason) = reason.filter(|reason| !reason.is_empty()) {
            data["reason"] = json!(reason);
        }
        Self {
            event: "approval.resolved",
            data,
        }
    }

    /// Returns `execution.cancelled`, which makes the SDK stop the handler.
    pub fn execution_cancelled(execution_id: &ExecutionId) -> Self {
        Self {
            event: "execution.cancelled",
            data: json!({ "execution_id": execution_id }),
        }
    }

    /// Returns the runner-stream notice that a job's step ended and its work should stop.
    pub fn job_cancelled(
        job_id: &JobId,
        execution_id: &ExecutionId,
        step_id: &StepId,
        reason: &str,
    ) -> Self {
        let data = json!({ "job_id": job_id, "execution_id": execution_id, "step_id": step_id, "reason": reason });
        Self {
            event: "job.cancelled",
            data,
        }
    }

    /// Returns whether losing this push would leave an agent waiting (it belongs in the outbox).
    pub fn must_deliver(&self) -> bool {
        matches!(
            self.event,
            "tool.result"
                | "signal.received"
                | "approval.resolved"
                | "execution.cancelled"
                | "execution.assigned"
        )
    }

    /// Returns the execution id a push is about.
    pub fn execution_id(&self) -> Option<&str> {
        self.data.get("execution_id").and_then(Value::as_str)
    }
}
