//! One agent group alone, with probes in place of its executions: an assignment reaching the
//! consumer, an execution whose store fails the first offer, an execution that never answers,
//! and a consumer that drops mid-conversation (back in time, or lost).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::json;
use tokio::sync::mpsc;

use super::{AgentGroupActor, AgentGroupArgs, AgentGroupMsg, GroupSnapshot};
use crate::error::StoreError;
use crate::execution::ExecutionMsg;
use crate::ids::{AgentId, ConsumerId, ExecutionId};
use crate::kernel::KernelError;
use crate::policy::PermissiveEngine;
use crate::push::Push;
use crate::testing::{Probe, ProbeContext, Script, Unanswered, eventually, observe};

const WAIT: Duration = Duration::from_secs(5);

/// What an execution probe saw.
#[derive(Debug, PartialEq)]
enum Seen {
    Offer(ConsumerId),
    ConsumerLost {
        consumer_id: ConsumerId,
        reason: String,
    },
    Other,
}

fn assignment(execution: &ExecutionId) -> Push {
    Push {
        event: "execution.assigned",
        data: json!({ "execution_id": execution.as_str(), "session_id": "s1" }),
    }
}

/// Records a message and answers it: offers with `offer`, lost-consumer notices with an ack.
fn answer(
    message: ExecutionMsg,
    offer: impl FnOnce(ractor::RpcReplyPort<Result<Push, KernelError>>),
) -> Seen {
    match message {
        ExecutionMsg::OfferToConsumer { consumer_id, reply } => {
            offer(reply);
            Seen::Offer(consumer_id)
        }
        ExecutionMsg::ConsumerLost {
            consumer_id,
            reason,
            ack,
        } => {
            if let Some(ack) = ack {
                let _ = ack.send(());
            }
            Seen::ConsumerLost {
                consumer_id,
                reason,
            }
        }
        _ => Seen::Other,
    }
}

/// An execution that takes every offer.
fn taking(execution: ExecutionId) -> impl FnMut(ExecutionMsg) -> Seen + Send + 'static {
    move |message| {
        answer(message, |reply| {
            let _ = reply.send(Ok(assignment(&execution)));
        })
    }
}

async fn group(probes: &mut ProbeContext) -> ActorRef<AgentGroupMsg> {
    let args = AgentGroupArgs {
        ctx: probes.ctx.clone(),
        agent_id: AgentId::new("a"),
    };
    probes.spawn("agent group", AgentGroupActor, args).await
}

fn connect(group: &ActorRef<AgentGroupMsg>, connection: u64) -> mpsc::Receiver<Push> {
    let (sender, stream) = mpsc::channel(16);
    let message = AgentGroupMsg::ConsumerConnected {
        consumer_id: "c1".into(),
        connection,
        sender,
    };
    group.send_message(message).expect("group running");
    stream
}

async fn pending(group: &ActorRef<AgentGroupMsg>, execution: &ExecutionId) {
    let message = |reply| AgentGroupMsg::ExecutionPending {
        execution_id: execution.clone(),
        priority: 0,
        labels: None,
        reply: Some(reply),
    };
    group
        .call(message, Some(WAIT))
        .await
        .expect("group running");
}

async fn next(stream: &mut mpsc::Receiver<Push>) -> Push {
    tokio::time::timeout(WAIT, stream.recv())
        .await
        .expect("a push in time")
        .expect("stream open")
}

#[tokio::test]
async fn a_pending_execution_is_offered_and_its_assignment_reaches_the_consumer() {
    let id = ExecutionId::generate();
    let mut execution = Probe::answering(taking(id.clone())).await;
    let mut probes = ProbeContext::start("a", Arc::new(PermissiveEngine)).await;
    probes.register_execution(&id, execution.actor.clone());
    let group = group(&mut probes).await;
    let mut stream = connect(&group, 1);

    pending(&group, &id).await;
    assert_eq!(execution.expect(WAIT, Some).await, Seen::Offer("c1".into()));
    let pushed = next(&mut stream).await;
    assert_eq!(pushed, assignment(&id));
    assert_eq!(
        observe(&group, AgentGroupMsg::Observe).await,
        GroupSnapshot {
            connected: vec![("c1".into(), 1)],
            bindings: vec![("c1".into(), vec![id.clone()])],
            ..Default::default()
        }
    );
    probes.finish().await;
}

