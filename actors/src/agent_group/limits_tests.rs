//! Tests of the agent's running slots (`concurrency.max_running`) in the group's pure core:
//! executions beyond the limit stay pending in queue order and are offered as slots free.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::core::{Group, GroupEffect, OfferOutcome, Outlet, Refused};
use crate::ids::{AgentId, ExecutionId};
use crate::push::Push;

/// A consumer stream that takes everything.
#[derive(Clone, Default)]
struct Open;

impl Outlet for Open {
    fn offer(&self, _push: Push) -> Result<(), Refused> {
        Ok(())
    }
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

fn assigned(execution: &str) -> OfferOutcome {
    OfferOutcome::Assigned(Push {
        event: "execution.assigned",
        data: json!({ "execution_id": execution }),
    })
}

fn limited(limit: u32) -> Group<Open> {
    let mut core = Group::new(AgentId::new("a"), Duration::from_secs(5));
    core.set_running_limit(Some(limit));
    core
}

#[test]
fn executions_beyond_max_running_wait_and_are_offered_in_order_as_slots_free() {
    let now = Instant::now();
    let mut core = limited(2);
    core.load_pending([
        (id("e1"), 0, None),
        (id("e2"), 0, None),
        (id("e3"), 0, None),
        (id("e4"), 0, None),
    ]);
    let effects = core.connect("c1".into(), 1, Open, now);
    assert_eq!(effects[1..], [offer("e1", "c1"), offer("e2", "c1")]);
    assert_eq!(core.running_slots(), (Some(2), 2, 2));
    assert_eq!(
        core.offer_answered(id("e1"), "c1".into(), assigned("e1"), now),
        []
    );
    assert_eq!(
        core.offer_answered(id("e2"), "c1".into(), assigned("e2"), now),
        []
    );
    assert_eq!(core.snapshot().pending, [id("e3"), id("e4")]);
    // A new execution queues behind the waiting ones.
    assert_eq!(core.execution_pending(id("e5"), 0, None), []);
    assert_eq!(
        core.session_ended(&"c1".into(), &id("e2")),
        [offer("e3", "c1")]
    );
    core.offer_answered(id("e3"), "c1".into(), assigned("e3"), now);
    assert_eq!(
        core.session_ended(&"c1".into(), &id("e1")),
        [offer("e4", "c1")]
    );
    assert_eq!(core.snapshot().pending, [id("e5")]);
    // An end the group has already seen frees nothing.
    assert_eq!(core.session_ended(&"c1".into(), &id("e1")), []);
}

#[test]
fn priority_decides_which_waiting_execution_gets_a_freed_slot() {
    let now = Instant::now();
    let mut core = limited(1);
    core.connect("c1".into(), 1, Open, now);
    assert_eq!(
        core.execution_pending(id("first"), 0, None),
        [offer("first", "c1")]
    );
    core.offer_answered(id("first"), "c1".into(), assigned("first"), now);
    core.execution_pending(id("low"), 0, None);
    core.execution_pending(id("high"), 9, None);
    assert_eq!(
        core.session_ended(&"c1".into(), &id("first")),
        [offer("high", "c1")]
    );
}

#[test]
fn executions_found_running_at_start_hold_their_slots_until_they_end() {
    let now = Instant::now();
    let mut core = limited(2);
    core.load_running([(id("r1"), None), (id("r2"), None)]);
    core.load_pending([(id("p1"), 0, None)]);
    let effects = core.connect("c1".into(), 1, Open, now);
    assert_eq!(effects, [GroupEffect::ConsumerBack("c1".into())]);
    // The rebuilt execution re-announcing its session takes no second slot.
    core.session_restored("c0".into(), id("r1"), None);
    assert_eq!(core.running_slots(), (Some(2), 2, 1));
    assert_eq!(
        core.session_ended(&"c0".into(), &id("r1")),
        [offer("p1", "c1")]
    );
}

#[test]
fn a_session_that_ends_before_its_offer_is_answered_takes_no_slot() {
    let now = Instant::now();
    let mut core = limited(1);
    core.connect("c1".into(), 1, Open, now);
    core.execution_pending(id("e1"), 0, None);
    core.execution_pending(id("e2"), 0, None);
    // The execution was assigned and cancelled; its end overtook the offer's answer.
    assert_eq!(core.session_ended(&"c1".into(), &id("e1")), []);
    let effects = core.offer_answered(id("e1"), "c1".into(), assigned("e1"), now);
    assert_eq!(effects, [offer("e2", "c1")]);
    assert_eq!(core.running_slots(), (Some(1), 1, 0));
}

#[test]
fn a_failed_or_refused_offer_gives_its_slot_back() {
    let now = Instant::now();
    let mut core = limited(1);
    core.connect("c1".into(), 1, Open, now);
    core.execution_pending(id("e1"), 0, None);
    core.execution_pending(id("e2"), 0, None);
    let gone = core.offer_answered(id("e1"), "c1".into(), OfferOutcome::Gone, now);
    assert_eq!(gone, [offer("e2", "c1")]);
    let failed = OfferOutcome::Failed("store unavailable".into());
    let effects = core.offer_answered(id("e2"), "c1".into(), failed, now);
    assert_eq!(effects, [GroupEffect::ArmRetry]);
    assert_eq!(core.retry(), [offer("e2", "c1")]);
}

#[test]
fn raising_or_removing_the_limit_offers_the_waiting_executions() {
    let now = Instant::now();
    let mut core = limited(1);
    core.connect("c1".into(), 1, Open, now);
    core.execution_pending(id("e1"), 0, None);
    core.execution_pending(id("e2"), 0, None);
    core.execution_pending(id("e3"), 0, None);
    assert_eq!(core.set_running_limit(Some(2)), [offer("e2", "c1")]);
    assert_eq!(core.set_running_limit(None), [offer("e3", "c1")]);
    assert_eq!(core.running_slots(), (None, 3, 0));
    // Lowering it below the running count stops new offers; nobody is taken off.
    core.set_running_limit(Some(1));
    assert_eq!(core.execution_pending(id("e4"), 0, None), []);
}

#[test]
fn a_reset_execution_frees_its_slot_and_queues_again() {
    let now = Instant::now();
    let mut core = limited(1);
    core.connect("c1".into(), 1, Open, now);
    core.execution_pending(id("e1"), 0, None);
    core.offer_answered(id("e1"), "c1".into(), assigned("e1"), now);
    core.execution_pending(id("e2"), 0, None);
    // The consumer was lost: the execution's session ends, then it is pending again.
    assert_eq!(
        core.session_ended(&"c1".into(), &id("e1")),
        [offer("e2", "c1")]
    );
    assert_eq!(core.execution_pending(id("e1"), 0, None), []);
    assert_eq!(core.snapshot().pending, [id("e1")]);
}
