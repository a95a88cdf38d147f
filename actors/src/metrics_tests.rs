use super::*;

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
    metrics.execution_moved(None, ExecutionStatus::Pending);
    metrics.execution_moved(None, ExecutionStatus::Pending);
    metrics.execution_moved(Some(ExecutionStatus::Pending), ExecutionStatus::Running);
    metrics.execution_moved(Some(ExecutionStatus::Running), ExecutionStatus::Blocked);
    metrics.execution_moved(Some(ExecutionStatus::Blocked), ExecutionStatus::Blocked);
    assert_eq!(
        ["pending", "running", "blocked"].map(|status| live(&metrics, status)),
        [1, 0, 1]
    );
    metrics.execution_moved(Some(ExecutionStatus::Blocked), ExecutionStatus::Completed);
    metrics.execution_moved(Some(ExecutionStatus::Completed), ExecutionStatus::Failed);
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
