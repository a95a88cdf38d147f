//! Tests of the dispatcher's tool limits (`concurrency.tools`): jobs of a tool id at its
//! `max_concurrent_steps` keep their place in the queue and go, in order, as slots free.

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::dispatch::{ConnectionKey, Dispatch, DispatchEffect, DispatchInput};
use super::dispatch_limits::ToolSlots;
use crate::execution::JobSpec;
use crate::guardrails::concurrency::{ToolLimit, ToolLimits};
use crate::ids::{ConsumerId, RunnerId, StepId};
use crate::policy::rules::Glob;
use crate::time::Timestamp;

fn at(second: u32) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second)
        .single()
        .unwrap_or_default()
}

fn key(consumer: &str) -> ConnectionKey {
    (RunnerId::new("r"), ConsumerId::new(consumer))
}

fn job(id: &str, tool: &str) -> JobSpec {
    JobSpec {
        traceparent: None,
        idempotency_key: None,
        job_id: id.into(),
        execution_id: "e1".into(),
        step_id: StepId::new(format!("step-{id}")),
        attempt: 1,
        tool_id: tool.into(),
        arguments: json!({}),
        deadline: at(59),
        not_before: None,
    }
}

fn connect(consumer: &str, connection: u64) -> DispatchInput {
    DispatchInput::Connected {
        key: key(consumer),
        connection,
        capabilities: vec!["pay.charge".into(), "pay.refund".into(), "search".into()],
    }
}

fn delivered(effects: &[DispatchEffect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            DispatchEffect::Deliver { job, .. } => Some(job.job_id.to_string()),
            _ => None,
        })
        .collect()
}

/// A dispatcher whose `pay.*` tool ids may each have `limit` jobs in runners' hands, with
/// three idle connections.
fn limited(limit: u32) -> Dispatch {
    let mut core = Dispatch::default();
    let glob = Glob::new("pay.*").unwrap_or_else(|error| panic!("{error}"));
    let limits = ToolLimits(vec![ToolLimit {
        tools: vec![glob],
        max_concurrent_steps: limit,
    }]);
    core.apply(DispatchInput::SetToolLimits(limits), at(0));
    for (index, consumer) in ["c1", "c2", "c3"].into_iter().enumerate() {
        core.apply(connect(consumer, index as u64), at(0));
    }
    core
}

#[test]
fn jobs_of_a_tool_at_its_limit_wait_in_order_and_go_as_slots_free() {
    let mut core = limited(1);
    assert_eq!(
        delivered(&core.apply(DispatchInput::Enqueue(job("j1", "pay.charge")), at(1))),
        ["j1"]
    );
    assert_eq!(
        delivered(&core.apply(DispatchInput::Enqueue(job("j2", "pay.charge")), at(1))),
        Vec::<String>::new()
    );
    assert_eq!(
        delivered(&core.apply(DispatchInput::Enqueue(job("j3", "pay.charge")), at(1))),
        Vec::<String>::new()
    );
    // Other tool ids are not held back, whether they match another limit or none.
    assert_eq!(
        delivered(&core.apply(DispatchInput::Enqueue(job("j4", "search")), at(1))),
        ["j4"]
    );
    assert_eq!(
        core.tool_slots().get("pay.charge"),
        Some(&ToolSlots {
            limit: 1,
            in_flight: 1,
            waiting: 2
        })
    );
    assert_eq!(core.snapshot().queued, ["j2", "j3"]);
    // The runner holding j1 posted its result: j2, the first in the queue, goes.
    let holder = core
        .snapshot()
        .connections
        .into_iter()
        .find(|(_, held)| held.as_ref().is_some_and(|job| *job == "j1"))
        .map(|(key, _)| key)
        .unwrap_or_else(|| panic!("j1 is in a runner's hands"));
    assert_eq!(
        delivered(&core.apply(DispatchInput::ConnectionFree(holder), at(2))),
        ["j2"]
    );
    // A step that ends (cancelled) frees its slot too.
    let ended = DispatchInput::StepEnded {
        step_id: StepId::new("step-j2"),
        cancel_reason: Some("execution cancelled".into()),
    };
    assert_eq!(delivered(&core.apply(ended, at(3))), ["j3"]);
}

#[test]
fn each_matching_tool_id_has_a_limit_of_its_own() {
    let mut core = limited(1);
    core.apply(DispatchInput::Enqueue(job("j1", "pay.charge")), at(1));
    let effects = core.apply(DispatchInput::Enqueue(job("j2", "pay.refund")), at(1));
    assert_eq!(delivered(&effects), ["j2"]);
}

