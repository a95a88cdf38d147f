//! Passivation, message by message on paused time: an execution that only waits loses its actor
//! after `passivate_after`, and every kind of message that concerns it afterwards — assignment,
//! signal, approval, cancel, a lost consumer, its deadline, a kernel restart — rebuilds it from
//! the store and behaves exactly as a resident one would.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::test_support::{
    FixedPolicy, allow_all, call, events_of, just_before, millis_after, next_of, payload, plus,
    running, start, succeed, types, wait_for,
};
use crate::execution::Intent;
use crate::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
use crate::kernel::KernelConfig;
use crate::policy::{Decision, PolicyDecision};
use crate::status::ExecutionStatus;
use crate::testing::{TestKernel, sleep_until};

const IDLE: Duration = Duration::from_secs(1);

fn passivating(config: &mut KernelConfig) {
    config.passivate_after = Some(IDLE);
    config.execution.execution_timeout = Duration::from_secs(600);
    config.agent_grace = Duration::from_secs(5);
}

fn resident(t: &TestKernel, id: &ExecutionId) -> bool {
    t.kernel.ctx.execution(id).is_some()
}

fn passivations(t: &TestKernel) -> u64 {
    t.kernel.metrics().passivations.get()
}

/// Waits (virtual time) until the execution's actor is gone.
async fn until_passivated(t: &TestKernel, id: &ExecutionId) {
    for _ in 0..100 {
        if !resident(t, id) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("execution {id} was not passivated");
}

/// A running execution of agent `a` blocked on signal `go`.
async fn blocked_on_signal(t: &TestKernel) -> super::test_support::Running {
    let run = running(t, "c1").await;
    let reply = t
        .kernel
        .submit_intent(
            &run.id,
            &run.session,
            Intent::Wait {
                signal_type: "go".into(),
            },
        )
        .await
        .expect("wait");
    assert!(reply.accepted);
    run
}

#[tokio::test(start_paused = true)]
async fn an_idle_pending_execution_is_passivated_and_an_assignment_rebuilds_it() {
    let t = start(allow_all(), passivating).await;
    let row = t
        .kernel
        .create_execution(AgentId::new("a"), json!({"n": 1}), None)
        .await
        .expect("create");
    assert!(resident(&t, &row.id), "resident right after creation");
    tokio::time::sleep(IDLE / 2).await;
    assert!(resident(&t, &row.id), "not before passivate_after");
    until_passivated(&t, &row.id).await;
    assert_eq!(passivations(&t), 1);

    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    let assigned = next_of(&mut agent, "execution.assigned").await;
    assert_eq!(assigned.data["execution_id"], row.id.as_str());
    assert_eq!(assigned.data["input"], json!({"n": 1}));
    assert_eq!(
        t.kernel.execution(&row.id).await.expect("row").status,
        ExecutionStatus::Running
    );
    assert!(resident(&t, &row.id), "a running execution keeps its actor");
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_signal_rebuilds_a_passivated_blocked_execution_and_reaches_its_agent() {
    let t = start(allow_all(), passivating).await;
    let mut run = blocked_on_signal(&t).await;
    until_passivated(&t, &run.id).await;
    t.kernel
        .signal(&run.id, "go".into(), json!({"by": "ana"}))
        .await
        .expect("signal");
    let pushed = next_of(&mut run.agent, "signal.received").await;
    assert_eq!(pushed.data["payload"], json!({"by": "ana"}));
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Running
    );
    // The agent carries on with the same session, as with a resident actor.
    let reply = t
        .kernel
        .submit_intent(
            &run.id,
            &run.session,
            Intent::Complete {
                output: Some(json!("done")),
            },
        )
        .await
        .expect("complete");
    assert!(reply.accepted);
    let log = types(&t, &run.id);
    assert_eq!(
        log[log.len() - 4..],
        [
            "signal.received",
            "execution.resumed",
            "intent.accepted",
            "execution.completed"
        ]
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_approval_rebuilds_a_passivated_execution_and_dispatches_the_step() {
    let gate = PolicyDecision::plain(Decision::RequireApproval, "deploy", "needs a human");
    let t = start(Arc::new(FixedPolicy(gate)), passivating).await;
    let mut run = running(&t, "c1").await;
    let reply = t
        .kernel
        .submit_intent(&run.id, &run.session, call("deploy", false))
        .await
        .expect("intent");
    assert!(reply.pending_approval);
    let step = reply.step_id.expect("step");
    until_passivated(&t, &run.id).await;
    t.kernel
        .signal(
            &run.id,
            "step.approve".into(),
            json!({"step_id": step.as_str(), "approved": true}),
        )
        .await
        .expect("approve");
    let resolved = next_of(&mut run.agent, "approval.resolved").await;
    assert_eq!(resolved.data["step_id"], step.as_str());
    assert_eq!(resolved.data["approved"], true);
    let resumed = events_of(&t, &run.id, "execution.resumed");
    assert_eq!(
        payload(resumed.last().expect("resumed"))["reason"],
        "approval granted"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_rebuilds_a_passivated_execution_and_tells_its_agent() {
    let t = start(allow_all(), passivating).await;
    let mut run = blocked_on_signal(&t).await;
    until_passivated(&t, &run.id).await;
    let row = t.kernel.cancel(&run.id).await.expect("cancel");
    assert_eq!(row.status, ExecutionStatus::Cancelled);
    let cancelled = next_of(&mut run.agent, "execution.cancelled").await;
    assert_eq!(cancelled.data["execution_id"], run.id.as_str());
    // A second cancel rebuilds the terminal execution, is refused, and leaves no actor behind.
    assert!(t.kernel.cancel(&run.id).await.is_err());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !resident(&t, &run.id),
        "a terminal execution stops after its message"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_passivated_execution_fails_at_its_deadline_on_time() {
    let t = start(allow_all(), |config| {
        passivating(config);
        config.execution.execution_timeout = Duration::from_secs(120);
    })
    .await;
    let row = t
        .kernel
        .create_execution(AgentId::new("nobody"), json!(null), None)
        .await
        .expect("create");
    until_passivated(&t, &row.id).await;
    assert_eq!(t.kernel.metrics().executions_dormant.get(), 1);
    let deadline = plus(row.created_at, Duration::from_secs(120));
    sleep_until(&t.clock, just_before(deadline)).await;
    assert!(events_of(&t, &row.id, "execution.failed").is_empty());
    let failed = wait_for(&t, &row.id, "execution.failed", 1).await;
    assert!((0..=20).contains(&millis_after(failed.timestamp, deadline)));
    assert_eq!(
        payload(&failed)["error"],
        "execution exceeded maximum duration"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!resident(&t, &row.id));
    assert_eq!(t.kernel.metrics().executions_dormant.get(), 0);
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_consumer_reaches_a_passivated_blocked_execution() {
    let t = start(allow_all(), passivating).await;
    let run = blocked_on_signal(&t).await;
    until_passivated(&t, &run.id).await;
    drop(run.agent);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let timeout = wait_for(&t, &run.id, "agent.timeout", 1).await;
    assert_eq!(timeout.body.type_name(), "agent.timeout");
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Blocked,
        "a blocked execution keeps waiting for its signal"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_waiting_executions_stay_in_the_store_until_something_concerns_them() {
    let t = start(allow_all(), passivating).await;
    let run = blocked_on_signal(&t).await;
    let (blocked, session) = (run.id.clone(), run.session.clone());
    let pending = t
        .kernel
        .create_execution(AgentId::new("b"), json!("later"), None)
        .await
        .expect("create");
    drop(run.agent);

    let t = t.restart(allow_all(), passivating).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !resident(&t, &blocked),
        "startup rebuilds no waiting execution"
    );
    assert!(!resident(&t, &pending.id));
    assert_eq!(t.kernel.metrics().executions_dormant.get(), 2);

    // The blocked one: its agent reconnects and the signal resumes it on the same session.
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    t.kernel
        .signal(&blocked, "go".into(), json!(1))
        .await
        .expect("signal");
    assert_eq!(
        next_of(&mut agent, "signal.received").await.data["execution_id"],
        blocked.as_str()
    );
    let reply = t
        .kernel
        .submit_intent(
            &blocked,
            &SessionId::new(session.as_str()),
            Intent::Complete {
                output: Some(json!(2)),
            },
        )
        .await
        .expect("complete");
    assert!(reply.accepted);

    // The pending one: found by its agent group when a consumer connects.
    let mut other = t
        .kernel
        .connect_agent(AgentId::new("b"), ConsumerId::new("b1"))
        .await
        .expect("connect");
    let assigned = next_of(&mut other, "execution.assigned").await;
    assert_eq!(assigned.data["execution_id"], pending.id.as_str());
    assert_eq!(assigned.data["input"], json!("later"));
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_execution_with_work_in_flight_is_never_passivated() {
    let t = start(allow_all(), passivating).await;
    let run = running(&t, "c1").await;
    let reply = t
        .kernel
        .submit_intent(&run.id, &run.session, call("l", false))
        .await
        .expect("intent");
    assert!(reply.accepted);
    tokio::time::sleep(IDLE * 5).await;
    assert!(resident(&t, &run.id), "a step in flight keeps the actor");
    assert_eq!(passivations(&t), 0);
    t.shutdown().await;
}

/// Tasks alive on the test runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn finished_executions_leave_no_timer_behind() {
    // A sleeping timer holds its actor: one left per execution (the deadline, a five-minute
    // stall check per intent) kept every finished execution's actor in memory for that long.
    let t = start(allow_all(), |config| {
        passivating(config);
        config.execution.stall_after = Duration::from_secs(300);
        config.execution.execution_timeout = Duration::from_secs(3600);
    })
    .await;
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let baseline = alive_tasks();
    for _ in 0..20 {
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let assigned = next_of(&mut agent, "execution.assigned").await;
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        for _ in 0..3 {
            let reply = t
                .kernel
                .submit_intent(&row.id, &session, call("l", false))
                .await
                .expect("intent");
            let step = reply.step_id.expect("step");
            succeed(&t, &row.id, &session, step).await;
        }
        let done = t
            .kernel
            .submit_intent(&row.id, &session, Intent::Complete { output: None })
            .await
            .expect("complete");
        assert!(done.accepted);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = alive_tasks();
    assert!(
        after <= baseline + 2,
        "tasks alive: {baseline} before, {after} after 20 finished executions"
    );
    t.shutdown().await;
}
