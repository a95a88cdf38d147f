//! Table tests of the execution state machine (every transition and the refused ones), and
//! message-level tests of the actors on the in-memory store.

use serde_json::{Value, json};

use super::commands::{Effect, ExecutionSettings, Intent, StepOutcome};
use super::machine::{self, Transition};
use super::rejection::Rejection;
use super::state::ExecutionState;
use crate::events::{EventBody, seal};
use crate::ids::{ExecutionId, StepId};
use crate::policy::{Decision, PolicyDecision};
use crate::status::{ExecutionStatus, StepStatus};
use crate::time;

fn fold(state: &ExecutionState, transition: &Transition) -> ExecutionState {
    let mut next = state.clone();
    for event in seal(
        &state.id,
        state.last_sequence,
        time::now(),
        None,
        transition.events.clone(),
    ) {
        next.apply(&event);
    }
    next
}

fn types(transition: &Transition) -> Vec<&'static str> {
    transition
        .events
        .iter()
        .map(|event| event.body.type_name())
        .collect()
}

fn created() -> ExecutionState {
    created_with_labels(Value::Null)
}

fn created_with_labels(labels: Value) -> ExecutionState {
    let events = seal(
        &ExecutionId::new("e1"),
        0,
        time::now(),
        None,
        vec![machine::create(
            &"agent".into(),
            json!({"q": 1}),
            labels,
            Default::default(),
            None,
        )],
    );
    ExecutionState::from_events(&events).expect("created folds")
}

fn running() -> ExecutionState {
    let state = created();
    let (transition, push) = machine::assign(&state, &"c1".into()).expect("pending assigns");
    assert_eq!(push.event, "execution.assigned");
    fold(&state, &transition)
}

fn allow() -> PolicyDecision {
    PolicyDecision::plain(Decision::Allow, "r", "ok")
}

fn invoke(tool: &str, remote: bool, key: Option<&str>) -> Intent {
    Intent::InvokeTool {
        tool_id: tool.into(),
        arguments: json!({"a": 1}),
        idempotency_key: key.map(str::to_owned),
        remote,
    }
}

fn decide(
    state: &ExecutionState,
    intent: &Intent,
    verdict: &PolicyDecision,
) -> (ExecutionState, Transition, super::IntentReply) {
    let settings = ExecutionSettings::default();
    let (transition, reply) = machine::intent(state, intent, Some(verdict), time::now(), &settings)
        .expect("intent accepted");
    (fold(state, &transition), transition, reply)
}

fn outcome(step: &StepId, success: bool, retryable: bool) -> StepOutcome {
    StepOutcome {
        step_id: step.clone(),
        success,
        data: Some(json!(42)),
        error: Some("boom".into()),
        retryable,
        cost: None,
    }
}

#[test]
fn pending_is_assigned_once_and_the_session_is_checked() {
    let state = running();
    assert_eq!(state.status, ExecutionStatus::Running);
    assert!(matches!(
        machine::assign(&state, &"c2".into()),
        Err(Rejection::NotPending(_))
    ));
    let session = state.session.clone().expect("session").id;
    assert!(machine::check_session(&state, &session, None).is_ok());
    assert!(matches!(
        machine::check_session(&state, &"nope".into(), None),
        Err(Rejection::SessionNotFound(_))
    ));
    let other = ExecutionId::new("e2");
    assert!(matches!(
        machine::check_session(&state, &"nope".into(), Some(&other)),
        Err(Rejection::SessionMismatch { .. })
    ));
}

