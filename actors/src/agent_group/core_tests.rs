//! Synchronous tests of every transition of the agent group's pure core, with recording
//! outlets in place of consumer streams.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::core::{Group, GroupEffect, GroupSnapshot, LostReason, OfferOutcome, Outlet, Refused};
use crate::ids::{AgentId, ExecutionId};
use crate::push::Push;

const GRACE: Duration = Duration::from_secs(5);

/// A consumer stream: records what it takes, or refuses everything.
#[derive(Clone, Default)]
struct Stream {
    taken: Rc<RefCell<Vec<Push>>>,
    refuse: Rc<RefCell<Option<Refused>>>,
}

impl Stream {
    fn events(&self) -> Vec<&'static str> {
        self.taken.borrow().iter().map(|push| push.event).collect()
    }

    fn refuse(&self, refused: Option<Refused>) {
        *self.refuse.borrow_mut() = refused;
    }
}

impl Outlet for Stream {
    fn offer(&self, push: Push) -> Result<(), Refused> {
        if let Some(refused) = *self.refuse.borrow() {
            return Err(refused);
        }
        self.taken.borrow_mut().push(push);
        Ok(())
    }
}

fn group() -> Group<Stream> {
    Group::new(AgentId::new("a"), GRACE)
}

fn id(name: &str) -> ExecutionId {
    ExecutionId::new(name)
}

fn offer(execution: &str, consumer: &str) -> GroupEffect {
    GroupEffect::Offer {
        execution_id: id(execution),
        consumer_id: consumer.into(),
    }
}

fn push(event: &'static str, execution: &str) -> Push {
    Push {
        event,
        data: json!({ "execution_id": execution }),
    }
}

fn assigned(execution: &str) -> OfferOutcome {
    OfferOutcome::Assigned(push("execution.assigned", execution))
}

#[test]
fn pending_executions_are_offered_round_robin_once_a_consumer_connects() {
    let now = Instant::now();
    let mut core = group();
    assert_eq!(
        core.execution_pending(id("e1"), 0, None),
        vec![],
        "nobody to offer to"
    );
    core.execution_pending(id("e2"), 0, None);
    let effects = core.connect("c1".into(), 1, Stream::default(), now);
    assert_eq!(
        effects,
        vec![
            GroupEffect::ConsumerBack("c1".into()),
            offer("e1", "c1"),
            offer("e2", "c1")
        ]
    );
    core.connect("c2".into(), 2, Stream::default(), now);
    assert_eq!(
        core.execution_pending(id("e3"), 0, None),
        vec![offer("e3", "c1")]
    );
    assert_eq!(
        core.execution_pending(id("e4"), 0, None),
        vec![offer("e4", "c2")]
    );
    assert_eq!(
        core.snapshot().offering,
        vec![id("e1"), id("e2"), id("e3"), id("e4")]
    );
}

#[test]
fn a_higher_priority_execution_is_offered_first() {
    let now = Instant::now();
    let mut core = group();
    core.load_pending([(id("low"), 0, None), (id("high"), 5, None)]);
    assert_eq!(core.snapshot().pending, vec![id("high"), id("low")]);
    let effects = core.connect("c1".into(), 1, Stream::default(), now);
    assert_eq!(effects[1..], [offer("high", "c1"), offer("low", "c1")]);
}

#[test]
fn an_assignment_binds_the_execution_and_goes_to_its_consumer() {
    let now = Instant::now();
    let mut core = group();
    let stream = Stream::default();
    core.connect("c1".into(), 1, stream.clone(), now);
    core.execution_pending(id("e1"), 0, None);
    assert!(core.is_offering(&id("e1")));
    let effects = core.offer_answered(id("e1"), "c1".into(), assigned("e1"), now);
    assert_eq!(effects, vec![]);
    assert!(!core.is_offering(&id("e1")));
    assert_eq!(stream.events(), vec!["execution.assigned"]);
    assert_eq!(
        core.snapshot().bindings,
        vec![("c1".into(), vec![id("e1")])]
    );
    core.session_ended(&"c1".into(), &id("e1"));
    assert_eq!(core.snapshot().bindings, vec![]);
}

