//! The retention loop: terminal executions older than the period are deleted on the clean-up
//! interval, in batches, and live ones are never touched.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::ids::AgentId;
use crate::policy::PermissiveEngine;
use crate::testing::{MemoryStore, TestKernel};

#[tokio::test(start_paused = true)]
async fn old_terminal_executions_are_deleted_and_live_ones_kept() {
    let store = Arc::new(MemoryStore::default());
    let t = TestKernel::start_with(store.clone(), Arc::new(PermissiveEngine), |config| {
        config.retention_period = Some(Duration::from_secs(3600));
        config.cleanup_interval = Duration::from_secs(600);
        config.execution.execution_timeout = Duration::from_secs(24 * 3600);
    })
    .await;
    let mut ended = Vec::new();
    for _ in 0..150 {
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        t.kernel.cancel(&row.id).await.expect("cancel");
        ended.push(row.id);
    }
    let live = t
        .kernel
        .create_execution(AgentId::new("a"), json!(null), None)
        .await
        .expect("create");

    tokio::time::sleep(Duration::from_secs(1800)).await;
    assert!(
        !store.all_events(&ended[0]).is_empty(),
        "younger than the period: kept"
    );

    tokio::time::sleep(Duration::from_secs(2 * 3600)).await;
    assert!(
        ended.iter().all(|id| store.all_events(id).is_empty()),
        "all old terminal executions deleted"
    );
    assert_eq!(
        store.all_events(&live.id).len(),
        1,
        "a pending execution is never deleted"
    );
    let metrics = t.kernel.encode_metrics();
    assert!(
        metrics.contains("keel_retention_deleted_executions_total 150"),
        "{metrics}"
    );
    t.shutdown().await;
}
