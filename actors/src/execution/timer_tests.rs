//! Paused-time tests of the deadline and disconnect timers: step deadlines (kernel default and
//! a shorter rule `timeout_ms`), the execution deadline in every non-terminal state, and the
//! agent disconnect grace (expiry resets, a reconnect inside it re-binds). Virtual time only
//! moves when every task is idle, so each check is exact: nothing before the deadline, the
//! event at the deadline.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::test_support::{
    FixedPolicy, WAIT, allow_all, call, deadline_of, events_of, invoke, just_before, millis_after,
    next_of, payload, plus, running, start, succeed, types, wait_for,
};
use crate::execution::Intent;
use crate::ids::{AgentId, ConsumerId, SessionId};
use crate::policy::{Decision, PolicyDecision};
use crate::status::ExecutionStatus;
use crate::testing::sleep_until;

/// Most virtual milliseconds between a deadline and the event it causes.
const ON_TIME_MS: i64 = 20;

#[tokio::test(start_paused = true)]
async fn a_step_times_out_at_its_deadline_and_tells_the_agent_and_the_runner() {
    let t = start(allow_all(), |config| {
        config.execution.step_timeout = Duration::from_secs(30)
    })
    .await;
    let mut run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let remote = invoke(&t, &run, call("t", true)).await;
    assert_eq!(
        next_of(&mut runner, "job.assigned").await.data["step_id"],
        remote.as_str()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let local = invoke(&t, &run, call("l", false)).await;
    let deadline = deadline_of(&events_of(&t, &run.id, "step.created")[0]);

    sleep_until(&t.clock, just_before(deadline)).await;
    assert!(
        events_of(&t, &run.id, "step.timed_out").is_empty(),
        "not before its deadline"
    );
    let timed_out = wait_for(&t, &run.id, "step.timed_out", 1).await;
    assert_eq!(timed_out.step_id.as_ref(), Some(&remote));
    assert!(
        (0..=ON_TIME_MS).contains(&millis_after(timed_out.timestamp, deadline)),
        "fired on time"
    );

    let log = types(&t, &run.id);
    assert_eq!(
        log[log.len() - 3..],
        ["step.timed_out", "step.cancelled", "execution.failed"]
    );
    let cancelled = &events_of(&t, &run.id, "step.cancelled")[0];
    assert_eq!(cancelled.step_id.as_ref(), Some(&local));
    assert_eq!(payload(cancelled)["reason"], "sibling step timed out");
    assert_eq!(
        payload(&events_of(&t, &run.id, "execution.failed")[0])["error"],
        "step timed out"
    );
    let notice = next_of(&mut runner, "job.cancelled").await;
    assert_eq!(
        (
            notice.data["step_id"].as_str(),
            notice.data["reason"].as_str()
        ),
        (Some(remote.as_str()), Some("step timed out"))
    );
    let pushed = next_of(&mut run.agent, "execution.cancelled").await;
    assert_eq!(pushed.data["execution_id"], run.id.as_str());
    t.shutdown().await;
}

/// One step deadline check serves every step: armed for the first step, kept after it ends, it
/// fires at that step's deadline, finds the next step not due yet and is armed for it.
#[tokio::test(start_paused = true)]
async fn the_check_armed_for_an_ended_step_fires_early_and_the_next_step_times_out_on_time() {
    let t = start(allow_all(), |config| {
        config.execution.step_timeout = Duration::from_secs(30)
    })
    .await;
    let mut run = running(&t, "c1").await;
    let first = invoke(&t, &run, call("l", false)).await;
    let first_deadline = deadline_of(&events_of(&t, &run.id, "step.created")[0]);
    succeed(&t, &run.id, &run.session, first).await;
    next_of(&mut run.agent, "tool.result").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let second = invoke(&t, &run, call("l", false)).await;
    let deadline = deadline_of(&events_of(&t, &run.id, "step.created")[1]);
    assert!(deadline > plus(first_deadline, Duration::from_secs(5)));

    sleep_until(&t.clock, plus(first_deadline, Duration::from_secs(1))).await;
    sleep_until(&t.clock, just_before(deadline)).await;
    assert!(
        events_of(&t, &run.id, "step.timed_out").is_empty(),
        "the first step ended and the second is not due before its own deadline"
    );
    let timed_out = wait_for(&t, &run.id, "step.timed_out", 1).await;
    assert_eq!(timed_out.step_id.as_ref(), Some(&second));
    assert!(
        (0..=ON_TIME_MS).contains(&millis_after(timed_out.timestamp, deadline)),
        "fired on time"
    );
    assert_eq!(events_of(&t, &run.id, "step.timed_out").len(), 1);
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_rule_timeout_shorter_than_the_default_sets_the_step_deadline() {
    let decision = PolicyDecision {
        timeout_ms: Some(2000),
        ..PolicyDecision::plain(Decision::Allow, "quick", "ok")
    };
    let t = start(Arc::new(FixedPolicy(decision)), |_| {}).await;
    let run = running(&t, "c1").await;
    let step = invoke(&t, &run, call("quick", false)).await;
    let created = events_of(&t, &run.id, "step.created").remove(0);
    assert_eq!(payload(&created)["timeout_ms"], 2000);
    let deadline = deadline_of(&created);
    assert_eq!(
        millis_after(deadline, created.timestamp),
        2000,
        "the rule's 2 s, not the default 5 min"
    );

    sleep_until(&t.clock, just_before(deadline)).await;
    assert!(events_of(&t, &run.id, "step.timed_out").is_empty());
    let timed_out = wait_for(&t, &run.id, "step.timed_out", 1).await;
    assert_eq!(timed_out.step_id, Some(step));
    assert!((0..=ON_TIME_MS).contains(&millis_after(timed_out.timestamp, deadline)));
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Failed
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_execution_deadline_fails_pending_running_and_blocked_executions() {
    let t = start(allow_all(), |config| {
        config.execution.execution_timeout = Duration::from_secs(60)
    })
    .await;
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    let mut ids = Vec::new();
    for setup in ["running", "signal", "approval", "tool"] {
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(setup), None)
            .await
            .expect("create");
        let assigned = next_of(&mut agent, "execution.assigned").await;
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        let intent = match setup {
            "signal" => Some(Intent::Wait {
                signal_type: "go".into(),
            }),
            "approval" => Some(call("approve_x", false)),
            "tool" => Some(call("t", false)),
            _ => None,
        };
        if let Some(intent) = intent {
            t.kernel
                .submit_intent(&row.id, &session, intent)
                .await
                .expect("intent");
        }
        ids.push(row.id);
    }
    let pending = t
        .kernel
        .create_execution(AgentId::new("nobody"), json!(null), None)
        .await
        .expect("create");
    assert_eq!(pending.status, ExecutionStatus::Pending);
    ids.push(pending.id);
    let statuses: Vec<ExecutionStatus> = {
        let mut statuses = Vec::new();
        for id in &ids {
            statuses.push(t.kernel.execution(id).await.expect("row").status);
        }
        statuses
    };
    use ExecutionStatus::{Blocked, Pending, Running};
    assert_eq!(statuses, [Running, Blocked, Blocked, Blocked, Pending]);

    let first_deadline = ids
        .iter()
        .map(|id| plus(t.store.all_events(id)[0].timestamp, Duration::from_secs(60)))
        .min()
        .expect("some");
    sleep_until(&t.clock, just_before(first_deadline)).await;
    for id in &ids {
        assert!(
            events_of(&t, id, "execution.failed").is_empty(),
            "not before the deadline"
        );
    }
    for id in &ids {
        let failed = wait_for(&t, id, "execution.failed", 1).await;
        let deadline = plus(t.store.all_events(id)[0].timestamp, Duration::from_secs(60));
        assert!(
            (0..=ON_TIME_MS).contains(&millis_after(failed.timestamp, deadline)),
            "on time"
        );
        assert_eq!(
            payload(&failed)["error"],
            "execution exceeded maximum duration"
        );
        assert_eq!(
            t.kernel.execution(id).await.expect("row").status,
            ExecutionStatus::Failed
        );
        for step in events_of(&t, id, "step.cancelled") {
            assert_eq!(payload(&step)["reason"], "execution timed out");
        }
    }
    assert_eq!(
        events_of(&t, &ids[2], "step.cancelled").len(),
        1,
        "the approval step is cancelled"
    );
    assert_eq!(
        events_of(&t, &ids[3], "step.cancelled").len(),
        1,
        "the tool step is cancelled"
    );
    for _ in 0..4 {
        let pushed = next_of(&mut agent, "execution.cancelled").await;
        assert!(
            ids[..4]
                .iter()
                .any(|id| pushed.data["execution_id"] == id.as_str())
        );
    }
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_disconnect_grace_expires_into_a_reset_and_a_reassignment() {
    let t = start(allow_all(), |config| {
        config.agent_grace = Duration::from_secs(10)
    })
    .await;
    let run = running(&t, "c1").await;
    let _step = invoke(&t, &run, call("t", false)).await;
    let dropped_at = t.clock.now();
    drop(run.agent);

    let expiry = plus(dropped_at, Duration::from_secs(10));
    sleep_until(&t.clock, just_before(expiry)).await;
    assert!(
        events_of(&t, &run.id, "agent.timeout").is_empty(),
        "still inside the grace"
    );
    let lost = wait_for(&t, &run.id, "agent.timeout", 1).await;
    assert!(
        (0..=ON_TIME_MS).contains(&millis_after(lost.timestamp, expiry)),
        "grace ended on time"
    );
    let reset = wait_for(&t, &run.id, "execution.reset", 1).await;
    assert_eq!(
        (
            payload(&reset)["reason"].as_str(),
            payload(&reset)["from_status"].as_str()
        ),
        (Some("agent_disconnect"), Some("blocked"))
    );
    assert_eq!(
        payload(&events_of(&t, &run.id, "step.cancelled")[0])["reason"],
        "agent disconnected"
    );
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Pending
    );

    let mut other = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c2"))
        .await
        .expect("connect");
    let assigned = next_of(&mut other, "execution.assigned").await;
    assert_eq!(assigned.data["execution_id"], run.id.as_str());
    assert_eq!(assigned.data["history"][0]["status"], "cancelled");
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_inside_the_grace_rebinds_and_flushes_what_was_pushed_meanwhile() {
    let t = start(allow_all(), |config| {
        config.agent_grace = Duration::from_secs(10)
    })
    .await;
    let run = running(&t, "c1").await;
    let dropped_at = t.clock.now();
    drop(run.agent);
    sleep_until(&t.clock, plus(dropped_at, Duration::from_secs(9))).await;
    t.kernel
        .signal(&run.id, "hello".into(), json!({"n": 1}))
        .await
        .expect("signal");
    let mut again = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    let flushed = next_of(&mut again, "signal.received").await;
    assert_eq!(
        (
            flushed.data["execution_id"].as_str(),
            flushed.data["payload"]["n"].as_i64()
        ),
        (Some(run.id.as_str()), Some(1))
    );

    sleep_until(&t.clock, plus(dropped_at, Duration::from_secs(30))).await;
    assert!(
        events_of(&t, &run.id, "agent.timeout").is_empty(),
        "the old grace timer did nothing"
    );
    let reply = t
        .kernel
        .submit_intent(&run.id, &run.session, Intent::Complete { output: None })
        .await
        .expect("same session");
    assert!(reply.accepted);
    assert_eq!(
        events_of(&t, &run.id, "execution.started").len(),
        1,
        "never reassigned"
    );
    t.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_blocked_execution_keeps_its_session_past_the_grace_and_resumes_on_reconnect() {
    let t = start(allow_all(), |config| {
        config.agent_grace = Duration::from_secs(10)
    })
    .await;
    let run = running(&t, "c1").await;
    t.kernel
        .submit_intent(
            &run.id,
            &run.session,
            Intent::Wait {
                signal_type: "go".into(),
            },
        )
        .await
        .expect("wait");
    let dropped_at = t.clock.now();
    drop(run.agent);
    sleep_until(&t.clock, plus(dropped_at, Duration::from_secs(60))).await;
    wait_for(&t, &run.id, "agent.timeout", 1).await;
    assert!(
        events_of(&t, &run.id, "execution.reset").is_empty(),
        "a signal wait is not reset"
    );
    assert_eq!(
        t.kernel.execution(&run.id).await.expect("row").status,
        ExecutionStatus::Blocked
    );

    let mut again = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    t.kernel
        .signal(&run.id, "go".into(), json!(7))
        .await
        .expect("signal");
    let pushed = tokio::time::timeout(WAIT, next_of(&mut again, "signal.received"))
        .await
        .expect("push");
    assert_eq!(pushed.data["payload"], 7);
    let reply = t
        .kernel
        .submit_intent(&run.id, &run.session, Intent::Complete { output: None })
        .await
        .expect("same session");
    assert!(reply.accepted);
    t.shutdown().await;
}
