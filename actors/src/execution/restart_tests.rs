//! Paused-time restart tests on the memory store: timers armed before a kernel restart fire at
//! their original times afterwards (step deadline, execution deadline, retry timer), and a
//! policy rule's retry settings, recorded in `step.created`, still apply after the restart.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::test_support::{
    FixedPolicy, Running, allow_all, call, deadline_of, events_of, invoke, just_before,
    millis_after, next_of, payload, plus, running, start, wait_for,
};
use crate::events::EventBody;
use crate::execution::StepOutcome;
use crate::ids::{AgentId, ConsumerId, RunnerId};
use crate::kernel::KernelConfig;
use crate::policy::{Decision, PolicyDecision, RetrySettings};
use crate::status::ExecutionStatus;
use crate::testing::sleep_until;

fn deadlines(config: &mut KernelConfig) {
    config.execution.step_timeout = Duration::from_secs(60);
    config.execution.execution_timeout = Duration::from_secs(120);
    config.agent_grace = Duration::from_secs(600);
}

#[tokio::test(start_paused = true)]
async fn deadlines_armed_before_a_restart_fire_at_their_original_times() {
    let t = start(allow_all(), deadlines).await;
    let run = running(&t, "c1").await;
    let id = run.id.clone();
    let step = invoke(&t, &run, call("l", false)).await;
    let step_deadline = deadline_of(&events_of(&t, &id, "step.created")[0]);
    let pending = t
        .kernel
        .create_execution(AgentId::new("nobody"), json!(null), None)
        .await
        .expect("create");
    let execution_deadline = plus(pending.created_at, Duration::from_secs(120));
    tokio::time::sleep(Duration::from_secs(20)).await;
    drop(run.agent);

    let t = t.restart(allow_all(), deadlines).await;
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    sleep_until(&t.clock, just_before(step_deadline)).await;
    assert!(
        events_of(&t, &id, "step.timed_out").is_empty(),
        "not before the original deadline"
    );
    let timed_out = wait_for(&t, &id, "step.timed_out", 1).await;
    assert_eq!(timed_out.step_id, Some(step));
    assert!(
        (0..=20).contains(&millis_after(timed_out.timestamp, step_deadline)),
        "at the original deadline"
    );
    assert_eq!(
        next_of(&mut agent, "execution.cancelled").await.data["execution_id"],
        id.as_str()
    );

    sleep_until(&t.clock, just_before(execution_deadline)).await;
    assert_eq!(
        t.kernel.execution(&pending.id).await.expect("row").status,
        ExecutionStatus::Pending
    );
    let failed = wait_for(&t, &pending.id, "execution.failed", 1).await;
    assert!((0..=20).contains(&millis_after(failed.timestamp, execution_deadline)));
    assert_eq!(
        payload(&failed)["error"],
        "execution exceeded maximum duration"
    );
    t.shutdown().await;
}

fn rule() -> Arc<FixedPolicy> {
    let retry = RetrySettings {
        max_attempts: 3,
        base_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(7),
    };
    let decision = PolicyDecision {
        retry: Some(retry),
        timeout_ms: Some(4000),
        ..PolicyDecision::plain(Decision::Allow, "r", "ok")
    };
    Arc::new(FixedPolicy(decision))
}

fn no_jitter(config: &mut KernelConfig) {
    config.execution.retry_jitter = false;
    config.agent_grace = Duration::from_secs(600);
}

