use super::*;
use crate::ids::ExecutionId;

fn live(metrics: &Metrics, status: &str) -> i64 {
    metrics
        .executions
        .get_or_create(&StatusLabel {
            status: status.to_owned(),
        })
        .get()
}

#[test]
fn moving_an_execution_moves_the_gauges_of_its_live_statuses_only() {
    let metrics = Metrics::new();
    let id = ExecutionId::new("e-1");
    metrics.execution_moved(&id, None, ExecutionStatus::Pending);
    metrics.execution_moved(&id, None, ExecutionStatus::Pending);
    metrics.execution_moved(
        &id,
        Some(ExecutionStatus::Pending),
        ExecutionStatus::Running,
    );
    metrics.execution_moved(
        &id,
        Some(ExecutionStatus::Running),
        ExecutionStatus::Blocked,
    );
    metrics.execution_moved(
        &id,
        Some(ExecutionStatus::Blocked),
        ExecutionStatus::Blocked,
    );
    assert_eq!(
        ["pending", "running", "blocked"].map(|status| live(&metrics, status)),
        [1, 0, 1]
    );
    metrics.execution_moved(
        &id,
        Some(ExecutionStatus::Blocked),
        ExecutionStatus::Completed,
    );
    metrics.execution_moved(
        &id,
        Some(ExecutionStatus::Completed),
        ExecutionStatus::Failed,
    );
    assert_eq!(
        ["pending", "running", "blocked", "completed", "failed"]
            .map(|status| live(&metrics, status)),
        [1, 0, 0, 0, 0]
    );
    let text = metrics.encode();
    assert!(
        text.contains("keel_live_executions{status=\"pending\"} 1"),
        "{text}"
    );
}

#[test]
fn a_tracking_kernel_gives_back_exactly_what_it_counted_for_released_executions() {
    let metrics = Metrics::new();
    metrics.track_live_executions();
    let gauges = |metrics: &Metrics| ["pending", "running", "blocked"].map(|s| live(metrics, s));
    let [a, b, c] = ["e-a", "e-b", "e-c"].map(ExecutionId::new);
    metrics.execution_moved(&a, None, ExecutionStatus::Pending);
    metrics.execution_moved(&b, None, ExecutionStatus::Pending);
    metrics.execution_moved(&b, Some(ExecutionStatus::Pending), ExecutionStatus::Blocked);
    metrics.execution_moved(&c, None, ExecutionStatus::Running);
    // Loaded again (its partition acquired once more): counted once.
    metrics.execution_moved(&a, None, ExecutionStatus::Pending);
    assert_eq!(gauges(&metrics), [1, 1, 1]);
    // a and b's partition moved away: each leaves the gauge it was counted in.
    metrics.executions_released(&|id: &ExecutionId| *id != c);
    assert_eq!(gauges(&metrics), [0, 1, 0]);
    // A caller's stale `from` takes nothing from another status.
    metrics.execution_moved(
        &c,
        Some(ExecutionStatus::Pending),
        ExecutionStatus::Completed,
    );
    assert_eq!(gauges(&metrics), [0, 0, 0]);
    metrics.executions_released(&|_: &ExecutionId| true);
    assert_eq!(gauges(&metrics), [0, 0, 0]);
}
