//! The execution supervisor alone: a real supervisor and real execution actors on a memory
//! store, with probes in place of the agent group and the dispatcher. What it publishes, how it
//! answers activations (unknown execution, failing store, an actor draining), how it treats a
//! crash (rebuild, then `crash_loop`) and passivation.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::json;

use super::actor::record_creation;
use super::{ExecutionMsg, ExecutionSupervisor, ExecutionSupervisorMsg};
use crate::ids::ExecutionId;
use crate::kernel::KernelError;
use crate::kernel::context::{call, write};
use crate::policy::PermissiveEngine;
use crate::supervision::{ActorKind, SupervisionEvent};
use crate::testing::{ProbeContext, eventually};

const WAIT: Duration = Duration::from_secs(5);

type Activation = Result<ActorRef<ExecutionMsg>, KernelError>;

struct Fixture {
    probes: ProbeContext,
    supervisor: ActorRef<ExecutionSupervisorMsg>,
}

async fn fixture(passivate_after: Option<Duration>) -> Fixture {
    let mut probes = ProbeContext::start_with("a", Arc::new(PermissiveEngine), |config| {
        config.passivate_after = passivate_after;
    })
    .await;
    let supervisor = probes
        .spawn(
            "execution supervisor",
            ExecutionSupervisor,
            probes.ctx.clone(),
        )
        .await;
    write(&probes.ctx.singletons).executions = Some(supervisor.clone());
    Fixture { probes, supervisor }
}

impl Fixture {
    /// Records a creation in the store without starting an actor for it.
    async fn stored(&self) -> (ExecutionId, super::state::ExecutionState) {
        let id = ExecutionId::generate();
        let created = record_creation(&self.probes.ctx, &id, &"a".into(), json!({"n": 1}), None)
            .await
            .expect("creation recorded");
        (id, created)
    }

    async fn create(&self) -> (ExecutionId, ActorRef<ExecutionMsg>) {
        let (id, created) = self.stored().await;
        let create = |reply| ExecutionSupervisorMsg::Create {
            state: Box::new(created),
            reply,
        };
        let actor = call(&self.supervisor, create, WAIT, "supervisor")
            .await
            .expect("answered")
            .expect("spawned");
        (id, actor)
    }

    async fn activate(&self, id: &ExecutionId) -> Activation {
        let activate = |reply| ExecutionSupervisorMsg::Activate {
            id: id.clone(),
            announce: false,
            reply,
        };
        call(&self.supervisor, activate, WAIT, "supervisor")
            .await
            .expect("answered")
    }

    fn published(&self, id: &ExecutionId) -> Option<ractor::ActorId> {
        self.probes
            .ctx
            .executions
            .get(id)
            .map(|actor| actor.get_id())
    }

    fn supervision(&self, id: &ExecutionId) -> Vec<SupervisionEvent> {
        self.probes
            .ctx
            .metrics
            .supervision_log
            .records()
            .into_iter()
            .filter(|record| record.kind == ActorKind::Execution && record.id == id.as_str())
            .map(|record| record.event)
            .collect()
    }
}

#[tokio::test]
async fn one_actor_per_execution_is_published_and_forgotten_when_it_ends() {
    let f = fixture(None).await;
    let (id, actor) = f.create().await;
    assert_eq!(f.published(&id), Some(actor.get_id()));

    let again = f.activate(&id).await.expect("live");
    assert_eq!(again.get_id(), actor.get_id(), "no second actor");
    let (_, created) = f.stored().await;
    let duplicate = |reply| ExecutionSupervisorMsg::Create {
        state: Box::new(super::state::ExecutionState {
            id: id.clone(),
            ..created
        }),
        reply,
    };
    let same = call(&f.supervisor, duplicate, WAIT, "supervisor")
        .await
        .expect("answered")
        .expect("answered with the live actor");
    assert_eq!(
        same.get_id(),
        actor.get_id(),
        "a repeated Create finds the live actor"
    );

    actor.stop(Some("test".into()));
    let gone = eventually(WAIT, || async { f.published(&id).is_none().then_some(()) }).await;
    assert!(gone.is_some(), "a stopped actor leaves the directory");
    assert_eq!(
        f.supervision(&id),
        [
            SupervisionEvent::Started,
            SupervisionEvent::Stopped {
                reason: "test".into()
            }
        ]
    );
    f.probes.finish().await;
}

