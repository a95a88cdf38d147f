//! `Keyed` with a minimal child actor: what it publishes, what it forgets, and how it judges
//! failures per key.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent as RactorEvent};
use tokio::sync::mpsc;

use super::{Directory, Keyed};
use crate::metrics::Metrics;
use crate::supervision::{ActorKind, SupervisionEvent};
use crate::testing::LeakCheck;

const WAIT: Duration = Duration::from_secs(5);

/// A child that fails when told to, or stops in its own start when its key says so.
struct Child;

enum ChildMsg {
    Fail,
}

impl Actor for Child {
    type Msg = ChildMsg;
    type State = ();
    type Arguments = &'static str;

    async fn pre_start(
        &self,
        myself: ActorRef<ChildMsg>,
        key: &'static str,
    ) -> Result<(), ActorProcessingErr> {
        if key == "done" {
            myself.stop(Some("nothing to do".into()));
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<ChildMsg>,
        message: ChildMsg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ChildMsg::Fail => Err("told to fail".into()),
        }
    }
}

/// What the parent saw, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    Spawned(&'static str),
    Ended(Option<&'static str>),
    Failed(Option<(&'static str, bool, u32)>),
}

/// A parent owning a `Keyed` of children; reports what it did on a channel.
struct Parent;

enum ParentMsg {
    Spawn(&'static str),
    Take(&'static str, ractor::RpcReplyPort<bool>),
}

struct ParentState {
    children: Keyed<&'static str, ChildMsg>,
    seen: mpsc::UnboundedSender<Seen>,
}

impl Actor for Parent {
    type Msg = ParentMsg;
    type State = ParentState;
    type Arguments = (
        Directory<&'static str, ChildMsg>,
        Arc<Metrics>,
        mpsc::UnboundedSender<Seen>,
    );

    async fn pre_start(
        &self,
        _myself: ActorRef<ParentMsg>,
        (directory, metrics, seen): Self::Arguments,
    ) -> Result<ParentState, ActorProcessingErr> {
        let children = Keyed::new(ActorKind::AgentGroup, metrics).publishing(directory);
        Ok(ParentState { children, seen })
    }

    async fn handle(
        &self,
        myself: ActorRef<ParentMsg>,
        message: ParentMsg,
        state: &mut ParentState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ParentMsg::Spawn(key) => {
                state
                    .children
                    .spawn(&myself.get_cell(), key, Child, key)
                    .await?;
                let _ = state.seen.send(Seen::Spawned(key));
            }
            ParentMsg::Take(key, reply) => {
                let _ = reply.send(state.children.take(&key).is_some());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<ParentMsg>,
        event: RactorEvent,
        state: &mut ParentState,
    ) -> Result<(), ActorProcessingErr> {
        let seen = match event {
            RactorEvent::ActorTerminated(cell, _, _) => {
                Seen::Ended(state.children.terminated(&cell))
            }
            RactorEvent::ActorFailed(cell, error) => Seen::Failed(
                state
                    .children
                    .failed(&cell, error.to_string())
                    .map(|(key, verdict)| (key, verdict.restart, verdict.count)),
            ),
            _ => return Ok(()),
        };
        let _ = state.seen.send(seen);
        Ok(())
    }
}

async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, seen.recv())
        .await
        .expect("in time")
        .expect("parent running")
}

#[tokio::test]
async fn children_are_published_while_live_and_judged_per_key_when_they_fail() {
    let directory = Directory::default();
    let metrics = Arc::new(Metrics::new());
    let (sender, mut seen) = mpsc::unbounded_channel();
    let mut check = LeakCheck::new();
    let parent = check
        .spawn(
            "parent",
            Parent,
            (directory.clone(), metrics.clone(), sender),
        )
        .await;

    parent.send_message(ParentMsg::Spawn("a")).expect("sent");
    assert_eq!(next(&mut seen).await, Seen::Spawned("a"));
    let first = directory.get(&"a").expect("published");

    // A failure is counted against the key: the budget of an agent group allows 10 restarts.
    first.send_message(ChildMsg::Fail).expect("sent");
    assert_eq!(next(&mut seen).await, Seen::Failed(Some(("a", true, 1))));
    assert!(
        directory.get(&"a").is_none(),
        "a failed child leaves the directory"
    );
    parent.send_message(ParentMsg::Spawn("a")).expect("sent");
    assert_eq!(next(&mut seen).await, Seen::Spawned("a"));
    let second = directory.get(&"a").expect("published again");
    assert_ne!(second.get_id(), first.get_id());
    second.send_message(ChildMsg::Fail).expect("sent");
    assert_eq!(next(&mut seen).await, Seen::Failed(Some(("a", true, 2))));

    // Taken out of service: no longer published, still known until it ends.
    parent.send_message(ParentMsg::Spawn("b")).expect("sent");
    assert_eq!(next(&mut seen).await, Seen::Spawned("b"));
    let b = directory.get(&"b").expect("published");
    let taken = parent
        .call(|reply| ParentMsg::Take("b", reply), Some(WAIT))
        .await
        .expect("answered")
        .unwrap_or(false);
    assert!(taken);
    assert!(directory.get(&"b").is_none());
    b.stop(None);
    assert_eq!(next(&mut seen).await, Seen::Ended(Some("b")));

    // A child that stops as soon as it starts is reported and forgotten when it ends.
    parent.send_message(ParentMsg::Spawn("done")).expect("sent");
    assert_eq!(next(&mut seen).await, Seen::Spawned("done"));
    assert_eq!(next(&mut seen).await, Seen::Ended(Some("done")));
    assert!(directory.is_empty());

    let events: Vec<_> = metrics
        .supervision_log
        .records()
        .into_iter()
        .filter(|record| record.id == "a")
        .map(|record| record.event)
        .collect();
    assert!(matches!(
        events.as_slice(),
        [
            SupervisionEvent::Started,
            SupervisionEvent::Restarted { count: 1, .. },
            SupervisionEvent::Started,
            SupervisionEvent::Restarted { count: 2, .. },
        ]
    ));
    check.finish().await;
}
