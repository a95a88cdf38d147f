//! Paused-time restart tests of `idempotency: at_most_once` steps on the memory store: a job a
//! runner held when the kernel stopped is never queued again without an operator's answer
//! (its step records `step.outcome_unknown` after the runner grace), a step already waiting
//! for an answer stays so across a restart, and a job that never left the kernel is delivered
//! as usual (docs/failure-semantics.md, "At-most-once tools: outcome unknown").

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::machine::Reconciliation;
use super::test_support::{
    FixedPolicy, Running, call, events_of, invoke, next_of, payload, running, start, wait_for,
};
use crate::execution::StepOutcome;
use crate::ids::{AgentId, ConsumerId, RunnerId};
use crate::kernel::{KernelConfig, PushStream};
use crate::policy::{Decision, PolicyDecision};
use crate::testing::TestKernel;

fn once() -> Arc<FixedPolicy> {
    Arc::new(FixedPolicy(PolicyDecision {
        at_most_once: true,
        ..PolicyDecision::plain(Decision::Allow, "charge-once", "ok")
    }))
}

fn graces(config: &mut KernelConfig) {
    config.runner_grace = Duration::from_secs(10);
    config.agent_grace = Duration::from_secs(600);
    config.execution.step_timeout = Duration::from_secs(300);
    config.execution.execution_timeout = Duration::from_secs(900);
}

async fn runner(t: &TestKernel, id: &str) -> PushStream {
    t.kernel
        .connect_runner(
            id.into(),
            ConsumerId::new(format!("{id}-a")),
            vec!["pay".into()],
        )
        .await
        .expect("runner")
}

async fn agent(t: &TestKernel) -> PushStream {
    t.kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("agent")
}

/// Asserts that `stream` gets no push within a minute.
async fn quiet(stream: &mut PushStream, what: &str) {
    let push = tokio::time::timeout(Duration::from_secs(60), stream.next()).await;
    assert!(push.is_err(), "{what}: {push:?}");
}