#[tokio::test]
async fn an_unknown_execution_is_not_found_and_a_failing_store_is_unavailable() {
    let f = fixture(None).await;
    let unknown = ExecutionId::generate();
    match f.activate(&unknown).await {
        Err(KernelError::Rejected(rejection)) => {
            assert!(rejection.to_string().contains("not found"), "{rejection}");
        }
        other => panic!("expected not found, got {:?}", other.map(|a| a.get_id())),
    }
    assert_eq!(f.published(&unknown), None);

    let (id, _) = f.stored().await;
    f.probes.store.fail_reads(true);
    match f.activate(&id).await {
        Err(KernelError::Unavailable(reason)) => {
            assert!(reason.contains("store unavailable"), "{reason}");
        }
        other => panic!("expected unavailable, got {:?}", other.map(|a| a.get_id())),
    }
    assert_eq!(
        f.published(&id),
        None,
        "nothing published while the store fails"
    );

    f.probes.store.fail_reads(false);
    let actor = f
        .activate(&id)
        .await
        .expect("rebuilt once the store is back");
    assert_eq!(f.published(&id), Some(actor.get_id()));
    f.probes.finish().await;
}

#[tokio::test]
async fn a_crashed_actor_is_rebuilt_and_a_crash_loop_fails_the_execution() {
    let f = fixture(None).await;
    let (id, mut actor) = f.create().await;
    for restart in 1..=3u32 {
        actor.send_message(ExecutionMsg::Crash).expect("sent");
        let previous = actor.get_id();
        actor = eventually(WAIT, || async {
            f.probes
                .ctx
                .executions
                .get(&id)
                .filter(|live| live.get_id() != previous)
        })
        .await
        .unwrap_or_else(|| panic!("rebuilt after crash {restart}"));
        let status = f
            .probes
            .store
            .all_events(&id)
            .last()
            .map(|e| e.body.type_name());
        assert_ne!(
            status,
            Some("execution.failed"),
            "crash {restart} is not a failure"
        );
    }
    let restarts: Vec<_> = f
        .supervision(&id)
        .into_iter()
        .filter_map(|event| match event {
            SupervisionEvent::Restarted { count, .. } => Some(count),
            _ => None,
        })
        .collect();
    assert_eq!(restarts, [1, 2, 3]);

    actor.send_message(ExecutionMsg::Crash).expect("sent");
    let failed = eventually(WAIT, || async {
        f.probes
            .store
            .all_events(&id)
            .into_iter()
            .find(|event| event.body.type_name() == "execution.failed")
    })
    .await
    .expect("the fourth crash within the window fails the execution");
    let payload = serde_json::to_value(&failed.body).expect("json");
    let text = payload.to_string();
    assert!(text.contains("crash_loop"), "{text}");
    assert!(
        f.supervision(&id)
            .iter()
            .any(|event| matches!(event, SupervisionEvent::GaveUp { count: 4, .. }))
    );
    f.probes.finish().await;
}

#[tokio::test]
async fn an_activation_while_an_actor_drains_waits_for_it_and_gets_it_back_when_it_stays() {
    let f = fixture(None).await;
    let (id, actor) = f.create().await;
    // An offer to stop with an activity count the actor has moved past: the supervisor takes it
    // out of the directory, the actor answers `StillBusy` and is taken back.
    let stale = ExecutionSupervisorMsg::Idle {
        id: id.clone(),
        actor: actor.get_id(),
        epoch: u64::MAX,
        wake_at: None,
    };
    f.supervisor.send_message(stale).expect("sent");
    let during = f
        .activate(&id)
        .await
        .expect("answered after the drain ended");
    assert_eq!(
        during.get_id(),
        actor.get_id(),
        "the same actor, not a second one"
    );
    assert_eq!(f.published(&id), Some(actor.get_id()), "published again");
    assert_eq!(f.probes.ctx.metrics.passivations.get(), 0);
    f.probes.finish().await;
}

