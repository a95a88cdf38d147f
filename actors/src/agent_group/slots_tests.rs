//! An agent group that starts (here: a fresh group over a store that already holds a running
//! execution, as after a group crash) counts the executions the store shows running against the
//! agent's `max_running` before it offers anything.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::{AgentGroupActor, AgentGroupArgs, AgentGroupMsg};
use crate::events::{EventBody, NewEvent, seal};
use crate::execution::ExecutionMsg;
use crate::ids::{AgentId, ExecutionId};
use crate::policy::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::push::Push;
use crate::status::ExecutionStatus;
use crate::store::{Commit, ExecutionRow, Store};
use crate::testing::{Probe, ProbeContext, observe};

const WAIT: Duration = Duration::from_secs(5);

/// Allows everything; one running execution per agent.
struct OneRunning;

impl PolicyEngine for OneRunning {
    fn evaluate(&self, _input: &PolicyInput) -> PolicyDecision {
        PolicyDecision::plain(Decision::Allow, "all", "allowed")
    }

    fn digest(&self) -> String {
        "one-running".into()
    }

    fn max_running(&self, _agent_id: &crate::ids::AgentId) -> Option<u32> {
        Some(1)
    }
}

/// Stores an execution of agent `a` with `status` (pending, or assigned to consumer `c0`).
async fn stored(store: &dyn Store, id: &ExecutionId, status: ExecutionStatus) {
    let now = crate::time::now();
    let mut row = ExecutionRow {
        id: id.clone(),
        agent_id: AgentId::new("a"),
        status: ExecutionStatus::Pending,
        labels: None,
        input: std::sync::Arc::new(json!(null)),
        output: None,
        created_at: now,
        updated_at: now,
        session_id: None,
        consumer_id: None,
        last_sequence: 1,
    };
    let mut bodies = vec![NewEvent::execution(EventBody::ExecutionCreated {
        traceparent: None,
        created_by: None,
        on_behalf_of: None,
        agent_id: "a".into(),
        input: json!(null),
        labels: json!(null),
        priority: 0,
    })];
    if status == ExecutionStatus::Running {
        bodies.push(NewEvent::execution(EventBody::ExecutionStarted {
            session_id: "s0".into(),
            consumer_id: "c0".into(),
        }));
        row.status = status;
        row.session_id = Some("s0".into());
        row.consumer_id = Some("c0".into());
        row.last_sequence = 2;
    }
    let events = seal(id, 0, now, None, bodies);
    let commit = Commit {
        execution: row,
        events,
        steps: Vec::new(),
        previous_status: None,
    };
    store.commit(&[commit]).await.expect("stored");
}

#[tokio::test]
async fn a_starting_group_counts_running_executions_from_the_store_before_offering() {
    let running = ExecutionId::generate();
    let waiting = ExecutionId::generate();
    let assigned = Push {
        event: "execution.assigned",
        data: json!({ "execution_id": waiting.as_str(), "session_id": "s1" }),
    };
    let mut execution = Probe::answering(move |message: ExecutionMsg| match message {
        ExecutionMsg::OfferToConsumer { consumer_id, reply } => {
            let _ = reply.send(Ok(assigned.clone()));
            Some(consumer_id)
        }
        _ => None,
    })
    .await;
    // Probes before the context: they belong to the leak check's baseline.
    let mut probes = ProbeContext::start("a", Arc::new(OneRunning)).await;
    stored(&*probes.store, &running, ExecutionStatus::Running).await;
    stored(&*probes.store, &waiting, ExecutionStatus::Pending).await;
    probes.register_execution(&waiting, execution.actor.clone());
    let args = AgentGroupArgs {
        ctx: probes.ctx.clone(),
        agent_id: AgentId::new("a"),
    };
    let group = probes.spawn("agent group", AgentGroupActor, args).await;
    let (sender, _stream) = mpsc::channel::<Push>(16);
    let connected = AgentGroupMsg::ConsumerConnected {
        consumer_id: "c1".into(),
        connection: 1,
        sender,
    };
    group.send_message(connected).expect("group running");
    let snapshot = observe(&group, AgentGroupMsg::Observe).await;
    assert_eq!(
        snapshot.pending,
        std::slice::from_ref(&waiting),
        "held back: {snapshot:?}"
    );
    assert!(snapshot.offering.is_empty(), "{snapshot:?}");
    // The running execution ends: its slot goes to the waiting one.
    let ended = AgentGroupMsg::SessionEnded {
        consumer_id: "c0".into(),
        execution_id: running,
    };
    group.send_message(ended).expect("group running");
    assert_eq!(execution.expect(WAIT, |seen| seen).await, "c1");
    probes.finish().await;
}