#[test]
fn an_execution_no_longer_pending_is_forgotten() {
    let now = Instant::now();
    let mut core = group();
    core.connect("c1".into(), 1, Stream::default(), now);
    core.execution_pending(id("e1"), 0, None);
    core.offer_answered(id("e1"), "c1".into(), OfferOutcome::Gone, now);
    assert_eq!(
        core.snapshot(),
        GroupSnapshot {
            connected: vec![("c1".into(), 1)],
            ..Default::default()
        }
    );
}

#[test]
fn a_failed_offer_puts_the_execution_back_and_arms_one_retry() {
    let now = Instant::now();
    let mut core = group();
    core.connect("c1".into(), 1, Stream::default(), now);
    core.execution_pending(id("e1"), 0, None);
    core.execution_pending(id("e2"), 0, None);
    let failed = |core: &mut Group<Stream>, execution: &str| {
        let outcome = OfferOutcome::Failed("store unavailable".into());
        core.offer_answered(id(execution), "c1".into(), outcome, now)
    };
    assert_eq!(failed(&mut core, "e1"), vec![GroupEffect::ArmRetry]);
    assert_eq!(
        failed(&mut core, "e2"),
        vec![],
        "one retry is armed already"
    );
    assert_eq!(core.snapshot().pending, vec![id("e1"), id("e2")]);
    assert_eq!(core.retry(), vec![offer("e1", "c1"), offer("e2", "c1")]);
}

#[test]
fn a_disconnect_starts_the_grace_and_keeps_pushes_for_the_consumer() {
    let now = Instant::now();
    let mut core = group();
    let first = Stream::default();
    core.connect("c1".into(), 1, first.clone(), now);
    core.execution_pending(id("e1"), 0, None);
    core.offer_answered(id("e1"), "c1".into(), assigned("e1"), now);
    assert_eq!(
        core.disconnect(&"c1".into(), 7),
        vec![],
        "not the current connection"
    );
    assert_eq!(
        core.disconnect(&"c1".into(), 1),
        vec![GroupEffect::ArmGrace {
            consumer_id: "c1".into(),
            generation: 1
        }]
    );
    core.push(&"c1".into(), push("signal.received", "e1"), now);
    assert_eq!(core.snapshot().outbox, vec![("c1".into(), 1)]);

    // Back within the grace: the outbox is written to the new connection, the old timer is
    // stale.
    let second = Stream::default();
    core.connect("c1".into(), 2, second.clone(), now);
    assert_eq!(second.events(), vec!["signal.received"]);
    assert_eq!(core.grace_expired(&"c1".into(), 1), vec![]);
    assert_eq!(core.snapshot().lost, Vec::<String>::new());
}

#[test]
fn a_consumer_not_back_in_time_is_lost_and_its_executions_told() {
    let now = Instant::now();
    let mut core = group();
    core.connect("c1".into(), 1, Stream::default(), now);
    for execution in ["e1", "e2"] {
        core.execution_pending(id(execution), 0, None);
        core.offer_answered(id(execution), "c1".into(), assigned(execution), now);
    }
    core.disconnect(&"c1".into(), 1);
    core.push(&"c1".into(), push("signal.received", "e1"), now);
    let lost = |execution: &str| GroupEffect::TellLost {
        execution_id: id(execution),
        consumer_id: "c1".into(),
        reason: LostReason::AgentDisconnect,
    };
    assert_eq!(
        core.grace_expired(&"c1".into(), 1),
        vec![
            GroupEffect::ConsumerLost("c1".into()),
            lost("e1"),
            lost("e2")
        ]
    );
    let snapshot = core.snapshot();
    assert_eq!(
        (snapshot.lost, snapshot.outbox),
        (vec!["c1".into()], vec![])
    );
    // A push for a lost consumer tells its execution again and is kept while bound.
    assert_eq!(
        core.push(&"c1".into(), push("tool.result", "e1"), now),
        vec![lost("e1")]
    );
}

