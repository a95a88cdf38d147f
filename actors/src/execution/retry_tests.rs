//! Paused-time tests of retries: exponential backoff delivered exactly at each `not_before`,
//! capped by the maximum; jitter within the upper half of the backoff; exhaustion reported to
//! the agent; and a runner that leaves holding a job, re-queued after the runner grace.

use std::time::Duration;

use serde_json::json;

use super::test_support::{
    allow_all, call, events_of, invoke, just_before, millis_after, next_of, payload, plus, running,
    start, wait_for,
};
use crate::events::{Event, EventBody};
use crate::execution::StepOutcome;
use crate::execution::machine;
use crate::ids::{ConsumerId, ExecutionId, RunnerId, StepId};
use crate::kernel::PushStream;
use crate::testing::{TestKernel, sleep_until};
use crate::time::Timestamp;

/// Most virtual milliseconds between a due time and the event it causes.
const ON_TIME_MS: i64 = 20;

fn not_before(event: &Event) -> Timestamp {
    match &event.body {
        EventBody::StepRetried {
            not_before: Some(at),
            ..
        } => *at,
        other => panic!("no not_before in {other:?}"),
    }
}

/// Reports a retryable failure of `job` from runner `r1`.
async fn fail(t: &TestKernel, id: &ExecutionId, step: &StepId) {
    let outcome = StepOutcome {
        step_id: step.clone(),
        success: false,
        data: None,
        error: Some("tool broke".into()),
        retryable: true,
        cost: None,
    };
    let runner = (RunnerId::new("r1"), ConsumerId::new("r1-a"));
    t.kernel
        .runner_result(&runner.0, Some(&runner.1), id, outcome)
        .await
        .expect("result accepted");
}

async fn job(runner: &mut PushStream, step: &StepId, attempt: i64) {
    let job = next_of(runner, "job.assigned").await;
    assert_eq!(
        (job.data["step_id"].as_str(), job.data["attempt"].as_i64()),
        (Some(step.as_str()), Some(attempt))
    );
}

