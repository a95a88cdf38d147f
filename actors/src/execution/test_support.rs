//! Helpers of the actor-level timer tests: a kernel on the memory store (tokio-driven clock),
//! a fixed policy, an agent with its running execution, and event-log checks that poll with a
//! deadline instead of sleeping.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::events::{Event, EventBody};
use crate::execution::Intent;
use crate::ids::{AgentId, ConsumerId, ExecutionId, SessionId, StepId};
use crate::kernel::{KernelConfig, PushStream};
use crate::policy::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::push::Push;
use crate::testing::{MemoryStore, TestKernel, eventually};
use crate::time::Timestamp;

/// How long a check polls before failing (virtual time under `start_paused`).
pub const WAIT: Duration = Duration::from_secs(5);

/// A policy that answers every call with `decision`, except tools starting with `approve_`,
/// which need approval.
pub struct FixedPolicy(pub PolicyDecision);

impl PolicyEngine for FixedPolicy {
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        if input.tool_id.as_str().starts_with("approve_") {
            return PolicyDecision::plain(Decision::RequireApproval, "approval", "needs a human");
        }
        self.0.clone()
    }

    fn digest(&self) -> String {
        "fixed".to_owned()
    }
}

/// Returns the policy allowing everything with no rule settings.
pub fn allow_all() -> Arc<dyn PolicyEngine> {
    Arc::new(FixedPolicy(PolicyDecision::plain(
        Decision::Allow,
        "allow",
        "ok",
    )))
}

/// Starts a kernel on a fresh memory store with `policy`, configured by `adjust`.
pub async fn start(
    policy: Arc<dyn PolicyEngine>,
    adjust: impl FnOnce(&mut KernelConfig),
) -> TestKernel {
    TestKernel::start_with(Arc::new(MemoryStore::default()), policy, adjust).await
}

/// An execution assigned to a connected agent.
pub struct Running {
    /// Execution id.
    pub id: ExecutionId,
    /// Session of the assignment.
    pub session: SessionId,
    /// The agent's push stream.
    pub agent: PushStream,
}

/// Returns the next push of `stream` (fails after [`WAIT`]).
pub async fn next(stream: &mut PushStream) -> Push {
    match tokio::time::timeout(WAIT, stream.next()).await {
        Ok(Some(push)) => push,
        other => panic!("no push: {other:?}"),
    }
}

/// Returns the next push of type `event`, skipping others.
pub async fn next_of(stream: &mut PushStream, event: &str) -> Push {
    loop {
        let push = next(stream).await;
        if push.event == event {
            return push;
        }
    }
}

/// Connects consumer `consumer` of agent `a`, creates an execution and returns it assigned.
pub async fn running(t: &TestKernel, consumer: &str) -> Running {
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new(consumer))
        .await
        .expect("connect");
    let row = t
        .kernel
        .create_execution(AgentId::new("a"), json!(null), None)
        .await
        .expect("create");
    let assigned = next_of(&mut agent, "execution.assigned").await;
    let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
    Running {
        id: row.id,
        session,
        agent,
    }
}

/// Reports `step` of `execution` as succeeded (data `1`) on `session`, as its agent would.
pub async fn succeed(t: &TestKernel, execution: &ExecutionId, session: &SessionId, step: StepId) {
    let outcome = crate::execution::StepOutcome {
        step_id: step,
        success: true,
        data: Some(json!(1)),
        error: None,
        retryable: false,
        cost: None,
    };
    t.kernel
        .agent_step_result(execution, session, outcome)
        .await
        .expect("result");
}

/// Returns an `invoke_tool` intent for `tool`.
pub fn call(tool: &str, remote: bool) -> Intent {
    Intent::InvokeTool {
        tool_id: tool.into(),
        arguments: json!({}),
        idempotency_key: None,
        remote,
    }
}

/// Submits `intent` on `run` and returns the step id it created.
pub async fn invoke(t: &TestKernel, run: &Running, intent: Intent) -> StepId {
    let reply = t
        .kernel
        .submit_intent(&run.id, &run.session, intent)
        .await
        .expect("intent");
    assert!(reply.accepted, "{reply:?}");
    reply.step_id.expect("step id")
}

/// Returns the event types of an execution, in order.
pub fn types(t: &TestKernel, id: &ExecutionId) -> Vec<&'static str> {
    t.store
        .all_events(id)
        .iter()
        .map(|event| event.body.type_name())
        .collect()
}

/// Returns the events of `kind` of an execution.
pub fn events_of(t: &TestKernel, id: &ExecutionId, kind: &str) -> Vec<Event> {
    t.store
        .all_events(id)
        .into_iter()
        .filter(|event| event.body.type_name() == kind)
        .collect()
}

/// Waits until the execution has `count` events of `kind`; returns the last of them.
pub async fn wait_for(t: &TestKernel, id: &ExecutionId, kind: &str, count: usize) -> Event {
    let found = eventually(WAIT, || {
        let events = events_of(t, id, kind);
        async move {
            (events.len() >= count)
                .then(|| events.last().cloned())
                .flatten()
        }
    })
    .await;
    match found {
        Some(event) => event,
        None => panic!("no {kind} #{count}; log: {:?}", types(t, id)),
    }
}

/// Returns the deadline a `step.created` or `step.dispatched` event carries.
pub fn deadline_of(event: &Event) -> Timestamp {
    match &event.body {
        EventBody::StepCreated { deadline, .. } | EventBody::StepDispatched { deadline, .. } => {
            *deadline
        }
        other => panic!("no deadline in {other:?}"),
    }
}

/// Returns `at - by` (a short virtual duration) for timing assertions.
pub fn millis_after(at: Timestamp, by: Timestamp) -> i64 {
    (at - by).num_milliseconds()
}

/// Returns `at + duration`.
pub fn plus(at: Timestamp, duration: Duration) -> Timestamp {
    at + chrono::Duration::from_std(duration).expect("duration fits")
}

/// Returns `at - 1 ms`, the last instant before `at` a check can sleep to.
pub fn just_before(at: Timestamp) -> Timestamp {
    at - chrono::Duration::milliseconds(1)
}

/// Returns the payload of an event as JSON.
pub fn payload(event: &Event) -> Value {
    event.body.payload()
}