#[test]
fn tool_steps_block_and_the_last_result_resumes() {
    let state = running();
    let (state, transition, reply) = decide(&state, &invoke("t", false, None), &allow());
    assert_eq!(
        types(&transition),
        ["intent.accepted", "step.created", "execution.blocked"]
    );
    assert_eq!(state.status, ExecutionStatus::Blocked);
    let first = reply.step_id.expect("step id");
    let (state, transition, reply) = decide(&state, &invoke("t", false, None), &allow());
    assert_eq!(
        types(&transition),
        ["intent.accepted", "step.created"],
        "one tool blocker for all steps"
    );
    let second = reply.step_id.expect("step id");
    let done = machine::agent_step_result(&state, &outcome(&first, true, false)).expect("result");
    assert_eq!(types(&done), ["step.completed"]);
    let state = fold(&state, &done);
    assert_eq!(state.status, ExecutionStatus::Blocked);
    let done = machine::agent_step_result(&state, &outcome(&second, false, false)).expect("result");
    assert_eq!(types(&done), ["step.failed", "execution.resumed"]);
    assert!(
        matches!(&done.effects[0], Effect::PushToAgent(push) if push.data["status"] == "failed")
    );
    let state = fold(&state, &done);
    assert_eq!(state.status, ExecutionStatus::Running);
    assert_eq!(
        state.step(&second).map(|step| step.status),
        Some(StepStatus::Failed)
    );
    assert_eq!(
        machine::agent_step_result(&state, &outcome(&second, false, false)),
        Ok(Transition::default())
    );
    assert_eq!(
        machine::agent_step_result(&state, &outcome(&second, true, false)),
        Err(Rejection::StepResolved)
    );
    let unknown = StepId::new("missing");
    assert!(matches!(
        machine::agent_step_result(&state, &outcome(&unknown, true, false)),
        Err(Rejection::StepNotFound(_))
    ));
}

#[test]
fn complete_and_fail_need_no_active_steps_and_end_the_execution() {
    let state = running();
    let (busy, _, _) = decide(&state, &invoke("t", false, None), &allow());
    let settings = ExecutionSettings::default();
    let complete = Intent::Complete {
        output: Some(json!("done")),
    };
    assert_eq!(
        machine::intent(&busy, &complete, None, time::now(), &settings).map(|_| ()),
        Err(Rejection::ActiveSteps("complete"))
    );
    let (done, transition, _) = decide(&state, &complete, &allow());
    assert_eq!(
        types(&transition),
        ["intent.accepted", "execution.completed"]
    );
    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(done.output, Some(json!("done")));
    assert!(matches!(
        machine::precheck_intent(&done, &complete),
        Err(Rejection::Terminal { .. })
    ));
    let (failed, transition, _) = decide(&state, &Intent::Fail { error: None }, &allow());
    assert_eq!(failed.status, ExecutionStatus::Failed);
    assert_eq!(
        transition.events[1].body,
        EventBody::ExecutionFailed {
            error: "agent failed without a message".into()
        }
    );
}

#[test]
fn fail_text_is_cut_at_a_character_boundary() {
    let long = "é".repeat(3000);
    let text = machine::fail_text(Some(&long));
    assert!(text.len() <= machine::MAX_FAIL_ERROR_BYTES);
    assert!(text.chars().all(|c| c == 'é'));
}