#[tokio::test(start_paused = true)]
async fn an_offer_refused_by_a_failing_store_is_made_again_after_the_retry_delay() {
    let id = ExecutionId::generate();
    let script = Script::new(taking(id.clone())).then(|message| {
        answer(message, |reply| {
            let outage = StoreError::Unavailable("database is down".into());
            let _ = reply.send(Err(KernelError::Store(outage)));
        })
    });
    let mut execution = Probe::scripted(script).await;
    let mut probes = ProbeContext::start("a", Arc::new(PermissiveEngine)).await;
    probes.register_execution(&id, execution.actor.clone());
    let group = group(&mut probes).await;
    let mut stream = connect(&group, 1);

    pending(&group, &id).await;
    assert_eq!(execution.expect(WAIT, Some).await, Seen::Offer("c1".into()));
    let after_failure = observe(&group, AgentGroupMsg::Observe).await;
    assert_eq!(
        after_failure.pending,
        vec![id.clone()],
        "put back in the queue"
    );
    assert!(stream.try_recv().is_err(), "nothing assigned yet");

    assert_eq!(execution.expect(WAIT, Some).await, Seen::Offer("c1".into()));
    assert_eq!(next(&mut stream).await, assignment(&id));
    probes.finish().await;
}

#[tokio::test(start_paused = true)]
async fn an_execution_that_never_answers_keeps_its_place_and_is_offered_again() {
    let id = ExecutionId::generate();
    let unanswered = Unanswered::default();
    let keep = unanswered.clone();
    let mut execution =
        Probe::answering(move |message| answer(message, |reply| keep.keep(reply))).await;
    let mut probes = ProbeContext::start_with("a", Arc::new(PermissiveEngine), |config| {
        config.call_timeout = Duration::from_secs(2);
    })
    .await;
    probes.register_execution(&id, execution.actor.clone());
    let group = group(&mut probes).await;
    let mut stream = connect(&group, 1);

    // No creator waits here: one would be answered only when the offer is (timed out).
    let message = AgentGroupMsg::ExecutionPending {
        execution_id: id.clone(),
        priority: 0,
        labels: None,
        reply: None,
    };
    group.send_message(message).expect("sent");
    assert_eq!(execution.expect(WAIT, Some).await, Seen::Offer("c1".into()));
    let in_flight = observe(&group, AgentGroupMsg::Observe).await;
    assert_eq!(in_flight.offering, vec![id.clone()]);
    assert!(in_flight.pending.is_empty());

    // The call times out, the execution goes back, and the retry offers it once more.
    assert_eq!(execution.expect(WAIT, Some).await, Seen::Offer("c1".into()));
    assert_eq!(unanswered.len(), 2);
    assert!(stream.try_recv().is_err(), "nothing was assigned");
    probes.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_drops_mid_conversation_gets_its_pushes_if_back_in_time_else_is_lost() {
    let id = ExecutionId::generate();
    let mut execution = Probe::answering(taking(id.clone())).await;
    let mut probes = ProbeContext::start_with("a", Arc::new(PermissiveEngine), |config| {
        config.agent_grace = Duration::from_secs(3);
    })
    .await;
    probes.register_execution(&id, execution.actor.clone());
    let group = group(&mut probes).await;
    let mut stream = connect(&group, 1);
    pending(&group, &id).await;
    execution.expect(WAIT, Some).await;
    next(&mut stream).await;

    // The connection drops; a signal arrives meanwhile and waits in the outbox.
    let leave = |connection| AgentGroupMsg::ConsumerDisconnected {
        consumer_id: "c1".into(),
        connection,
    };
    group.send_message(leave(1)).expect("sent");
    let signal = Push {
        event: "signal.received",
        data: json!({ "execution_id": id.as_str() }),
    };
    let message = AgentGroupMsg::Push {
        consumer_id: "c1".into(),
        push: signal.clone(),
    };
    group.send_message(message).expect("sent");
    let away = observe(&group, AgentGroupMsg::Observe).await;
    assert_eq!(
        (away.away, away.outbox),
        (vec!["c1".into()], vec![("c1".into(), 1)])
    );
    let mut back = connect(&group, 2);
    assert_eq!(
        next(&mut back).await,
        signal,
        "the outbox on the new connection"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    execution
        .expect_none_within(Duration::from_millis(100))
        .await;

    // Gone for good: after the grace the execution is told, with the reason.
    group.send_message(leave(2)).expect("sent");
    let lost = execution.expect(Duration::from_secs(10), Some).await;
    assert_eq!(
        lost,
        Seen::ConsumerLost {
            consumer_id: "c1".into(),
            reason: "agent_disconnect".into()
        }
    );
    let group_ref = group.clone();
    let marked = eventually(WAIT, || {
        let group = group_ref.clone();
        async move {
            let snapshot = observe(&group, AgentGroupMsg::Observe).await;
            (snapshot.lost == vec!["c1".to_owned()]).then_some(())
        }
    })
    .await;
    assert!(marked.is_some());
    assert!(
        probes.ctx.consumer_lost(&AgentId::new("a"), &"c1".into()),
        "executions can read that the consumer is lost"
    );
    probes.finish().await;
}