#[tokio::test(start_paused = true)]
async fn a_delivered_at_most_once_job_is_not_run_again_after_kernel_restarts() {
    let t = start(once(), graces).await;
    let run = running(&t, "c1").await;
    let mut r1 = runner(&t, "r1").await;
    let step = invoke(&t, &run, call("pay", true)).await;
    let job = next_of(&mut r1, "job.assigned").await;
    // The delivery is in the log before the job leaves the kernel, with the runner's id.
    let dispatched = events_of(&t, &run.id, "step.dispatched");
    assert_eq!(dispatched.len(), 2, "queued, then claimed by r1");
    assert_eq!(payload(&dispatched[1])["runner_id"], "r1");
    assert_eq!(payload(&dispatched[1])["job_id"], job.data["id"]);
    let Running { id, agent: a, .. } = run;
    drop((a, r1));

    let t = t.restart(once(), graces).await;
    let _agent = agent(&t).await;
    let mut r2 = runner(&t, "r2").await;
    tokio::time::sleep(Duration::from_secs(10)).await; // the runner grace
    let unknown = wait_for(&t, &id, "step.outcome_unknown", 1).await;
    assert_eq!(unknown.step_id.as_ref(), Some(&step));
    quiet(
        &mut r2,
        "no runner gets the job of a step whose outcome is unknown",
    )
    .await;
    assert!(events_of(&t, &id, "step.retried").is_empty());
    drop(r2);

    // Restarted again while it waits for an answer: still no job, still answerable.
    let t = t.restart(once(), graces).await;
    let _agent = agent(&t).await;
    let mut r2 = runner(&t, "r2").await;
    quiet(
        &mut r2,
        "a restart does not queue a step waiting for an answer",
    )
    .await;
    assert_eq!(events_of(&t, &id, "step.outcome_unknown").len(), 1);
    assert_eq!(events_of(&t, &id, "step.dispatched").len(), 2);
    t.kernel
        .reconcile_step(&id, &step, Reconciliation::RunAgain, None)
        .await
        .expect("answer");
    let again = next_of(&mut r2, "job.assigned").await;
    assert_eq!(
        (
            again.data["attempt"].as_i64(),
            &again.data["idempotency_key"]
        ),
        (Some(2), &job.data["idempotency_key"]),
        "run again on the operator's word, with the same idempotency key"
    );
    let done = StepOutcome {
        step_id: step.clone(),
        success: true,
        data: Some(json!({"charge": "ch_1"})),
        error: None,
        retryable: false,
        cost: None,
    };
    t.kernel
        .runner_result(
            &RunnerId::new("r2"),
            Some(&ConsumerId::new("r2-a")),
            &id,
            done,
        )
        .await
        .expect("result");
    wait_for(&t, &id, "step.completed", 1).await;
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_runner_back_within_its_grace_after_a_restart_reports_the_at_most_once_step() {
    let t = start(once(), graces).await;
    let run = running(&t, "c1").await;
    let mut r1 = runner(&t, "r1").await;
    let step = invoke(&t, &run, call("pay", true)).await;
    next_of(&mut r1, "job.assigned").await;
    let Running { id, agent: a, .. } = run;
    drop((a, r1));

    let t = t.restart(once(), graces).await;
    let mut agent = agent(&t).await;
    let _r1 = runner(&t, "r1").await;
    let done = StepOutcome {
        step_id: step.clone(),
        success: true,
        data: Some(json!({"charge": "ch_1"})),
        error: None,
        retryable: false,
        cost: None,
    };
    t.kernel
        .runner_result(
            &RunnerId::new("r1"),
            Some(&ConsumerId::new("r1-a")),
            &id,
            done,
        )
        .await
        .expect("late result accepted");
    assert_eq!(
        next_of(&mut agent, "tool.result").await.data["step_id"],
        step.as_str()
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(events_of(&t, &id, "step.outcome_unknown").is_empty());
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_at_most_once_job_that_never_left_the_kernel_is_delivered_after_a_restart() {
    let t = start(once(), graces).await;
    let run = running(&t, "c1").await;
    let step = invoke(&t, &run, call("pay", true)).await;
    let Running { id, agent: a, .. } = run;
    drop(a);

    let t = t.restart(once(), graces).await;
    let _agent = agent(&t).await;
    let mut r2 = runner(&t, "r2").await;
    tokio::time::sleep(Duration::from_secs(10)).await; // held for the runner grace, as any job
    let job = next_of(&mut r2, "job.assigned").await;
    assert_eq!(job.data["step_id"], step.as_str());
    assert_eq!(job.data["attempt"], 1);
    assert!(events_of(&t, &id, "step.outcome_unknown").is_empty());
    t.shutdown().await;
}

fn short_agent_grace(config: &mut KernelConfig) {
    graces(config);
    config.agent_grace = Duration::from_secs(2);
}

#[tokio::test(start_paused = true)]
async fn a_rerun_after_the_agent_was_lost_does_not_repeat_a_delivered_at_most_once_call() {
    let t = start(once(), short_agent_grace).await;
    let run = running(&t, "c1").await;
    let mut r1 = runner(&t, "r1").await;
    let lost = invoke(&t, &run, call("pay", true)).await;
    let job = next_of(&mut r1, "job.assigned").await;
    let Running { id, agent: a, .. } = run;
    drop(a);
    // The agent grace runs out: the run is reset; the job may have happened.
    let reset = wait_for(&t, &id, "execution.reset", 1).await;
    let unknown = events_of(&t, &id, "step.outcome_unknown");
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].step_id.as_ref(), Some(&lost));
    assert!(unknown[0].sequence < reset.sequence);
    assert_eq!(
        next_of(&mut r1, "job.cancelled").await.data["step_id"],
        lost.as_str()
    );

    // The re-run on another consumer makes the same call: no job, an operator must answer.
    let mut c2 = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c2"))
        .await
        .expect("c2");
    let assigned = next_of(&mut c2, "execution.assigned").await;
    let session = crate::ids::SessionId::new(assigned.data["session_id"].as_str().expect("id"));
    let rerun = Running {
        id: id.clone(),
        session,
        agent: c2,
    };
    let other = invoke(&t, &rerun, call("pay", true)).await;
    assert_ne!(other, lost);
    let unknown = wait_for(&t, &id, "step.outcome_unknown", 2).await;
    assert_eq!(unknown.step_id.as_ref(), Some(&other));
    quiet(
        &mut r1,
        "the call of the re-run is not run while its outcome is unknown",
    )
    .await;
    // The answer "it happened" gives the agent that result; nothing ran again.
    t.kernel
        .reconcile_step(
            &id,
            &other,
            Reconciliation::Happened(json!({"charge": "ch_1"})),
            None,
        )
        .await
        .expect("answer");
    let Running { mut agent, .. } = rerun;
    let result = next_of(&mut agent, "tool.result").await;
    assert_eq!(
        (result.data["step_id"].as_str(), &result.data["result"]),
        (Some(other.as_str()), &json!({"charge": "ch_1"}))
    );
    assert_eq!(
        events_of(&t, &id, "step.dispatched").len(),
        2,
        "queued and claimed once"
    );
    assert!(
        job.data["idempotency_key"]
            .as_str()
            .is_some_and(|key| key.ends_with(lost.as_str()))
    );

    // A third run replays the answered outcome: the latest outcome at that position.
    drop(agent);
    wait_for(&t, &id, "execution.reset", 2).await;
    let mut c3 = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c3"))
        .await
        .expect("c3");
    let assigned = next_of(&mut c3, "execution.assigned").await;
    let session = crate::ids::SessionId::new(assigned.data["session_id"].as_str().expect("id"));
    let third = Running {
        id: id.clone(),
        session,
        agent: c3,
    };
    let replayed = invoke(&t, &third, call("pay", true)).await;
    let Running { mut agent, .. } = third;
    let result = next_of(&mut agent, "tool.result").await;
    assert_eq!(
        (result.data["step_id"].as_str(), &result.data["result"]),
        (Some(replayed.as_str()), &json!({"charge": "ch_1"}))
    );
    let created = events_of(&t, &id, "step.created");
    assert_eq!(payload(&created[2])["replay_of"], other.as_str());
    assert_eq!(events_of(&t, &id, "step.outcome_unknown").len(), 2);
    t.shutdown().await;
}