#[tokio::test(start_paused = true)]
async fn each_retry_is_delivered_at_its_backoff_capped_by_the_maximum() {
    let t = start(allow_all(), |config| {
        config.execution.retry_base_delay = Duration::from_secs(1);
        config.execution.retry_max_delay = Duration::from_secs(3);
        config.execution.retry_jitter = false;
        config.execution.remote_max_attempts = 4;
    })
    .await;
    let mut run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let step = invoke(&t, &run, call("t", true)).await;
    job(&mut runner, &step, 1).await;
    for (attempt, delay) in [(2, 1), (3, 2), (4, 3)] {
        fail(&t, &run.id, &step).await;
        let retried = wait_for(&t, &run.id, "step.retried", attempt - 1).await;
        assert_eq!(payload(&retried)["next_attempt"], attempt);
        let due = not_before(&retried);
        assert_eq!(
            millis_after(due, retried.timestamp),
            delay * 1000,
            "backoff before attempt {attempt}"
        );
        sleep_until(&t.clock, just_before(due)).await;
        assert_eq!(
            events_of(&t, &run.id, "step.dispatched").len(),
            attempt - 1,
            "attempt {attempt} not before {due}"
        );
        let dispatched = wait_for(&t, &run.id, "step.dispatched", attempt).await;
        assert!(
            (0..=ON_TIME_MS).contains(&millis_after(dispatched.timestamp, due)),
            "attempt {attempt} on time"
        );
        assert_eq!(payload(&dispatched)["runner_id"], "r1");
        job(&mut runner, &step, i64::try_from(attempt).expect("small")).await;
    }
    fail(&t, &run.id, &step).await;
    let result = next_of(&mut run.agent, "tool.result").await;
    assert_eq!(
        (
            result.data["status"].as_str(),
            result.data["error"].as_str()
        ),
        (Some("failed"), Some("tool broke"))
    );
    let failures = events_of(&t, &run.id, "step.failed");
    assert_eq!(failures.len(), 4);
    assert_eq!(
        payload(&failures[3])["retryable"],
        false,
        "the last failure is final"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn jittered_delays_stay_within_the_upper_half_of_the_backoff() {
    let t = start(allow_all(), |config| {
        config.execution.retry_base_delay = Duration::from_secs(1);
        config.execution.retry_max_delay = Duration::from_secs(4);
        config.execution.remote_max_attempts = 6;
    })
    .await;
    let run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let step = invoke(&t, &run, call("t", true)).await;
    for attempt in 1..6 {
        job(&mut runner, &step, attempt).await;
        fail(&t, &run.id, &step).await;
        let retried = wait_for(
            &t,
            &run.id,
            "step.retried",
            usize::try_from(attempt).expect("small"),
        )
        .await;
        let ceiling =
            machine::retry_delay(attempt + 1, Duration::from_secs(1), Duration::from_secs(4));
        let delay = millis_after(not_before(&retried), retried.timestamp);
        let ceiling = i64::try_from(ceiling.as_millis()).expect("small");
        assert!(
            (ceiling / 2..=ceiling).contains(&delay),
            "attempt {}: {delay} ms outside [{}, {ceiling}]",
            attempt + 1,
            ceiling / 2
        );
    }
    t.shutdown().await;
}

#[test]
fn jitter_scales_the_backoff_between_half_and_full_and_never_past_the_cap() {
    let (base, cap) = (Duration::from_secs(2), Duration::from_secs(10));
    assert_eq!(machine::jittered_retry_delay(2, base, cap, 1.0), base);
    assert_eq!(machine::jittered_retry_delay(2, base, cap, 0.0), base / 2);
    assert_eq!(
        machine::jittered_retry_delay(3, base, cap, 0.5),
        Duration::from_secs(3)
    );
    assert_eq!(machine::jittered_retry_delay(9, base, cap, 1.0), cap);
    assert_eq!(
        machine::jittered_retry_delay(9, base, cap, 7.0),
        cap,
        "out-of-range jitter is clamped"
    );
    assert_eq!(machine::jittered_retry_delay(2, base, cap, f64::NAN), base);
}

#[tokio::test(start_paused = true)]
async fn a_runner_that_does_not_return_within_its_grace_loses_the_job_to_another_runner() {
    let t = start(allow_all(), |config| {
        config.runner_grace = Duration::from_secs(5);
        config.execution.retry_base_delay = Duration::from_secs(1);
        config.execution.retry_jitter = false;
    })
    .await;
    let run = running(&t, "c1").await;
    let mut first = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let step = invoke(&t, &run, call("t", true)).await;
    let original = next_of(&mut first, "job.assigned").await;
    let mut second = t
        .kernel
        .connect_runner("r2".into(), ConsumerId::new("r2-a"), vec!["t".into()])
        .await
        .expect("runner");
    let left_at = t.clock.now();
    drop(first);

    let expiry = plus(left_at, Duration::from_secs(5));
    sleep_until(&t.clock, just_before(expiry)).await;
    assert!(
        events_of(&t, &run.id, "step.failed").is_empty(),
        "the runner may still come back"
    );
    let failed = wait_for(&t, &run.id, "step.failed", 1).await;
    assert!(
        (0..=ON_TIME_MS).contains(&millis_after(failed.timestamp, expiry)),
        "grace ended on time"
    );
    assert_eq!(
        payload(&failed),
        json!({"error": "runner disconnected", "retryable": true})
    );
    let retried = wait_for(&t, &run.id, "step.retried", 1).await;
    let requeued = next_of(&mut second, "job.assigned").await;
    assert_eq!(
        (
            requeued.data["step_id"].as_str(),
            requeued.data["attempt"].as_i64()
        ),
        (Some(step.as_str()), Some(2))
    );
    assert_ne!(requeued.data["id"], original.data["id"], "a fresh job id");
    let dispatched = wait_for(&t, &run.id, "step.dispatched", 2).await;
    assert_eq!(payload(&dispatched)["runner_id"], "r2");
    assert!((0..=ON_TIME_MS).contains(&millis_after(dispatched.timestamp, not_before(&retried))));
    t.shutdown().await;
}

/// A budget of one retry per execution: the first retryable failure of a step is retried, the
/// second is final and says why; the step recorded the budget (so a restart keeps it).
#[tokio::test(start_paused = true)]
async fn a_retry_budget_makes_the_failure_past_it_final() {
    use super::test_support::FixedPolicy;
    use crate::guardrails::budget::Budget;
    use crate::policy::{Decision, PolicyDecision};
    let decision = PolicyDecision {
        budget: Some(std::sync::Arc::new(Budget {
            max_retries: Some(1),
            ..Budget::default()
        })),
        ..PolicyDecision::plain(Decision::Allow, "r", "ok")
    };
    let t = start(std::sync::Arc::new(FixedPolicy(decision)), |config| {
        config.execution.retry_base_delay = Duration::from_secs(1);
        config.execution.retry_jitter = false;
        config.execution.remote_max_attempts = 5;
    })
    .await;
    let mut run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let step = invoke(&t, &run, call("t", true)).await;
    let created = events_of(&t, &run.id, "step.created").remove(0);
    assert_eq!(payload(&created)["max_retries"], 1);
    job(&mut runner, &step, 1).await;
    fail(&t, &run.id, &step).await;
    wait_for(&t, &run.id, "step.retried", 1).await;
    job(&mut runner, &step, 2).await;
    fail(&t, &run.id, &step).await;
    let result = next_of(&mut run.agent, "tool.result").await;
    assert_eq!(
        result.data["error"],
        "tool broke (not retried: budget max_retries 1 reached)"
    );
    let failures = events_of(&t, &run.id, "step.failed");
    assert_eq!(failures.len(), 2);
    assert_eq!(payload(&failures[1])["retryable"], false);
    assert_eq!(events_of(&t, &run.id, "step.retried").len(), 1);
    t.shutdown().await;
}
