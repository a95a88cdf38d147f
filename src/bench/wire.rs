//! The wire bodies of the bench's hot path: what it sends (creation, intents, step results,
//! signals) and the few fields it reads from the answers.

use serde::{Deserialize, Serialize};

/// The `execution.assigned` fields the bench reads.
#[derive(Deserialize)]
pub struct Assigned {
    /// Execution assigned.
    pub execution_id: String,
    /// Session to send its intents with.
    pub session_id: String,
}

/// The `execution_id` every push to an agent carries.
#[derive(Deserialize)]
pub struct ExecutionRef {
    /// Execution the push is about.
    pub execution_id: String,
}

/// An agent intent, as the bench sends it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Intent<'a> {
    /// A local tool call.
    InvokeTool {
        /// Tool called.
        tool_id: &'a str,
        /// Its arguments.
        arguments: StepData,
        /// `<execution>:<tool>:<index>`.
        idempotency_key: String,
    },
    /// Finishes the execution.
    Complete {
        /// Its output.
        output: StepData,
    },
    /// Waits for a signal.
    Wait {
        /// Signal waited for.
        signal_type: &'a str,
    },
}

/// `{"index": N}`: tool arguments, step data and output of the bench.
#[derive(Serialize)]
pub struct StepData {
    /// Position of the step (or count of steps for an output).
    pub index: u32,
}

/// Path of agent intents.
pub const INTENT_PATH: &str = "/v0/agents/intent";
/// Path of agent step results.
pub const STEP_RESULT_PATH: &str = "/v0/agents/step-result";

/// Body of `POST /v0/executions`.
#[derive(Serialize)]
pub struct CreateBody<'a> {
    agent_id: &'a str,
    input: CreateInput,
    labels: BenchLabel,
}

impl<'a> CreateBody<'a> {
    /// An execution of `agent_id` with input `{"index": index}` and label `bench=true`.
    pub fn new(agent_id: &'a str, index: u64) -> Self {
        Self {
            agent_id,
            input: CreateInput { index },
            labels: BenchLabel { bench: "true" },
        }
    }
}

#[derive(Serialize)]
struct CreateInput {
    index: u64,
}

#[derive(Serialize)]
struct BenchLabel {
    bench: &'static str,
}

/// The answer of `POST /v0/executions` the bench reads.
#[derive(Deserialize)]
pub struct Created {
    /// Execution id.
    pub id: String,
}

/// Body of `POST /v0/agents/intent`.
#[derive(Serialize)]
pub struct IntentBody<'a> {
    /// Execution.
    pub execution_id: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The intent.
    pub intent: Intent<'a>,
}

/// The answer of an intent.
#[derive(Deserialize)]
pub struct IntentAnswer {
    accepted: bool,
    #[serde(default)]
    step_id: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl IntentAnswer {
    /// The step id of an accepted intent, or why it was denied.
    pub fn step(self) -> Result<Option<String>, String> {
        if !self.accepted {
            return Err(format!(
                "intent denied: {} (run the kernel with a policy allowing the bench tools, e.g. keel dev)",
                self.error.as_deref().unwrap_or("no reason given")
            ));
        }
        Ok(self.step_id)
    }
}

/// Body of `POST /v0/agents/step-result` for a succeeded local step.
#[derive(Serialize)]
pub struct StepResultBody<'a> {
    /// Execution.
    pub execution_id: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The step.
    pub step_id: &'a str,
    /// Always true.
    pub success: bool,
    /// `{"index": N}`.
    pub data: StepData,
}

#[derive(Serialize)]
pub(super) struct SignalBody<'a> {
    pub(super) signal_type: &'a str,
}
