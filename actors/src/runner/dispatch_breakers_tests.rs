//! Tests of the dispatcher's runner circuit breakers: a runner id whose jobs keep failing gets
//! no job for the cool-down (others get them), then one job as its probe; a success closes it.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::dispatch::{ConnectionKey, Dispatch, DispatchEffect, DispatchInput};
use crate::execution::JobSpec;
use crate::guardrails::breaker::{BreakerChange, BreakerConfig, BreakerScope, BreakerSet};
use crate::ids::{ConsumerId, RunnerId, StepId};
use crate::policy::rules::Glob;
use crate::time::Timestamp;

fn at(second: u32) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second)
        .single()
        .unwrap_or_default()
}

fn key(runner: &str) -> ConnectionKey {
    (
        RunnerId::new(runner),
        ConsumerId::new(format!("{runner}-c")),
    )
}

fn job(id: &str) -> JobSpec {
    JobSpec {
        traceparent: None,
        idempotency_key: None,
        job_id: id.into(),
        execution_id: "e1".into(),
        step_id: StepId::new(format!("step-{id}")),
        attempt: 1,
        tool_id: "index".into(),
        arguments: json!({}),
        deadline: at(59),
        not_before: None,
    }
}

fn delivered(effects: &[DispatchEffect]) -> Vec<(String, String)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            DispatchEffect::Deliver { key, job } => {
                Some((key.0.as_str().to_owned(), job.job_id.to_string()))
            }
            _ => None,
        })
        .collect()
}

fn result(runner: &str, success: bool) -> DispatchInput {
    DispatchInput::RunnerResult {
        runner_id: RunnerId::new(runner),
        success,
    }
}

/// A dispatcher where every runner id has a breaker (2 failures in 1m, 10 s cool-down), with
/// connections of runners `flaky` and `steady`.
fn guarded() -> Dispatch {
    let mut core = Dispatch::default();
    let config = BreakerConfig {
        tools: vec![Glob::new("*").unwrap_or_else(|error| panic!("{error}"))],
        scope: BreakerScope::Runner,
        failures: 2,
        failure_rate: None,
        window: Duration::from_secs(60),
        window_text: "1m".into(),
        cool_down: Duration::from_secs(10),
        cool_down_text: "10s".into(),
    };
    core.apply(
        DispatchInput::SetRunnerBreakers(BreakerSet(vec![config])),
        at(0),
    );
    for (index, runner) in ["flaky", "steady"].into_iter().enumerate() {
        let connected = DispatchInput::Connected {
            key: key(runner),
            connection: index as u64,
            capabilities: vec!["index".into()],
        };
        core.apply(connected, at(0));
    }
    core
}

#[test]
fn a_runner_whose_jobs_keep_failing_is_skipped_for_the_cool_down_then_probed() {
    let mut core = guarded();
    assert_eq!(core.apply(result("flaky", false), at(1)), []);
    let effects = core.apply(result("flaky", false), at(2));
    assert!(
        matches!(&effects[..], [DispatchEffect::RunnerCircuit(BreakerChange::Opened { tool_id, failures: 2, .. })] if tool_id == "flaky"),
        "{effects:?}"
    );
    assert_eq!(core.runner_circuits_open(), 1);
    let view = core.runner_breakers_view(at(3));
    assert_eq!(view[0]["runner_id"], "flaky");
    assert_eq!(view[0]["state"], "open");
    // Both connections are idle; only `steady` gets jobs while `flaky` is open.
    let first = core.apply(DispatchInput::Enqueue(job("j1")), at(3));
    assert_eq!(delivered(&first), [("steady".to_owned(), "j1".to_owned())]);
    let second = core.apply(DispatchInput::Enqueue(job("j2")), at(4));
    assert_eq!(delivered(&second), []);
    assert_eq!(core.snapshot().queued, ["j2"]);
    // After the cool-down the next pass hands `flaky` one job: its probe.
    let probe = core.apply(DispatchInput::Tick, at(12));
    assert_eq!(delivered(&probe), [("flaky".to_owned(), "j2".to_owned())]);
    let closed = core.apply(result("flaky", true), at(13));
    assert_eq!(
        closed,
        [DispatchEffect::RunnerCircuit(BreakerChange::Closed {
            tool_id: "flaky".into()
        })]
    );
    assert_eq!(core.runner_circuits_open(), 0);
}

