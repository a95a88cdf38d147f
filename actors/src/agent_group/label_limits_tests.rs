//! Tests of the limits per label value (`concurrency.labels`) in the group's pure core: a
//! pending execution whose label value is full is skipped over, keeps its place, and is offered
//! first once its value frees; executions without the label are not limited by it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::core::{Group, GroupEffect, OfferOutcome, Outlet, Refused};
use crate::guardrails::concurrency::{LabelLimit, LabelSet, LabelUse, Labels, RunningLimits};
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

fn tenant(value: &str) -> Labels {
    Some(LabelSet::from(BTreeMap::from([(
        "tenant".to_owned(),
        value.to_owned(),
    )])))
}

fn offer(execution: &str) -> GroupEffect {
    GroupEffect::Offer {
        execution_id: id(execution),
        consumer_id: "c1".into(),
    }
}

fn assigned(execution: &str) -> OfferOutcome {
    OfferOutcome::Assigned(Push {
        event: "execution.assigned",
        data: json!({ "execution_id": execution }),
    })
}

fn limits(max_running: Option<u32>, per_tenant: u32) -> RunningLimits {
    RunningLimits {
        max_running,
        labels: vec![LabelLimit {
            label: "tenant".into(),
            max_running: per_tenant,
        }],
    }
}

/// A group with `limits` and one connected consumer `c1`.
fn group(limits: RunningLimits) -> Group<Open> {
    let mut core = Group::new(AgentId::new("a"), Duration::from_secs(5));
    core.set_running_limits(limits);
    core.connect("c1".into(), 1, Open, Instant::now());
    core
}

/// Answers the offers of `executions` with assignments; returns the effects of the last one.
fn assign(core: &mut Group<Open>, executions: &[&str]) -> Vec<GroupEffect> {
    let mut effects = Vec::new();
    for execution in executions {
        effects = core.offer_answered(
            id(execution),
            "c1".into(),
            assigned(execution),
            Instant::now(),
        );
    }
    effects
}

#[test]
fn an_execution_whose_value_is_full_is_skipped_and_keeps_its_place() {
    let mut core = group(limits(None, 1));
    assert_eq!(
        core.execution_pending(id("a1"), 0, tenant("acme")),
        [offer("a1")]
    );
    assert_eq!(core.execution_pending(id("a2"), 0, tenant("acme")), []);
    // Another tenant behind it, and an execution without the label, are not held back.
    assert_eq!(
        core.execution_pending(id("b1"), 0, tenant("bolt")),
        [offer("b1")]
    );
    assert_eq!(core.execution_pending(id("n1"), 0, None), [offer("n1")]);
    assert_eq!(core.snapshot().pending, [id("a2")]);
    assign(&mut core, &["a1", "b1", "n1"]);
    // `acme`'s slot frees: its waiting execution goes at once.
    assert_eq!(core.session_ended(&"c1".into(), &id("a1")), [offer("a2")]);
    // An end of another tenant's execution offers nothing of `acme`'s.
    assert_eq!(core.execution_pending(id("a3"), 0, tenant("acme")), []);
    assert_eq!(core.session_ended(&"c1".into(), &id("b1")), []);
    assert_eq!(core.snapshot().pending, [id("a3")]);
}

#[test]
fn the_held_back_execution_goes_first_once_its_value_frees_in_queue_order() {
    let mut core = group(limits(Some(2), 1));
    core.load_pending([
        (id("a1"), 0, tenant("acme")),
        (id("a2"), 0, tenant("acme")),
        (id("b1"), 0, tenant("bolt")),
        (id("b2"), 0, tenant("bolt")),
        (id("n1"), 0, None),
    ]);
    // The queue is loaded after the consumer connected: a retry (or any event) offers it.
    assert_eq!(core.retry(), [offer("a1"), offer("b1")]);
    assert_eq!(core.running_slots(), (Some(2), 2, 3));
    assign(&mut core, &["a1", "b1"]);
    // `bolt` frees: `a2` is still full, so `b2` (behind it) takes the agent's free slot.
    assert_eq!(core.session_ended(&"c1".into(), &id("b1")), [offer("b2")]);
    assign(&mut core, &["b2"]);
    // `acme` frees: `a2` goes before `n1`, which arrived later.
    assert_eq!(core.session_ended(&"c1".into(), &id("a1")), [offer("a2")]);
    assign(&mut core, &["a2"]);
    assert_eq!(core.session_ended(&"c1".into(), &id("a2")), [offer("n1")]);
    assert_eq!(core.snapshot().pending, Vec::<ExecutionId>::new());
}