#[test]
fn waits_block_until_the_signal_and_pending_signals_satisfy_at_once() {
    let state = running();
    let settings = ExecutionSettings::default();
    let wait = Intent::Wait {
        signal_type: "go".into(),
    };
    let (blocked, transition, _) = decide(&state, &wait, &allow());
    assert_eq!(types(&transition), ["intent.accepted", "execution.blocked"]);
    assert_eq!(blocked.status, ExecutionStatus::Blocked);
    assert_eq!(
        machine::precheck_intent(&blocked, &wait),
        Ok(Some(super::IntentReply::accepted())),
        "same wait is a no-op"
    );
    assert!(matches!(
        machine::precheck_intent(&blocked, &invoke("t", false, None)),
        Err(Rejection::Blocked(_))
    ));
    let other = machine::signal(&blocked, "other", &json!(1), time::now(), &settings, false)
        .expect("signal");
    assert_eq!(types(&other), ["signal.received"]);
    let signalled = machine::signal(
        &blocked,
        "go",
        &json!({"x": 1}),
        time::now(),
        &settings,
        false,
    )
    .expect("signal");
    assert_eq!(types(&signalled), ["signal.received", "execution.resumed"]);
    assert!(
        matches!(&signalled.effects[0], Effect::PushToAgent(push) if push.data["execution_id"] == "e1")
    );
    assert_eq!(fold(&blocked, &signalled).status, ExecutionStatus::Running);

    let complete = Intent::Complete { output: None };
    assert_eq!(
        machine::precheck_intent(&blocked, &complete),
        Ok(None),
        "complete may abandon a signal wait"
    );
    let (_, abandoned, _) = decide(&blocked, &complete, &allow());
    assert_eq!(
        types(&abandoned),
        [
            "intent.accepted",
            "execution.resumed",
            "execution.completed"
        ]
    );

    let lost =
        machine::signal(&blocked, "go", &json!(9), time::now(), &settings, true).expect("signal");
    assert_eq!(
        types(&lost),
        ["signal.received", "execution.reset"],
        "a lost handler's wait is re-run"
    );
    let rerun = fold(&blocked, &lost);
    assert_eq!(rerun.status, ExecutionStatus::Pending);
    assert_eq!(
        rerun.pending_signals.len(),
        1,
        "the signal waits for the new run"
    );

    let early = fold(
        &state,
        &machine::signal(&state, "go", &json!(7), time::now(), &settings, false).expect("signal"),
    );
    let (resumed, transition, _) = decide(&early, &wait, &allow());
    assert_eq!(types(&transition), ["intent.accepted", "execution.resumed"]);
    assert!(
        matches!(&transition.effects[0], Effect::PushToAgent(push) if push.data["payload"] == 7)
    );
    assert!(resumed.pending_signals.is_empty());
    assert_eq!(resumed.status, ExecutionStatus::Running);
}

#[test]
fn denials_are_recorded_and_idempotency_keys_replay_the_first_answer() {
    let state = running();
    let deny = PolicyDecision::plain(Decision::Deny, "no-shell", "shell is off");
    let (denied, transition, reply) = decide(&state, &invoke("shell", false, Some("k1")), &deny);
    assert_eq!(types(&transition), ["intent.denied"]);
    assert_eq!(
        reply.error.as_deref(),
        Some("policy denied: shell is off (rule: no-shell)")
    );
    let repeat =
        machine::precheck_intent(&denied, &invoke("shell", false, Some("k1"))).expect("repeat");
    assert_eq!(
        repeat.and_then(|reply| reply.error),
        Some("policy denied: shell is off (rule: no-shell)".into())
    );
    let (allowed, _, reply) = decide(&state, &invoke("t", true, Some("k2")), &allow());
    let repeat = machine::precheck_intent(&allowed, &invoke("t", true, Some("k2")))
        .expect("repeat")
        .expect("replayed");
    assert_eq!(repeat.step_id, reply.step_id);
    assert!(matches!(
        machine::precheck_intent(&allowed, &invoke("x", true, Some("k2"))),
        Err(Rejection::IdempotencyConflict(_))
    ));
}