#[test]
fn a_failed_probe_opens_the_runner_breaker_again() {
    let mut core = guarded();
    core.apply(result("flaky", false), at(1));
    core.apply(result("flaky", false), at(2));
    let probe = core.apply(DispatchInput::Enqueue(job("j1")), at(12));
    assert_eq!(delivered(&probe), [("flaky".to_owned(), "j1".to_owned())]);
    let effects = core.apply(result("flaky", false), at(13));
    assert!(
        matches!(
            &effects[..],
            [DispatchEffect::RunnerCircuit(BreakerChange::Opened {
                probe: true,
                ..
            })]
        ),
        "{effects:?}"
    );
    assert!(core.runner_breakers_view(at(14))[0]["until"].is_string());
}

#[test]
fn runners_without_a_matching_entry_and_results_of_others_change_nothing() {
    let mut core = Dispatch::default();
    assert_eq!(core.apply(result("flaky", false), at(1)), []);
    assert_eq!(core.apply(result("flaky", false), at(2)), []);
    assert!(core.runner_breakers_view(at(3)).is_empty());
}

fn stored(runner: &str, success: bool, second: u32) -> crate::store::RunnerToolResult {
    crate::store::RunnerToolResult {
        runner_id: runner.into(),
        success,
        at: at(second),
    }
}

#[test]
fn results_replayed_from_the_store_rebuild_an_open_runner_breaker() {
    // A dispatcher started after a restart: the results before it come from the log.
    let mut core = guarded();
    let log = [
        stored("flaky", false, 1),
        stored("steady", false, 1),
        stored("flaky", false, 2),
        stored("steady", true, 2),
    ];
    core.replay_runner_results(&log, at(5));
    assert_eq!(core.runner_circuits_open(), 1);
    let view = core.runner_breakers_view(at(5));
    assert_eq!(view.len(), 2, "{view:?}");
    assert_eq!(view[0]["runner_id"], "flaky");
    assert_eq!(view[0]["state"], "open");
    assert_eq!(view[0]["until"], "2026-01-01T00:00:12.000000Z");
    assert_eq!(view[1]["runner_id"], "steady");
    assert_eq!(view[1]["state"], "closed");
    // The rebuilt breaker steers jobs as the live one did: none for `flaky` until the probe.
    let effects = core.apply(DispatchInput::Enqueue(job("j1")), at(6));
    assert_eq!(
        delivered(&effects),
        [("steady".to_owned(), "j1".to_owned())]
    );
    let effects = core.apply(DispatchInput::Enqueue(job("j2")), at(7));
    assert_eq!(delivered(&effects), []);
    let probe = core.apply(DispatchInput::Tick, at(12));
    assert_eq!(delivered(&probe), [("flaky".to_owned(), "j2".to_owned())]);
}

#[test]
fn replayed_results_older_than_the_window_leave_the_breaker_closed_and_forgotten() {
    let mut core = guarded();
    // Two failures 61 s apart never fall within one 1m window.
    core.replay_runner_results(&[stored("flaky", false, 0)], at(0));
    let mut later = guarded();
    let minute_on = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 1, 1)
        .single()
        .unwrap_or_default();
    let far = crate::store::RunnerToolResult {
        at: minute_on,
        ..stored("flaky", false, 0)
    };
    later.replay_runner_results(&[stored("flaky", false, 0), far], minute_on);
    assert_eq!(later.runner_circuits_open(), 0);
    assert_eq!(later.runner_breakers_view(minute_on)[0]["state"], "closed");
    // Nothing matches a runner without an entry: a dispatcher without breakers keeps none.
    let mut plain = Dispatch::default();
    plain.replay_runner_results(
        &[stored("flaky", false, 1), stored("flaky", false, 2)],
        at(3),
    );
    assert!(plain.runner_breakers_view(at(3)).is_empty());
    assert_eq!(core.runner_circuits_open(), 0);
}
