//! Conformance of `Store::runner_results_since`: results of remote steps since a time, oldest
//! first, each with the runner that claimed the attempt it ends (the step's last
//! `step.dispatched` or `step.started` before it); local steps, time-outs and the failures of
//! runners that went away are not runner results.

use std::sync::Arc;

use keel_actors::events::{EventBody, NewEvent};
use keel_actors::ids::StepId;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{ExecutionRow, RunnerToolResult, Store};

use super::tool_calls::call;
use super::{advance, at, commit_each, create};

fn on(step: &str, body: EventBody) -> NewEvent {
    NewEvent::step(&StepId::new(step), body)
}

fn dispatched(step: &str, runner: &str, job: &str) -> NewEvent {
    let body = EventBody::StepDispatched {
        runner_id: runner.into(),
        job_id: job.into(),
        deadline: at(1_000),
    };
    on(step, body)
}

fn failed(step: &str, error: &str, retryable: bool) -> NewEvent {
    let body = EventBody::StepFailed {
        error: error.to_owned(),
        retryable,
        cost: None,
    };
    on(step, body)
}

fn completed(step: &str) -> NewEvent {
    let body = EventBody::StepCompleted {
        result: serde_json::json!({}),
        cost: None,
    };
    on(step, body)
}

async fn append(
    store: &Arc<dyn Store>,
    row: &ExecutionRow,
    micros: i64,
    events: Vec<NewEvent>,
) -> ExecutionRow {
    let commit = advance(row, at(micros), ExecutionStatus::Running, events);
    commit_each(store, &[commit]).await
}

pub async fn runner_results_since_names_the_runner_of_each_remote_result(store: Arc<dyn Store>) {
    assert_eq!(store.runner_results_since(at(0)).await.expect("read"), []);
    let mut row = create(&store, "exec-r", "agent-r", &[], at(1)).await;
    for (index, step) in ["remote", "local", "lost", "slow", "refused"]
        .iter()
        .enumerate()
    {
        let micros = 2 + i64::try_from(index).unwrap_or(0);
        row = call(&store, &row, step, "index", at(micros), false).await;
    }
    let first_attempt = vec![
        dispatched("remote", "", "j1"),
        dispatched("remote", "r1", "j1"),
        dispatched("local", "", ""),
        dispatched("lost", "r1", "j3"),
        dispatched("slow", "r3", "j4"),
        dispatched("refused", "r1", "j5"),
    ];
    row = append(&store, &row, 10, first_attempt).await;
    let retried = EventBody::StepRetried {
        next_attempt: 2,
        not_before: None,
    };
    let retry = vec![failed("remote", "boom", true), on("remote", retried)];
    row = append(&store, &row, 11, retry).await;
    let second_attempt = vec![
        dispatched("remote", "", "j2"),
        dispatched("remote", "r2", "j2"),
        on(
            "remote",
            EventBody::StepStarted {
                runner_id: "r2".into(),
            },
        ),
        completed("remote"),
        completed("local"),
    ];
    row = append(&store, &row, 20, second_attempt).await;
    let ends = vec![
        failed("lost", keel_actors::execution::RUNNER_LOST_ERROR, true),
        on("slow", EventBody::StepTimedOut {}),
        failed("refused", "quota exceeded", false),
    ];
    append(&store, &row, 30, ends).await;
    let result = |runner: &str, success: bool, micros: i64| RunnerToolResult {
        runner_id: runner.into(),
        success,
        at: at(micros),
    };
    assert_eq!(
        store.runner_results_since(at(11)).await.expect("read"),
        [
            result("r1", false, 11),
            result("r2", true, 20),
            result("r1", false, 30),
        ],
        "each attempt's own runner; the bound is inclusive"
    );
    assert_eq!(
        store.runner_results_since(at(12)).await.expect("read"),
        [result("r2", true, 20), result("r1", false, 30)]
    );
}

/// A NUL (`\u0000`) in a runner's error or in a dispatch's job id breaks no read of the
/// runner results: every result is listed, and a lost runner's failure is still left out.
pub async fn a_nul_in_a_result_leaves_the_runner_results_readable(store: Arc<dyn Store>) {
    let mut row = create(&store, "exec-n", "agent-n", &[], at(1)).await;
    for (micros, step) in [(2, "poisoned"), (3, "clean"), (4, "lost")] {
        row = call(&store, &row, step, "index", at(micros), false).await;
    }
    let dispatches = vec![
        dispatched("poisoned", "r1", "j\u{0}1"),
        dispatched("clean", "r2", "j2"),
        dispatched("lost", "r3", "j3"),
    ];
    row = append(&store, &row, 10, dispatches).await;
    let ends = vec![
        failed("poisoned", "bad \u{0} byte \\u0000", false),
        completed("clean"),
        failed(
            "lost",
            &format!("{} \u{0}", keel_actors::execution::RUNNER_LOST_ERROR),
            true,
        ),
    ];
    append(&store, &row, 20, ends).await;
    let result = |runner: &str, success: bool| RunnerToolResult {
        runner_id: runner.into(),
        success,
        at: at(20),
    };
    assert_eq!(
        store.runner_results_since(at(0)).await.expect("read"),
        [result("r1", false), result("r2", true)]
    );
}