#[test]
fn approvals_block_then_grant_dispatches_or_deny_fails_the_step() {
    let state = running();
    let settings = ExecutionSettings::default();
    let gate = PolicyDecision::plain(Decision::RequireApproval, "deploy", "needs a human");
    let (waiting, transition, reply) = decide(&state, &invoke("deploy", true, None), &gate);
    assert_eq!(
        types(&transition),
        [
            "step.created",
            "step.approval_required",
            "execution.blocked",
            "approval.requested"
        ]
    );
    assert!(reply.pending_approval);
    let step = reply.step_id.expect("step");
    let wrong = machine::signal(
        &waiting,
        "step.approve",
        &json!({"step_id": "x", "approved": true}),
        time::now(),
        &settings,
        false,
    );
    assert!(matches!(wrong, Err(Rejection::Validation(_))));
    let not_object = machine::signal(
        &waiting,
        "step.approve",
        &json!("yes"),
        time::now(),
        &settings,
        false,
    );
    assert!(matches!(not_object, Err(Rejection::Validation(_))));
    let grant = json!({"step_id": step.as_str(), "approved": true});
    let granted = machine::signal(
        &waiting,
        "step.approve",
        &grant,
        time::now(),
        &settings,
        false,
    )
    .expect("grant");
    assert_eq!(
        types(&granted),
        [
            "signal.received",
            "step.dispatched",
            "execution.resumed",
            "execution.blocked",
            "approval.resolved"
        ]
    );
    assert!(
        granted
            .effects
            .iter()
            .any(|effect| matches!(effect, Effect::EnqueueJob(_)))
    );
    assert_eq!(
        fold(&waiting, &granted).step(&step).map(|step| step.status),
        Some(StepStatus::Dispatched)
    );
    let deny = json!({"step_id": step.as_str(), "approved": false});
    let denied = machine::signal(
        &waiting,
        "step.approve",
        &deny,
        time::now(),
        &settings,
        false,
    )
    .expect("deny");
    assert_eq!(
        types(&denied),
        [
            "signal.received",
            "step.failed",
            "execution.resumed",
            "approval.resolved"
        ]
    );
    assert_eq!(fold(&waiting, &denied).status, ExecutionStatus::Running);
}

#[test]
fn cancel_ends_steps_and_refuses_a_second_time() {
    let state = running();
    let (busy, _, _) = decide(&state, &invoke("t", true, None), &allow());
    let cancel = machine::cancel(&busy).expect("cancel");
    assert_eq!(types(&cancel), ["step.cancelled", "execution.cancelled"]);
    assert!(cancel.effects.iter().any(|effect| matches!(
        effect,
        Effect::StepEnded {
            cancel_reason: Some(_),
            ..
        }
    )));
    assert!(cancel.effects.iter().any(
        |effect| matches!(effect, Effect::PushToAgent(push) if push.event == "execution.cancelled")
    ));
    let cancelled = fold(&busy, &cancel);
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert!(matches!(
        machine::cancel(&cancelled),
        Err(Rejection::Terminal { .. })
    ));
    assert!(matches!(
        machine::cancel(&created()).map(|t| fold(&created(), &t).status),
        Ok(ExecutionStatus::Cancelled)
    ));
}

#[test]
fn a_step_deadline_fails_the_execution_but_not_while_a_signal_blocks() {
    let state = running();
    let (busy, _, reply) = decide(&state, &invoke("t", false, None), &allow());
    let step = reply.step_id.expect("step");
    let later = time::now() + chrono::Duration::hours(1);
    assert!(
        machine::step_deadline(&busy, &step, time::now()).is_none(),
        "not due yet"
    );
    let timeout = machine::step_deadline(&busy, &step, later).expect("due");
    assert_eq!(types(&timeout), ["step.timed_out", "execution.failed"]);
    let (waiting, _, _) = decide(
        &busy,
        &Intent::Wait {
            signal_type: "s".into(),
        },
        &allow(),
    );
    assert!(machine::step_deadline(&waiting, &step, later).is_none());
    let expired =
        machine::execution_deadline(&waiting, time::now(), later).expect("execution timeout");
    assert_eq!(types(&expired), ["step.cancelled", "execution.failed"]);
}

#[test]
fn a_lost_consumer_resets_running_work_but_blocked_work_keeps_its_session() {
    let state = running();
    let (busy, _, _) = decide(&state, &invoke("t", false, None), &allow());
    let lost = machine::consumer_lost(&busy, &"c1".into(), "agent_disconnect").expect("reset");
    assert_eq!(
        types(&lost),
        ["agent.timeout", "step.cancelled", "execution.reset"]
    );
    let reset = fold(&busy, &lost);
    assert_eq!(reset.status, ExecutionStatus::Pending);
    assert!(reset.session.is_none());
    assert!(machine::consumer_lost(&busy, &"someone-else".into(), "agent_disconnect").is_none());
    let (waiting, _, _) = decide(
        &state,
        &Intent::Wait {
            signal_type: "s".into(),
        },
        &allow(),
    );
    let lost =
        machine::consumer_lost(&waiting, &"c1".into(), "agent_disconnect").expect("timeout only");
    assert_eq!(types(&lost), ["agent.timeout"]);
    let still = fold(&waiting, &lost);
    assert_eq!(still.status, ExecutionStatus::Blocked);
    assert!(
        machine::consumer_lost(&still, &"c1".into(), "agent_disconnect").is_none(),
        "recorded once"
    );
    let (transition, push) = machine::assign(&reset, &"c2".into()).expect("reassigned");
    assert_eq!(push.data["history"][0]["status"], "cancelled");
    assert_eq!(
        fold(&reset, &transition)
            .session
            .map(|session| session.consumer_id),
        Some("c2".into())
    );
}