#[tokio::test(start_paused = true)]
async fn a_rule_retry_timer_armed_before_a_restart_fires_on_time_with_the_rule_delays() {
    let t = start(rule(), no_jitter).await;
    let run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let step = invoke(&t, &run, call("t", true)).await;
    let created = payload(&events_of(&t, &run.id, "step.created")[0]);
    assert_eq!(
        (
            &created["max_attempts"],
            &created["retry_base_delay_ms"],
            &created["retry_max_delay_ms"],
            &created["timeout_ms"]
        ),
        (&json!(3), &json!(5000), &json!(7000), &json!(4000))
    );
    next_of(&mut runner, "job.assigned").await;
    let fail = || StepOutcome {
        step_id: step.clone(),
        success: false,
        data: None,
        error: Some("flaky".into()),
        retryable: true,
        cost: None,
    };
    let (runner_id, consumer) = (RunnerId::new("r1"), ConsumerId::new("r1-a"));
    t.kernel
        .runner_result(&runner_id, Some(&consumer), &run.id, fail())
        .await
        .expect("result");
    let retried = wait_for(&t, &run.id, "step.retried", 1).await;
    let EventBody::StepRetried {
        not_before: Some(due),
        ..
    } = retried.body
    else {
        panic!("not_before")
    };
    assert_eq!(
        millis_after(due, retried.timestamp),
        5000,
        "the rule's base delay, not the kernel's"
    );
    drop(runner);
    let Running { id, session, agent } = run;
    drop(agent);

    let t = t.restart(rule(), no_jitter).await;
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), consumer.clone(), vec!["t".into()])
        .await
        .expect("runner");
    sleep_until(&t.clock, just_before(due)).await;
    assert_eq!(
        events_of(&t, &id, "step.dispatched").len(),
        1,
        "the retry waits for its original time"
    );
    let dispatched = wait_for(&t, &id, "step.dispatched", 2).await;
    assert!(
        (0..=20).contains(&millis_after(dispatched.timestamp, due)),
        "retry fired on time after the restart"
    );
    assert_eq!(
        millis_after(deadline_of(&dispatched), dispatched.timestamp),
        4000,
        "the rule's timeout applies to the retry"
    );
    assert_eq!(
        next_of(&mut runner, "job.assigned").await.data["attempt"],
        2
    );

    t.kernel
        .runner_result(&runner_id, Some(&consumer), &id, fail())
        .await
        .expect("result");
    let retried = wait_for(&t, &id, "step.retried", 2).await;
    let EventBody::StepRetried {
        not_before: Some(due),
        ..
    } = retried.body
    else {
        panic!("not_before")
    };
    assert_eq!(
        millis_after(due, retried.timestamp),
        7000,
        "10 s backoff capped at the rule's 7 s"
    );
    sleep_until(&t.clock, due).await;
    assert_eq!(
        next_of(&mut runner, "job.assigned").await.data["attempt"],
        3
    );
    t.kernel
        .runner_result(&runner_id, Some(&consumer), &id, fail())
        .await
        .expect("result");
    let result = next_of(&mut agent, "tool.result").await;
    assert_eq!(
        (
            result.data["status"].as_str(),
            result.data["error"].as_str()
        ),
        (Some("failed"), Some("flaky"))
    );
    let reply = t
        .kernel
        .submit_intent(
            &id,
            &session,
            crate::execution::Intent::Complete { output: None },
        )
        .await;
    assert!(reply.expect("same session after the restart").accepted);
    t.shutdown().await;
}

fn runner_grace(config: &mut KernelConfig) {
    config.runner_grace = Duration::from_secs(10);
    config.agent_grace = Duration::from_secs(600);
}

#[tokio::test(start_paused = true)]
async fn jobs_in_runners_hands_at_a_restart_wait_the_runner_grace_before_going_elsewhere() {
    let t = start(allow_all(), runner_grace).await;
    let run = running(&t, "c1").await;
    let mut r1 = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["a".into()])
        .await
        .expect("r1");
    let mut r3 = t
        .kernel
        .connect_runner("r3".into(), ConsumerId::new("r3-a"), vec!["b".into()])
        .await
        .expect("r3");
    let returning = invoke(&t, &run, call("a", true)).await;
    let abandoned = invoke(&t, &run, call("b", true)).await;
    next_of(&mut r1, "job.assigned").await;
    let lost_job = next_of(&mut r3, "job.assigned").await;
    let Running { id, agent, .. } = run;
    drop((agent, r1, r3));

    let t = t.restart(allow_all(), runner_grace).await;
    let restarted = t.clock.now();
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    let _r1 = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["a".into()])
        .await
        .expect("r1");
    let mut r2 = t
        .kernel
        .connect_runner(
            "r2".into(),
            ConsumerId::new("r2-a"),
            vec!["a".into(), "b".into()],
        )
        .await
        .expect("r2");
    sleep_until(&t.clock, plus(restarted, Duration::from_secs(5))).await;
    let outcome = StepOutcome {
        step_id: returning.clone(),
        success: true,
        data: Some(json!("done")),
        error: None,
        retryable: false,
        cost: None,
    };
    t.kernel
        .runner_result(
            &RunnerId::new("r1"),
            Some(&ConsumerId::new("r1-a")),
            &id,
            outcome,
        )
        .await
        .expect("late result accepted");
    let result = next_of(&mut agent, "tool.result").await;
    assert_eq!(result.data["step_id"], returning.as_str());

    let early = tokio::time::timeout(Duration::from_millis(1), r2.next()).await;
    assert!(early.is_err(), "held for the runner grace: {early:?}");
    sleep_until(&t.clock, plus(restarted, Duration::from_secs(10))).await;
    let redelivered = next_of(&mut r2, "job.assigned").await;
    assert_eq!(
        (
            redelivered.data["step_id"].as_str(),
            redelivered.data["attempt"].as_i64(),
            &redelivered.data["id"]
        ),
        (Some(abandoned.as_str()), Some(1), &lost_job.data["id"]),
        "the same job, not a retry"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(events_of(&t, &id, "step.retried").len(), 0);
    assert_eq!(
        events_of(&t, &id, "step.completed").len(),
        1,
        "the returned job ran once"
    );
    t.shutdown().await;
}
