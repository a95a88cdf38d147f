//! Conformance of `Store::tool_calls_since`: allowed tool calls (steps created without an
//! approval gate) since a time, oldest first, with the agent of their execution.

use std::sync::Arc;

use serde_json::json;

use keel_actors::events::{EventBody, NewEvent};
use keel_actors::ids::{ExecutionId, StepId};
use keel_actors::status::{ExecutionStatus, StepStatus};
use keel_actors::store::{AllowedToolCall, ExecutionRow, StepRow, Store};
use keel_actors::time::Timestamp;

use super::{advance, at, commit_each, create};

/// Returns the `step.created` event of `step` (built from its wire form, so it does not depend
/// on the optional fields other features add).
fn step_created(step: &StepId, tool_id: &str) -> NewEvent {
    step_created_replaying(step, tool_id, None)
}

/// Returns the `step.created` event of `step`, replaying `replay_of` when given.
fn step_created_replaying(step: &StepId, tool_id: &str, replay_of: Option<&str>) -> NewEvent {
    let mut payload = json!({
        "tool_id": tool_id, "tool_version": 0, "arguments": {"q": 1}, "max_attempts": 1,
        "attempt": 1, "deadline": "2026-01-02T00:00:00.000000Z", "remote": false,
    });
    if let Some(replayed) = replay_of {
        payload["replay_of"] = json!(replayed);
    }
    let body: EventBody =
        serde_json::from_value(json!({ "type": "step.created", "payload": payload }))
            .expect("step.created decodes");
    NewEvent::step(step, body)
}

/// Returns the projection row of a new local step (pending, one attempt).
pub fn step_row(
    execution: &ExecutionRow,
    step: &StepId,
    tool_id: &str,
    when: Timestamp,
) -> StepRow {
    StepRow {
        id: step.clone(),
        execution_id: execution.id.clone(),
        tool_id: tool_id.into(),
        status: StepStatus::Pending,
        attempt: 1,
        max_attempts: 1,
        remote: false,
        job_id: None,
        runner_id: None,
        deadline: None,
        updated_at: when,
    }
}

/// Appends one tool call to `row` at `when`: an allowed one, or one waiting for approval.
pub(super) async fn call(
    store: &Arc<dyn Store>,
    row: &ExecutionRow,
    step: &str,
    tool_id: &str,
    when: Timestamp,
    gated: bool,
) -> ExecutionRow {
    let step = StepId::new(step);
    let mut events = vec![step_created(&step, tool_id)];
    // A call a re-run answered from the journal ran nothing: `replayed-` steps replay one.
    if let Some(replayed) = step.as_str().strip_prefix("replayed-") {
        events = vec![step_created_replaying(&step, tool_id, Some(replayed))];
    }
    let mut status = ExecutionStatus::Running;
    if gated {
        events.push(NewEvent::step(
            &step,
            EventBody::StepApprovalRequired {
                tool_id: tool_id.into(),
                arguments: json!({"q": 1}),
                remote: false,
                reason: "needs a human".to_owned(),
                rule_id: None,
                arguments_digest: None,
                approvers: None,
                expires_at: None,
                on_expiry: None,
                self_approval: false,
            },
        ));
        status = ExecutionStatus::Blocked;
    }
    let mut commit = advance(row, when, status, events);
    commit.steps.push(step_row(row, &step, tool_id, when));
    commit_each(store, &[commit]).await
}

/// Allowed calls at or after the time are listed oldest first with their agent and tool;
/// approval-gated steps and older calls are not.
pub async fn tool_calls_since_lists_allowed_calls_oldest_first(store: Arc<dyn Store>) {
    assert!(
        store
            .tool_calls_since(at(0))
            .await
            .expect("read")
            .is_empty(),
        "an empty store has no calls"
    );
    let a = create(&store, "exec-a", "agent-a", &[], at(1)).await;
    let b = create(&store, "exec-b", "agent-b", &[], at(2)).await;
    let a = call(&store, &a, "step-a1", "shell.ls", at(10), false).await;
    let b = call(&store, &b, "step-b1", "http.get", at(15), false).await;
    let a = call(&store, &a, "step-a2", "shell.ls", at(20), false).await;
    call(&store, &b, "step-b2", "deploy", at(25), true).await;
    let a = call(&store, &a, "replayed-step-a1", "shell.ls", at(26), false).await;
    call(&store, &a, "step-a3", "http.get", at(30), false).await;

    let expected = |agent: &str, tool: &str, when: i64| AllowedToolCall {
        agent_id: agent.into(),
        tool_id: tool.into(),
        at: at(when),
    };
    assert_eq!(
        store.tool_calls_since(at(10)).await.expect("read"),
        vec![
            expected("agent-a", "shell.ls", 10),
            expected("agent-b", "http.get", 15),
            expected("agent-a", "shell.ls", 20),
            expected("agent-a", "http.get", 30),
        ],
        "the bound is inclusive; the approval-gated step and the replay are left out"
    );
    assert_eq!(
        store.tool_calls_since(at(16)).await.expect("read"),
        vec![
            expected("agent-a", "shell.ls", 20),
            expected("agent-a", "http.get", 30),
        ]
    );
    assert!(
        store
            .tool_calls_since(at(31))
            .await
            .expect("read")
            .is_empty()
    );
    assert!(
        store
            .execution(&ExecutionId::new("exec-a"))
            .await
            .expect("row")
            .is_some()
    );
}