#[test]
fn retryable_runner_failures_retry_until_attempts_run_out() {
    let state = running();
    let settings = ExecutionSettings::default();
    let (busy, _, reply) = decide(&state, &invoke("t", true, None), &allow());
    let step = reply.step_id.expect("step");
    let mut current = busy;
    for attempt in 2..=3 {
        let retry = machine::runner_result(
            &current,
            &outcome(&step, false, true),
            time::now(),
            &settings,
            1.0,
        )
        .expect("retry");
        assert_eq!(types(&retry), ["step.failed", "step.retried"]);
        assert!(
            retry
                .effects
                .iter()
                .any(|effect| matches!(effect, Effect::EnqueueJob(job) if job.attempt == attempt))
        );
        current = fold(&current, &retry);
        assert_eq!(
            current.step(&step).map(|step| (step.status, step.attempt)),
            Some((StepStatus::Pending, attempt))
        );
    }
    let last = machine::runner_result(
        &current,
        &outcome(&step, false, true),
        time::now(),
        &settings,
        1.0,
    )
    .expect("final");
    assert_eq!(types(&last), ["step.failed", "execution.resumed"]);
    assert_eq!(
        machine::retry_delay(2, settings.retry_base_delay, settings.retry_max_delay),
        settings.retry_base_delay
    );
    assert_eq!(
        machine::retry_delay(30, settings.retry_base_delay, settings.retry_max_delay),
        settings.retry_max_delay
    );
}

#[test]
fn stale_jobs_are_not_claimed() {
    let state = running();
    let settings = ExecutionSettings::default();
    let (busy, transition, _) = decide(&state, &invoke("t", true, None), &allow());
    let Some(Effect::EnqueueJob(job)) = transition.effects.first().cloned() else {
        panic!("job expected")
    };
    assert!(machine::claim_job(&busy, &job, &"r1".into(), time::now(), &settings).is_some());
    let cancelled = fold(&busy, &machine::cancel(&busy).expect("cancel"));
    assert!(machine::claim_job(&cancelled, &job, &"r1".into(), time::now(), &settings).is_none());
    let mut older = job.clone();
    older.attempt = 0;
    assert!(machine::claim_job(&busy, &older, &"r1".into(), time::now(), &settings).is_none());
}

mod actors {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use crate::execution::{ExecutionMsg, Intent};
    use crate::ids::{AgentId, ConsumerId, SessionId};
    use crate::kernel::{KernelError, PushStream};
    use crate::push::Push;
    use crate::status::ExecutionStatus;
    use crate::testing::{MemoryStore, TestKernel, eventually};