#[test]
fn a_session_restored_after_a_restart_waits_the_grace_then_resets_for_recovery() {
    let mut core = group();
    assert_eq!(
        core.session_restored("c1".into(), id("e1"), None),
        vec![GroupEffect::ArmGrace {
            consumer_id: "c1".into(),
            generation: 1
        }]
    );
    assert_eq!(
        core.session_restored("c1".into(), id("e2"), None),
        vec![],
        "one grace"
    );
    let effects = core.grace_expired(&"c1".into(), 1);
    assert_eq!(
        effects[1..],
        [
            GroupEffect::TellLost {
                execution_id: id("e1"),
                consumer_id: "c1".into(),
                reason: LostReason::Recovery,
            },
            GroupEffect::TellLost {
                execution_id: id("e2"),
                consumer_id: "c1".into(),
                reason: LostReason::Recovery,
            }
        ]
    );
}

#[test]
fn a_consumer_that_cannot_keep_up_is_disconnected_and_its_push_kept() {
    let now = Instant::now();
    let mut core = group();
    let stream = Stream::default();
    core.connect("c1".into(), 1, stream.clone(), now);
    core.execution_pending(id("e1"), 0, None);
    core.offer_answered(id("e1"), "c1".into(), assigned("e1"), now);
    stream.refuse(Some(Refused::Full));
    assert_eq!(
        core.push(&"c1".into(), push("signal.received", "e1"), now),
        vec![
            GroupEffect::SlowConsumer,
            GroupEffect::ArmGrace {
                consumer_id: "c1".into(),
                generation: 1
            }
        ]
    );
    let snapshot = core.snapshot();
    assert_eq!(snapshot.connected, vec![]);
    assert_eq!(snapshot.away, vec!["c1".to_owned()]);
    assert_eq!(snapshot.outbox, vec![("c1".into(), 1)]);
    // A closed stream is not a slow consumer.
    let closed = Stream::default();
    core.connect("c1".into(), 2, closed.clone(), now);
    closed.refuse(Some(Refused::Closed));
    let effects = core.push(&"c1".into(), push("signal.received", "e1"), now);
    assert!(!effects.contains(&GroupEffect::SlowConsumer), "{effects:?}");
}

#[test]
fn recent_results_are_replayed_on_a_reconnect_within_the_window_only() {
    let start = Instant::now();
    let mut core = group();
    core.connect("c1".into(), 1, Stream::default(), start);
    core.execution_pending(id("e1"), 0, None);
    core.offer_answered(id("e1"), "c1".into(), assigned("e1"), start);
    core.push(&"c1".into(), push("tool.result", "e1"), start);
    core.push(&"c1".into(), push("signal.received", "e1"), start);

    let again = Stream::default();
    core.connect(
        "c1".into(),
        2,
        again.clone(),
        start + Duration::from_secs(10),
    );
    assert_eq!(again.events(), vec!["tool.result"], "results only");

    let later = Stream::default();
    core.connect(
        "c1".into(),
        3,
        later.clone(),
        start + Duration::from_secs(31),
    );
    assert_eq!(later.events(), Vec::<&str>::new(), "past the window");
}

#[test]
fn a_push_for_a_consumer_that_holds_nothing_is_dropped() {
    let now = Instant::now();
    let mut core = group();
    assert_eq!(
        core.push(&"nobody".into(), push("signal.received", "e1"), now),
        vec![]
    );
    assert_eq!(core.snapshot(), GroupSnapshot::default());
}

#[test]
fn offers_in_flight_are_bounded() {
    let now = Instant::now();
    let mut core = group();
    core.connect("c1".into(), 1, Stream::default(), now);
    let limit = super::core::OFFERS_IN_FLIGHT;
    for index in 0..=limit {
        core.execution_pending(id(&format!("e{index:04}")), 0, None);
    }
    let snapshot = core.snapshot();
    assert_eq!(snapshot.offering.len(), limit);
    assert_eq!(snapshot.pending, vec![id(&format!("e{limit:04}"))]);
    let first = id("e0000");
    let effects = core.offer_answered(first, "c1".into(), OfferOutcome::Gone, now);
    assert_eq!(effects, vec![offer(&format!("e{limit:04}"), "c1")]);
}
