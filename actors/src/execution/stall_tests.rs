//! Paused-time tests of the stall watchdog (a `running` execution without intents, a
//! dispatched job nobody started: each logged, counted and recorded once per occurrence, also
//! across a restart) and of the crash-loop limit of the execution supervisor.

use std::time::Duration;

use serde_json::json;

use super::test_support::{
    allow_all, call, events_of, invoke, just_before, millis_after, next_of, payload, plus, running,
    start, succeed, wait_for,
};
use crate::execution::ExecutionMsg;
use crate::ids::{ConsumerId, RunnerId};
use crate::status::ExecutionStatus;
use crate::testing::{eventually, sleep_until};
use crate::time;

#[tokio::test(start_paused = true)]
async fn a_running_execution_without_intents_is_reported_once_per_occurrence() {
    let t = start(allow_all(), |config| {
        config.execution.stall_after = Duration::from_secs(60);
        config.agent_grace = Duration::from_secs(3600);
    })
    .await;
    let run = running(&t, "c1").await;
    let started = events_of(&t, &run.id, "execution.started")
        .remove(0)
        .timestamp;
    let due = plus(started, Duration::from_secs(60));
    sleep_until(&t.clock, just_before(due)).await;
    assert!(events_of(&t, &run.id, "execution.stalled").is_empty());
    let stalled = wait_for(&t, &run.id, "execution.stalled", 1).await;
    assert!((0..=20).contains(&millis_after(stalled.timestamp, due)));
    assert_eq!(
        payload(&stalled),
        json!({"reason": "no_intent", "since": time::format(&started)})
    );
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Running,
        "informational only"
    );
    assert!(
        t.kernel
            .encode_metrics()
            .contains("keel_stalls_total{kind=\"no_intent\"} 1")
    );

    sleep_until(&t.clock, plus(due, Duration::from_secs(600))).await;
    assert_eq!(
        events_of(&t, &run.id, "execution.stalled").len(),
        1,
        "recorded once"
    );
    let t = t
        .restart(allow_all(), |config| {
            config.execution.stall_after = Duration::from_secs(60);
            config.agent_grace = Duration::from_secs(3600);
        })
        .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        events_of(&t, &run.id, "execution.stalled").len(),
        1,
        "not recorded again after a restart"
    );

    // An intent ends the occurrence; the next idle stretch is a new one.
    let mut agent = t
        .kernel
        .connect_agent(crate::ids::AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    let step = invoke(&t, &run, call("l", false)).await;
    succeed(&t, &run.id, &run.session, step).await;
    next_of(&mut agent, "tool.result").await;
    let resumed = wait_for(&t, &run.id, "execution.resumed", 1).await;
    sleep_until(
        &t.clock,
        just_before(plus(resumed.timestamp, Duration::from_secs(60))),
    )
    .await;
    assert_eq!(events_of(&t, &run.id, "execution.stalled").len(), 1);
    let second = wait_for(&t, &run.id, "execution.stalled", 2).await;
    assert_eq!(payload(&second)["since"], time::format(&resumed.timestamp));
    assert!(
        t.kernel
            .encode_metrics()
            .contains("keel_stalls_total{kind=\"no_intent\"} 1"),
        "counters are per process"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_dispatched_job_that_is_not_started_is_reported_once() {
    let t = start(allow_all(), |config| {
        config.execution.job_start_timeout = Duration::from_secs(30)
    })
    .await;
    let run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let started_step = invoke(&t, &run, call("t", true)).await;
    next_of(&mut runner, "job.assigned").await;
    t.kernel
        .step_started(&run.id, &started_step, &RunnerId::new("r1"))
        .await
        .expect("started");
    let mut other = t
        .kernel
        .connect_runner("r2".into(), ConsumerId::new("r2-a"), vec!["t".into()])
        .await
        .expect("runner");
    let silent_step = invoke(&t, &run, call("t", true)).await;
    next_of(&mut other, "job.assigned").await;
    let dispatched = events_of(&t, &run.id, "step.dispatched")
        .pop()
        .expect("dispatched")
        .timestamp;

    let due = plus(dispatched, Duration::from_secs(30));
    sleep_until(&t.clock, just_before(due)).await;
    assert!(events_of(&t, &run.id, "execution.stalled").is_empty());
    let stalled = wait_for(&t, &run.id, "execution.stalled", 1).await;
    assert!((0..=20).contains(&millis_after(stalled.timestamp, due)));
    let expected = json!({"reason": "job_not_started", "step_id": silent_step.as_str(), "since": time::format(&dispatched)});
    assert_eq!(payload(&stalled), expected);
    assert!(
        t.kernel
            .encode_metrics()
            .contains("keel_stalls_total{kind=\"job_not_started\"} 1")
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        events_of(&t, &run.id, "execution.stalled").len(),
        1,
        "once; the started job never stalls"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_execution_actor_that_keeps_crashing_is_failed_with_crash_loop() {
    let t = start(allow_all(), |_| {}).await;
    let mut run = running(&t, "c1").await;
    for crash in 1..=4 {
        let actor = t.kernel.ctx.execution(&run.id).expect("live actor");
        actor.send_message(ExecutionMsg::Crash).expect("sent");
        let old = actor.get_id();
        let replaced = eventually(Duration::from_secs(5), || {
            let live = t
                .kernel
                .ctx
                .execution(&run.id)
                .filter(|new| new.get_id() != old);
            let failed = !events_of(&t, &run.id, "execution.failed").is_empty();
            async move { (live.is_some() || failed).then_some(()) }
        })
        .await;
        assert!(replaced.is_some(), "crash {crash} handled");
    }
    let failed = wait_for(&t, &run.id, "execution.failed", 1).await;
    let error = payload(&failed)["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.starts_with("crash_loop"), "{error}");
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Failed
    );
    assert_eq!(
        next_of(&mut run.agent, "execution.cancelled").await.data["execution_id"],
        run.id.as_str()
    );
    let metrics = t.kernel.encode_metrics();
    assert!(
        metrics.contains("keel_supervision_events_total{kind=\"execution\",event=\"restarted\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("keel_supervision_events_total{kind=\"execution\",event=\"gave_up\"} 1"),
        "{metrics}"
    );
    t.shutdown().await;
}