    async fn next(stream: &mut PushStream) -> Push {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(push)) => push,
            other => panic!("no push: {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_execution_runs_end_to_end_through_the_actors() {
        let t = TestKernel::start().await;
        let mut agent = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!({"x": 1}), None)
            .await
            .expect("create");
        assert_eq!(
            row.status,
            ExecutionStatus::Running,
            "assigned synchronously to the connected agent"
        );
        let assigned = next(&mut agent).await;
        assert_eq!(assigned.event, "execution.assigned");
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        let complete = Intent::Complete {
            output: Some(json!("ok")),
        };
        let reply = t
            .kernel
            .submit_intent(&row.id, &session, complete)
            .await
            .expect("complete");
        assert!(reply.accepted);
        let types: Vec<String> = t
            .store
            .all_events(&row.id)
            .iter()
            .map(|e| e.body.type_name().to_owned())
            .collect();
        assert_eq!(
            types,
            [
                "execution.created",
                "execution.started",
                "intent.accepted",
                "execution.completed"
            ]
        );
        t.shutdown().await;
    }

    #[tokio::test]
    async fn a_crashed_execution_actor_is_rebuilt_from_the_store_and_answers_again() {
        let t = TestKernel::start().await;
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let actor = t.kernel.ctx.execution(&row.id).expect("live");
        actor.send_message(ExecutionMsg::Crash).expect("sent");
        let rebuilt = eventually(Duration::from_secs(5), || {
            let ctx = t.kernel.ctx.clone();
            let old = actor.get_id();
            let id = row.id.clone();
            async move { ctx.execution(&id).filter(|new| new.get_id() != old) }
        })
        .await;
        assert!(rebuilt.is_some(), "supervisor rebuilt the actor");
        let cancelled = t.kernel.cancel(&row.id).await.expect("answers again");
        assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
        assert!(
            t.kernel.encode_metrics().contains(
                "keel_supervision_events_total{kind=\"execution\",event=\"restarted\"} 1"
            )
        );
        t.shutdown().await;
    }

    #[tokio::test]
    async fn a_store_outage_refuses_writes_and_changes_nothing() {
        let store = Arc::new(MemoryStore::default());
        let t = TestKernel::start_with(
            store.clone(),
            Arc::new(crate::policy::PermissiveEngine),
            |_| {},
        )
        .await;
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        store.fail_commits(true);
        let error = t.kernel.cancel(&row.id).await.expect_err("store down");
        assert!(matches!(error, KernelError::Store(_)));
        assert_eq!(store.all_events(&row.id).len(), 1);
        store.fail_commits(false);
        let cancelled = t.kernel.cancel(&row.id).await.expect("recovered");
        assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
        t.shutdown().await;
    }

    #[tokio::test]
    async fn a_lost_consumer_is_replaced_without_double_assignment() {
        let t = TestKernel::start().await;
        let mut first = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let assigned = next(&mut first).await;
        let old_session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        drop(first);
        let mut second = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c2"))
            .await
            .expect("connect");
        let reassigned = next(&mut second).await;
        assert_eq!(reassigned.event, "execution.assigned");
        let late = t
            .kernel
            .submit_intent(&row.id, &old_session, Intent::Complete { output: None })
            .await;
        assert!(matches!(
            late,
            Err(KernelError::Rejected(
                crate::execution::Rejection::SessionNotFound(_)
            ))
        ));
        let started = t
            .store
            .all_events(&row.id)
            .iter()
            .filter(|e| e.body.type_name() == "execution.started")
            .count();
        assert_eq!(started, 2);
        let types: Vec<String> = t
            .store
            .all_events(&row.id)
            .iter()
            .map(|e| e.body.type_name().to_owned())
            .collect();
        assert_eq!(
            types,
            [
                "execution.created",
                "execution.started",
                "agent.timeout",
                "execution.reset",
                "execution.started"
            ]
        );
        t.shutdown().await;
    }

    #[tokio::test]
    async fn a_reconnect_within_the_grace_keeps_the_session_and_flushes_pushes() {
        let t = TestKernel::start_with(
            Arc::new(MemoryStore::default()),
            Arc::new(crate::policy::PermissiveEngine),
            |config| {
                config.agent_grace = Duration::from_secs(5);
            },
        )
        .await;
        let mut first = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let assigned = next(&mut first).await;
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        drop(first);
        t.kernel
            .signal(&row.id, "hello".into(), json!(1))
            .await
            .expect("signal");
        let mut again = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("reconnect");
        let flushed = next(&mut again).await;
        assert_eq!(flushed.event, "signal.received");
        assert_eq!(flushed.data["execution_id"], row.id.as_str());
        let reply = t
            .kernel
            .submit_intent(&row.id, &session, Intent::Complete { output: None })
            .await
            .expect("same session");
        assert!(reply.accepted);
        t.shutdown().await;
    }

    async fn running_execution(t: &TestKernel) -> (crate::ids::ExecutionId, SessionId, PushStream) {
        let mut agent = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let assigned = next(&mut agent).await;
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        (row.id, session, agent)
    }

    fn remote_call(key: &str) -> Intent {
        Intent::InvokeTool {
            tool_id: "t".into(),
            arguments: json!({}),
            idempotency_key: Some(key.into()),
            remote: true,
        }
    }

    #[tokio::test]
    async fn a_job_of_a_runner_that_does_not_come_back_goes_to_another_runner() {
        let t = TestKernel::start_with(
            Arc::new(MemoryStore::default()),
            Arc::new(crate::policy::PermissiveEngine),
            |config| {
                config.runner_grace = Duration::from_millis(200);
            },
        )
        .await;
        let (id, session, _agent) = running_execution(&t).await;
        let mut first = t
            .kernel
            .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
            .await
            .expect("runner");
        let reply = t
            .kernel
            .submit_intent(&id, &session, remote_call("k"))
            .await
            .expect("invoke");
        let job = next(&mut first).await;
        assert_eq!(
            (job.event, job.data["attempt"].as_i64()),
            ("job.assigned", Some(1))
        );
        drop(first);
        let mut second = t
            .kernel
            .connect_runner("r2".into(), ConsumerId::new("r2-a"), vec!["t".into()])
            .await
            .expect("runner");
        let retried = next(&mut second).await;
        assert_eq!(
            retried.data["step_id"],
            reply
                .step_id
                .as_ref()
                .map(|s| s.as_str())
                .unwrap_or_default()
        );
        assert_eq!(retried.data["attempt"], 2);
        assert_ne!(retried.data["id"], job.data["id"], "a fresh job id");
        t.shutdown().await;
    }

    #[tokio::test]
    async fn cancelling_tells_the_agent_and_the_runner_holding_a_job() {
        let t = TestKernel::start().await;
        let (id, session, mut agent) = running_execution(&t).await;
        let mut runner = t
            .kernel
            .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
            .await
            .expect("runner");
        t.kernel
            .submit_intent(&id, &session, remote_call("k"))
            .await
            .expect("invoke");
        assert_eq!(next(&mut runner).await.event, "job.assigned");
        t.kernel.cancel(&id).await.expect("cancel");
        assert_eq!(next(&mut runner).await.event, "job.cancelled");
        let notice = next(&mut agent).await;
        assert_eq!(
            (notice.event, notice.data["execution_id"].as_str()),
            ("execution.cancelled", Some(id.as_str()))
        );
        t.shutdown().await;
    }

    #[tokio::test]
    async fn a_commit_whose_answer_was_lost_is_reloaded_before_the_next_message() {
        let store = Arc::new(MemoryStore::default());
        let t = TestKernel::start_with(
            store.clone(),
            Arc::new(crate::policy::PermissiveEngine),
            |_| {},
        )
        .await;
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        store.lose_commit_answers(true);
        let lost = t.kernel.signal(&row.id, "s".into(), json!(1)).await;
        assert!(matches!(lost, Err(KernelError::Store(_))));
        store.lose_commit_answers(false);
        let cancelled = t.kernel.cancel(&row.id).await.expect("cancel after reload");
        assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
        let sequences: Vec<i64> = store
            .all_events(&row.id)
            .iter()
            .map(|event| event.sequence)
            .collect();
        assert_eq!(
            sequences,
            [1, 2, 3],
            "the landed signal is kept and sequences stay contiguous"
        );
        t.shutdown().await;
    }

    #[tokio::test]
    async fn a_signal_for_a_wait_whose_handler_died_reaches_the_re_run() {
        let t = TestKernel::start().await;
        let mut first = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let assigned = next(&mut first).await;
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        let wait = Intent::Wait {
            signal_type: "approve".into(),
        };
        t.kernel
            .submit_intent(&row.id, &session, wait.clone())
            .await
            .expect("wait");
        let mut second = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c2"))
            .await
            .expect("connect");
        drop(first);
        let lost = eventually(Duration::from_secs(5), || {
            let ctx = t.kernel.ctx.clone();
            async move {
                ctx.consumer_lost(&AgentId::new("a"), &"c1".into())
                    .then_some(())
            }
        })
        .await;
        assert!(lost.is_some(), "grace ran out");
        assert_eq!(
            t.kernel.execution(&row.id).await.expect("row").status,
            ExecutionStatus::Blocked
        );
        t.kernel
            .signal(&row.id, "approve".into(), json!({"ok": true}))
            .await
            .expect("signal");
        let reassigned = next(&mut second).await;
        assert_eq!(reassigned.event, "execution.assigned");
        let new_session = SessionId::new(reassigned.data["session_id"].as_str().expect("session"));
        t.kernel
            .submit_intent(&row.id, &new_session, wait)
            .await
            .expect("wait again");
        let pushed = next(&mut second).await;
        assert_eq!(
            (pushed.event, pushed.data["payload"].clone()),
            ("signal.received", json!({"ok": true}))
        );
        assert_eq!(
            t.kernel.execution(&row.id).await.expect("row").status,
            ExecutionStatus::Running
        );
        t.shutdown().await;
    }
}

