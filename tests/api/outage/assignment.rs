//! An assignment that fails during an outage is retried once the database is back: pending
//! executions offered to a consumer while every write fails must still reach that consumer
//! after the recovery, without a new execution or a reconnect to trigger it.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::time::Instant;

use super::{Fault, RECOVERY_BOUND, kernel_behind_proxy};
use crate::harness::{TestAgent, TestKernel, eventually};

/// Agent id of this scenario.
const AGENT: &str = "outage-assign";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pending_executions_are_assigned_after_the_outage_without_a_new_trigger() {
    let test = "postgres assignment retry";
    let Some((kernel, fault)) = kernel_behind_proxy(test).await else {
        return;
    };
    // A closed proxy fails a commit at once; hold the outage well past that.
    assignment_retried(kernel, fault, Duration::from_millis(500)).await;
}

/// Creates pending executions with no consumer, connects one during the outage (its
/// assignment attempts fail), heals, and expects every execution assigned within the
/// recovery bound.
async fn assignment_retried(kernel: TestKernel, mut fault: Fault, hold: Duration) {
    let mut ids = Vec::new();
    for index in 0..2 {
        ids.push(kernel.create(AGENT, json!({ "n": index })).await["id"].clone());
    }
    fault.inject().await;
    let mut agent = TestAgent::connect(&kernel, AGENT).await;
    tokio::time::sleep(hold).await;
    let (status, _) = kernel.get("/v0/ready").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "still in the outage"
    );
    fault.heal().await;
    let healed = Instant::now();

    let mut assigned = Vec::new();
    while assigned.len() < ids.len() {
        let left = (healed + RECOVERY_BOUND).saturating_duration_since(Instant::now());
        let assignment = tokio::time::timeout(left, agent.assignment())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {assigned:?} of {ids:?} assigned {RECOVERY_BOUND:?} after the recovery"
                )
            });
        assigned.push(assignment.execution_id);
    }
    for id in &ids {
        let id = id.as_str().expect("id");
        assert!(
            assigned.iter().any(|assigned| assigned == id),
            "{id} not assigned"
        );
        let status = eventually("running", || async {
            let status = kernel.status(id).await;
            (status == "running").then_some(status)
        })
        .await;
        assert_eq!(status, "running");
    }
    kernel.shutdown().await;
}