/// Step results at or after the time are listed oldest first with their tool: completed ones
/// as successes, failed and timed-out ones as failures; other step events are not results.
pub async fn tool_results_since_lists_step_results_oldest_first(store: Arc<dyn Store>) {
    use keel_actors::store::ToolResult;
    assert!(
        store
            .tool_results_since(at(0))
            .await
            .expect("read")
            .is_empty()
    );
    let a = create(&store, "exec-a", "agent-a", &[], at(1)).await;
    let a = call(&store, &a, "step-a1", "pay.charge", at(2), false).await;
    let a = call(&store, &a, "step-a2", "pay.refund", at(3), false).await;
    let a = call(&store, &a, "step-a3", "pay.charge", at(4), false).await;
    let result = |step: &str, body: EventBody| NewEvent::step(&StepId::new(step), body);
    let a = commit_each(
        &store,
        &[advance(
            &a,
            at(10),
            ExecutionStatus::Running,
            vec![result(
                "step-a1",
                EventBody::StepFailed {
                    error: "boom".into(),
                    retryable: true,
                    cost: None,
                },
            )],
        )],
    )
    .await;
    let a = commit_each(
        &store,
        &[advance(
            &a,
            at(20),
            ExecutionStatus::Running,
            vec![
                result(
                    "step-a2",
                    EventBody::StepCompleted {
                        result: json!({"ok": true}),
                        cost: None,
                    },
                ),
                result(
                    "step-a1",
                    EventBody::StepRetried {
                        next_attempt: 2,
                        not_before: None,
                    },
                ),
            ],
        )],
    )
    .await;
    commit_each(
        &store,
        &[advance(
            &a,
            at(30),
            ExecutionStatus::Running,
            vec![result("step-a3", EventBody::StepTimedOut {})],
        )],
    )
    .await;
    let expected = |tool: &str, success: bool, when: i64| ToolResult {
        tool_id: tool.into(),
        success,
        at: at(when),
    };
    assert_eq!(
        store.tool_results_since(at(10)).await.expect("read"),
        vec![
            expected("pay.charge", false, 10),
            expected("pay.refund", true, 20),
            expected("pay.charge", false, 30),
        ],
        "the bound is inclusive; step.created and step.retried are not results"
    );
    assert_eq!(
        store.tool_results_since(at(11)).await.expect("read"),
        vec![
            expected("pay.refund", true, 20),
            expected("pay.charge", false, 30),
        ]
    );
}

/// Unfinished local steps are counted per tool; remote and finished steps are not.
pub async fn active_local_steps_counts_unfinished_local_steps_of_a_tool(store: Arc<dyn Store>) {
    let mut row = create(&store, "exec-a", "a", &[], at(0)).await;
    let kinds = [
        ("s1", "shell", StepStatus::Pending, false),
        ("s2", "shell", StepStatus::Dispatched, false),
        ("s3", "shell", StepStatus::Running, false),
        ("s4", "shell", StepStatus::Dispatched, true),
        ("s5", "other", StepStatus::Dispatched, false),
        ("s6", "shell", StepStatus::Dispatched, false),
    ];
    for (index, (step, tool, status, remote)) in kinds.into_iter().enumerate() {
        let step = StepId::new(step);
        let when = at(1 + index as i64);
        let mut commit = advance(
            &row,
            when,
            ExecutionStatus::Running,
            vec![step_created(&step, tool)],
        );
        let mut step_row = step_row(&row, &step, tool, when);
        step_row.status = status;
        step_row.remote = remote;
        commit.steps.push(step_row);
        row = commit_each(&store, &[commit]).await;
    }
    assert_eq!(
        store
            .active_local_steps(&"shell".into())
            .await
            .expect("count"),
        4
    );
    // s6 finishes.
    let step = StepId::new("s6");
    let done = NewEvent::step(
        &step,
        EventBody::StepCompleted {
            result: json!(1),
            cost: None,
        },
    );
    let mut commit = advance(&row, at(20), ExecutionStatus::Running, vec![done]);
    let mut finished = step_row(&row, &step, "shell", at(20));
    finished.status = StepStatus::Succeeded;
    commit.steps.push(finished);
    commit_each(&store, &[commit]).await;
    assert_eq!(
        store
            .active_local_steps(&"shell".into())
            .await
            .expect("count"),
        3
    );
    assert_eq!(
        store
            .active_local_steps(&"other".into())
            .await
            .expect("count"),
        1
    );
    assert_eq!(
        store
            .active_local_steps(&"nothing".into())
            .await
            .expect("count"),
        0
    );
}