#[tokio::test]
async fn an_idle_execution_is_passivated_then_rebuilt_by_the_next_activation() {
    let f = fixture(Some(Duration::ZERO)).await;
    let (id, actor) = f.create().await;
    let passivated = eventually(WAIT, || async {
        (f.probes.ctx.metrics.passivations.get() == 1).then_some(())
    })
    .await;
    assert!(
        passivated.is_some(),
        "a pending execution with no agent passivates"
    );
    assert_eq!(f.published(&id), None);
    assert_eq!(
        f.probes.ctx.metrics.executions_dormant.get(),
        1,
        "its deadline is kept in the wake index"
    );

    let rebuilt = f.activate(&id).await.expect("rebuilt");
    assert_ne!(
        rebuilt.get_id(),
        actor.get_id(),
        "a new actor, from the store"
    );
    // Still only waiting, it gives its actor back again.
    let again = eventually(WAIT, || async {
        (f.probes.ctx.metrics.passivations.get() == 2).then_some(())
    })
    .await;
    assert!(again.is_some(), "the rebuilt execution passivates again");
    f.probes.finish().await;
}

#[tokio::test]
async fn a_release_stops_the_selected_actors_and_forgets_their_wake_ups_without_a_write() {
    let f = fixture(None).await;
    let (kept, kept_actor) = f.create().await;
    let (moved, moved_actor) = f.create().await;
    let (dormant, _) = f.stored().await;
    let (dormant_kept, _) = f.stored().await;
    let far = crate::time::add(f.probes.ctx.now(), Duration::from_secs(3600));
    f.supervisor
        .send_message(ExecutionSupervisorMsg::Dormant(vec![
            (dormant.clone(), Some(far)),
            (dormant_kept.clone(), Some(far)),
        ]))
        .expect("sent");
    let indexed = eventually(WAIT, || async {
        (f.probes.ctx.metrics.executions_dormant.get() == 2).then_some(())
    })
    .await;
    assert!(indexed.is_some());
    let events_before = f
        .probes
        .ctx
        .store
        .events(&moved, 0, 100)
        .await
        .expect("read");

    let selected = [moved.clone(), dormant.clone()];
    let release = |reply| ExecutionSupervisorMsg::Release {
        matches: Arc::new(move |id: &ExecutionId| selected.contains(id)),
        reply,
    };
    let stopped = call(&f.supervisor, release, WAIT, "supervisor")
        .await
        .expect("answered")
        .expect("released");
    assert_eq!(stopped, 1, "one resident actor was selected");
    let gone = eventually(WAIT, || async {
        (f.published(&moved).is_none() && !crate::supervision::keyed::is_running(&moved_actor))
            .then_some(())
    })
    .await;
    assert!(gone.is_some(), "the moved execution's actor stopped");
    assert_eq!(
        f.published(&kept),
        Some(kept_actor.get_id()),
        "an execution not selected keeps its actor"
    );
    assert_eq!(
        f.probes.ctx.metrics.executions_dormant.get(),
        1,
        "only the unselected wake-up is left"
    );
    // Stopping wrote nothing, and the stopped actor was not rebuilt.
    let events_after = f
        .probes
        .ctx
        .store
        .events(&moved, 0, 100)
        .await
        .expect("read");
    assert_eq!(events_after.len(), events_before.len());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(f.published(&moved), None, "not restarted");
    // It can come back later (the partition returns): an activation rebuilds it from the store.
    let back = f.activate(&moved).await.expect("rebuilt");
    assert_ne!(back.get_id(), moved_actor.get_id());
    f.probes.finish().await;
}