#[test]
fn priority_decides_among_the_executions_of_a_value_that_frees() {
    let mut core = group(limits(None, 1));
    core.execution_pending(id("first"), 0, tenant("acme"));
    assign(&mut core, &["first"]);
    core.execution_pending(id("low"), 0, tenant("acme"));
    core.execution_pending(id("high"), 7, tenant("acme"));
    assert_eq!(
        core.session_ended(&"c1".into(), &id("first")),
        [offer("high")]
    );
}

#[test]
fn offers_in_flight_count_and_a_failed_or_refused_offer_frees_its_value() {
    let mut core = group(limits(None, 1));
    core.execution_pending(id("a1"), 0, tenant("acme"));
    // Not answered yet: the offer holds `acme`'s slot.
    assert_eq!(core.execution_pending(id("a2"), 0, tenant("acme")), []);
    let failed = OfferOutcome::Failed("store unavailable".into());
    let effects = core.offer_answered(id("a1"), "c1".into(), failed, Instant::now());
    assert_eq!(effects, [GroupEffect::ArmRetry]);
    // The retry offers `a1` again (it went back to its place, ahead of `a2`).
    assert_eq!(core.retry(), [offer("a1")]);
    let gone = core.offer_answered(id("a1"), "c1".into(), OfferOutcome::Gone, Instant::now());
    assert_eq!(gone, [offer("a2")]);
}

#[test]
fn a_reset_execution_frees_its_value_and_queues_again_behind_the_waiting_ones() {
    let mut core = group(limits(None, 1));
    core.execution_pending(id("a1"), 0, tenant("acme"));
    assign(&mut core, &["a1"]);
    core.execution_pending(id("a2"), 0, tenant("acme"));
    // Its consumer was lost: the session ends, then the execution is pending again.
    assert_eq!(core.session_ended(&"c1".into(), &id("a1")), [offer("a2")]);
    assert_eq!(core.execution_pending(id("a1"), 0, tenant("acme")), []);
    assert_eq!(core.snapshot().pending, [id("a1")]);
    // An end the group has already seen frees nothing twice.
    assert_eq!(core.session_ended(&"c1".into(), &id("a1")), []);
    assign(&mut core, &["a2"]);
    assert_eq!(core.session_ended(&"c1".into(), &id("a2")), [offer("a1")]);
}

#[test]
fn executions_found_running_at_start_hold_their_values() {
    let mut core = Group::new(AgentId::new("a"), Duration::from_secs(5));
    core.load_running([(id("r1"), tenant("acme")), (id("r2"), None)]);
    core.load_pending([(id("p1"), 0, tenant("acme")), (id("p2"), 0, tenant("bolt"))]);
    core.set_running_limits(limits(None, 1));
    let effects = core.connect("c1".into(), 1, Open, Instant::now());
    assert_eq!(effects[1..], [offer("p2")]);
    // The rebuilt execution re-announcing its session takes no second slot of `acme`.
    assert_eq!(
        core.session_restored("c0".into(), id("r1"), None),
        [GroupEffect::ArmGrace {
            consumer_id: "c0".into(),
            generation: 1,
        }]
    );
    assert_eq!(core.session_ended(&"c0".into(), &id("r1")), [offer("p1")]);
}

#[test]
fn a_raised_or_removed_label_limit_offers_the_held_back_executions() {
    let mut core = group(limits(None, 1));
    for name in ["a1", "a2", "a3", "a4"] {
        core.execution_pending(id(name), 0, tenant("acme"));
    }
    assign(&mut core, &["a1"]);
    assert_eq!(core.set_running_limits(limits(None, 2)), [offer("a2")]);
    assign(&mut core, &["a2"]);
    // Lowered below what runs: nobody is taken off, nothing new is offered.
    assert_eq!(core.set_running_limits(limits(None, 1)), []);
    assert_eq!(core.session_ended(&"c1".into(), &id("a1")), []);
    assert_eq!(
        core.set_running_limits(RunningLimits::default()),
        [offer("a3"), offer("a4")]
    );
}

#[test]
fn the_label_gauges_count_all_values_of_a_key_and_the_executions_held_back() {
    let mut core = group(limits(None, 1));
    core.execution_pending(id("a1"), 0, tenant("acme"));
    core.execution_pending(id("b1"), 0, tenant("bolt"));
    core.execution_pending(id("a2"), 0, tenant("acme"));
    core.execution_pending(id("a3"), 0, tenant("acme"));
    core.execution_pending(id("n1"), 0, None);
    let used = LabelUse {
        label: "tenant".into(),
        limit: 1,
        in_use: 2,
    };
    assert_eq!(core.label_slots(), [(used, 2)]);
    let unlimited = group(RunningLimits::default());
    assert_eq!(unlimited.label_slots(), []);
}