/// Only results of tools with a breaker reach the policy actor: a policy without breakers
/// costs no round trip per step result.
#[test]
fn step_results_are_reported_only_for_tools_with_a_breaker() {
    use crate::guardrails::breaker::{BreakerConfig, BreakerSet};
    use crate::policy::rules::Glob;
    use std::time::Duration;

    let state = running();
    let (state, _, pay) = decide(&state, &invoke("pay.card", false, None), &allow());
    let (state, _, search) = decide(&state, &invoke("search", false, None), &allow());
    let pay = pay.step_id.expect("step id");
    let search = search.step_id.expect("step id");
    let mut events = Vec::new();
    let mut state = state;
    for step in [&pay, &search] {
        let transition =
            machine::agent_step_result(&state, &outcome(step, true, false)).expect("recorded");
        let sealed = seal(
            &state.id,
            state.last_sequence,
            time::now(),
            None,
            transition.events,
        );
        for event in &sealed {
            state.apply(event);
        }
        events.extend(sealed);
    }
    let none = BreakerSet::default();
    assert!(super::breakers::tool_results(&state, &events, &none).is_empty());
    let pay_only = BreakerSet(vec![BreakerConfig {
        tools: vec![Glob::new("pay.*").expect("glob")],
        scope: crate::guardrails::breaker::BreakerScope::Tool,
        failures: 3,
        failure_rate: None,
        window: Duration::from_secs(60),
        window_text: "1m".into(),
        cool_down: Duration::from_secs(30),
        cool_down_text: "30s".into(),
    }]);
    let reported = super::breakers::tool_results(&state, &events, &pay_only);
    assert_eq!(reported.len(), 1);
    assert_eq!(reported[0].tool_id, "pay.card");
    assert!(reported[0].success);
}

#[test]
fn every_projection_row_shares_the_input_and_labels_of_the_state() {
    let state = created_with_labels(json!({"team": "a"}));
    let state = fold(
        &state,
        &machine::assign(&state, &"c1".into()).expect("assigns").0,
    );
    let row = state.row();
    assert_eq!(*row.input, json!({"q": 1}));
    assert!(std::sync::Arc::ptr_eq(&row.input, &state.input));
    let (Some(row_labels), Some(labels)) = (&row.labels, &state.labels) else {
        panic!("labels given at creation: {:?}", state.labels);
    };
    assert_eq!(row_labels.get("team").map(String::as_str), Some("a"));
    assert!(std::sync::Arc::ptr_eq(row_labels, labels));
}
