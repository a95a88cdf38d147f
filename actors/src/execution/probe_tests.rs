//! One execution actor alone, with probes in place of its agent group and the dispatcher:
//! what it sends to each neighbour, and what it does not.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::actor::{ExecutionActor, ExecutionArgs, StartMode, record_creation};
use super::{ExecutionMsg, Intent};
use crate::agent_group::AgentGroupMsg;
use crate::ids::ExecutionId;
use crate::ids::{AgentId, SessionId};
use crate::kernel::context::call;
use crate::policy::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::runner::DispatcherMsg;
use crate::supervision::{ActorKind, SupervisionEvent};
use crate::testing::{ProbeContext, TestKernel, eventually};

/// Denies every tool whose id starts with `shell.`, allows the rest.
struct DenyShell;

impl PolicyEngine for DenyShell {
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        if input.tool_id.as_str().starts_with("shell.") {
            PolicyDecision::plain(Decision::Deny, "no-shell", "shell is off")
        } else {
            PolicyDecision::plain(Decision::Allow, "rest", "allowed")
        }
    }

    fn digest(&self) -> String {
        "deny-shell".to_owned()
    }
}

fn invoke(tool: &str, remote: bool) -> Intent {
    Intent::InvokeTool {
        tool_id: tool.into(),
        arguments: json!({}),
        idempotency_key: None,
        remote,
    }
}

#[tokio::test]
async fn an_execution_actor_talks_to_its_neighbours_only_after_commits() {
    let mut probes = ProbeContext::start("a", Arc::new(DenyShell)).await;
    let ctx = probes.ctx.clone();
    let id = ExecutionId::generate();
    let created = record_creation(&ctx, &id, &"a".into(), json!(null), None)
        .await
        .expect("created");
    let args = ExecutionArgs {
        ctx: ctx.clone(),
        id: id.clone(),
        mode: StartMode::Created(Box::new(created)),
    };
    let execution = probes.spawn("execution", ExecutionActor, args).await;
    let timeout = Duration::from_secs(5);

    let offer = |reply| ExecutionMsg::OfferToConsumer {
        consumer_id: "c1".into(),
        reply,
    };
    let assigned = call(&execution, offer, timeout, "execution")
        .await
        .expect("answered")
        .expect("assigned");
    let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));

    let deny = |reply| ExecutionMsg::SubmitIntent {
        session_id: session.clone(),
        session_owner: None,
        intent: invoke("shell.exec", true),
        capabilities: Default::default(),
        reply,
    };
    let denied = call(&execution, deny, timeout, "execution")
        .await
        .expect("answered")
        .expect("evaluated");
    assert!(!denied.accepted);
    probes
        .dispatcher
        .expect_no_msg(Duration::from_millis(100))
        .await;

    let remote = |reply| ExecutionMsg::SubmitIntent {
        session_id: session.clone(),
        session_owner: None,
        intent: invoke("web.search", true),
        capabilities: Default::default(),
        reply,
    };
    let accepted = call(&execution, remote, timeout, "execution")
        .await
        .expect("answered")
        .expect("evaluated");
    let job = probes
        .dispatcher
        .expect_msg(timeout, |message| match message {
            DispatcherMsg::Enqueue(job) => Some(job),
            _ => None,
        })
        .await;
    assert_eq!(
        (job.tool_id.as_str(), Some(&job.step_id)),
        ("web.search", accepted.step_id.as_ref())
    );
    let stored = probes.store.all_events(&id);
    assert!(
        stored
            .iter()
            .any(|event| event.body.type_name() == "step.dispatched"),
        "durable before the dispatcher heard of it"
    );

    let signal = |reply| ExecutionMsg::DeliverSignal {
        signal_type: "go".into(),
        payload: json!(1),
        sent_by: None,
        reply,
    };
    call(&execution, signal, timeout, "execution")
        .await
        .expect("answered")
        .expect("recorded");
    let push = probes
        .agents
        .expect_msg(timeout, |message| match message {
            AgentGroupMsg::Push { consumer_id, push } => Some((consumer_id, push)),
            _ => None,
        })
        .await;
    assert_eq!((push.0.as_str(), push.1.event), ("c1", "signal.received"));
    probes.finish().await;
}

#[tokio::test]
async fn the_supervision_log_records_a_restart_with_its_count() {
    let t = TestKernel::start().await;
    let row = t
        .kernel
        .create_execution("a".into(), json!(null), None)
        .await
        .expect("create");
    let actor = t.kernel.ctx.execution(&row.id).expect("live");
    actor.send_message(ExecutionMsg::Crash).expect("sent");
    let metrics = t.kernel.ctx.metrics.clone();
    let restarted = eventually(Duration::from_secs(5), || {
        let metrics = metrics.clone();
        let id = row.id.to_string();
        async move {
            metrics
                .supervision_log
                .records()
                .into_iter()
                .find(|record| {
                    record.kind == ActorKind::Execution
                        && record.id == id
                        && matches!(record.event, SupervisionEvent::Restarted { count: 1, .. })
                })
        }
    })
    .await;
    assert!(
        restarted.is_some(),
        "the restart was recorded with its count"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_lost_consumer_notice_that_arrives_during_an_outage_is_handled_after_it() {
    use crate::ids::{ConsumerId, SessionId};
    use crate::status::ExecutionStatus;
    let store = Arc::new(crate::testing::MemoryStore::default());
    let t = TestKernel::start_with(
        store.clone(),
        Arc::new(crate::policy::PermissiveEngine),
        |config| {
            config.agent_grace = Duration::from_millis(100);
        },
    )
    .await;
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    let row = t
        .kernel
        .create_execution(AgentId::new("a"), json!(null), None)
        .await
        .expect("create");
    let assigned = agent.next().await.expect("assigned");
    let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
    // A lost COMMIT answer marks the actor stale; with reads failing it cannot reload.
    store.lose_commit_answers(true);
    assert!(
        t.kernel
            .submit_intent(
                &row.id,
                &session,
                Intent::InvokeTool {
                    tool_id: "t".into(),
                    arguments: json!({}),
                    idempotency_key: None,
                    remote: false,
                }
            )
            .await
            .is_err()
    );
    store.lose_commit_answers(false);
    store.fail_reads(true);
    drop(agent);
    tokio::time::sleep(Duration::from_millis(600)).await;
    store.fail_reads(false);
    let reset = eventually(Duration::from_secs(5), || {
        let store = store.clone();
        let id = row.id.clone();
        async move {
            store
                .all_events(&id)
                .iter()
                .any(|event| event.body.type_name() == "execution.reset")
                .then_some(())
        }
    })
    .await;
    assert!(
        reset.is_some(),
        "the consumer-lost notice was retried once the store answered"
    );
    assert_eq!(
        t.kernel.execution(&row.id).await.expect("row").status,
        ExecutionStatus::Pending
    );
    t.shutdown().await;
}