#[test]
fn jobs_a_runner_may_still_hold_keep_their_slot() {
    let mut core = limited(2);
    // Recovered after a restart: held for the runner grace, some runner may be running it.
    core.apply(DispatchInput::Recovered(job("old", "pay.charge")), at(0));
    core.apply(DispatchInput::Enqueue(job("j1", "pay.charge")), at(1));
    // Its runner (the first connection, by round-robin) left holding j1, within its grace.
    assert_eq!(
        core.snapshot().connections[0],
        (key("c1"), Some("j1".into()))
    );
    core.apply(
        DispatchInput::Disconnected {
            key: key("c1"),
            connection: 0,
        },
        at(2),
    );
    assert_eq!(core.snapshot().orphaned.len(), 1);
    let effects = core.apply(DispatchInput::Enqueue(job("j2", "pay.charge")), at(3));
    assert_eq!(
        delivered(&effects),
        Vec::<String>::new(),
        "held + orphaned = 2"
    );
    // The hold of the recovered job ends: it is queued (behind j2) and frees its slot for j2.
    let released = DispatchInput::ReleaseRecovered {
        job_id: "old".into(),
    };
    assert_eq!(delivered(&core.apply(released, at(4))), ["j2"]);
    assert_eq!(core.snapshot().queued, ["old"]);
}

#[test]
fn a_raised_or_removed_limit_lets_queued_jobs_go() {
    let mut core = limited(1);
    for id in ["j1", "j2", "j3"] {
        core.apply(DispatchInput::Enqueue(job(id, "pay.charge")), at(1));
    }
    assert_eq!(core.snapshot().queued, ["j2", "j3"]);
    let effects = core.apply(DispatchInput::SetToolLimits(ToolLimits::default()), at(2));
    assert_eq!(delivered(&effects), ["j2", "j3"]);
    assert!(core.tool_slots().is_empty());
}

/// Returns the connection holding `job_id`.
fn holder_of(core: &Dispatch, job_id: &str) -> ConnectionKey {
    core.snapshot()
        .connections
        .into_iter()
        .find(|(_, held)| held.as_ref().is_some_and(|held| held.as_str() == job_id))
        .map(|(key, _)| key)
        .unwrap_or_else(|| panic!("{job_id} is in a runner's hands"))
}

#[test]
fn a_failed_runner_actor_keeps_its_tool_slot_for_the_grace_and_frees_it_once() {
    let mut core = limited(1);
    core.apply(DispatchInput::Enqueue(job("j1", "pay.charge")), at(1));
    core.apply(DispatchInput::Enqueue(job("j2", "pay.charge")), at(1));
    let failed = holder_of(&core, "j1");
    // The actor failed: the runner may still be running j1, so its slot stays taken and j2
    // waits, although two connections are idle.
    let effects = core.apply(DispatchInput::RunnerFailed(failed.clone()), at(2));
    assert_eq!(
        effects,
        [DispatchEffect::ArmRunnerGrace {
            key: failed.clone(),
            generation: 1
        }]
    );
    assert_eq!(core.snapshot().queued, ["j2"]);
    assert_eq!(core.tool_slots()["pay.charge"].in_flight, 1);
    // Its disconnect arriving later changes nothing (the connection is gone already).
    let late = DispatchInput::Disconnected {
        key: failed.clone(),
        connection: 0,
    };
    assert_eq!(core.apply(late, at(3)), []);
    assert_eq!(core.tool_slots()["pay.charge"].in_flight, 1);
    // The runner reconnects with the job and reports it: the slot frees once, and j2 goes once.
    let index = if failed.1.as_str() == "c1" { 0 } else { 1 };
    core.apply(connect(failed.1.as_str(), 10 + index), at(4));
    assert_eq!(holder_of(&core, "j1"), failed);
    let freed = core.apply(DispatchInput::ConnectionFree(failed.clone()), at(5));
    assert_eq!(delivered(&freed), ["j2"]);
    let again = core.apply(DispatchInput::ConnectionFree(failed), at(6));
    assert_eq!(delivered(&again), Vec::<String>::new());
    assert_eq!(core.tool_slots()["pay.charge"].in_flight, 1, "j2 only");
}

#[test]
fn a_failed_runner_actor_that_does_not_come_back_loses_its_job_after_the_grace() {
    let mut core = limited(1);
    core.apply(DispatchInput::Enqueue(job("j1", "pay.charge")), at(1));
    core.apply(DispatchInput::Enqueue(job("j2", "pay.charge")), at(1));
    let failed = holder_of(&core, "j1");
    core.apply(DispatchInput::RunnerFailed(failed.clone()), at(2));
    let expired = DispatchInput::GraceExpired {
        key: failed,
        generation: 1,
    };
    // The execution is told and the slot frees with the orphan: j2 goes in the same pass.
    let effects = core.apply(expired, at(30));
    assert!(
        matches!(&effects[0], DispatchEffect::RunnerLost(lost) if lost.job_id == "j1"),
        "{effects:?}"
    );
    assert_eq!(delivered(&effects), ["j2"]);
    // The step's end (its attempt failed) frees nothing a second time.
    let ended = DispatchInput::StepEnded {
        step_id: StepId::new("step-j1"),
        cancel_reason: None,
    };
    assert_eq!(core.apply(ended, at(31)), []);
    assert_eq!(core.tool_slots()["pay.charge"].in_flight, 1, "j2 only");
}
