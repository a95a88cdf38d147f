//! Paused-time tests of assignment retries: an execution whose assignment commit failed (the
//! database was away) is offered again once the store is back, with no new execution or
//! reconnect to trigger it.

use std::time::Duration;

use serde_json::json;

use crate::execution::test_support::{allow_all, next_of, start};
use crate::ids::{AgentId, ConsumerId};

#[tokio::test(start_paused = true)]
async fn a_failed_assignment_is_retried_once_the_store_is_back() {
    let t = start(allow_all(), |_| {}).await;
    let first = t
        .kernel
        .create_execution(AgentId::new("a"), json!(1), None)
        .await
        .expect("create");
    let second = t
        .kernel
        .create_execution(AgentId::new("a"), json!(2), None)
        .await
        .expect("create");

    t.store.fail_commits(true);
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    let during = tokio::time::timeout(
        Duration::from_secs(2),
        next_of(&mut agent, "execution.assigned"),
    )
    .await;
    assert!(during.is_err(), "assigned while commits fail: {during:?}");
    assert_eq!(
        t.store.all_events(&first.id).len(),
        1,
        "only execution.created"
    );

    t.store.fail_commits(false);
    let mut assigned = vec![
        next_of(&mut agent, "execution.assigned").await,
        next_of(&mut agent, "execution.assigned").await,
    ]
    .into_iter()
    .map(|push| push.data["execution_id"].as_str().expect("id").to_owned())
    .collect::<Vec<_>>();
    assigned.sort();
    let mut expected = vec![first.id.to_string(), second.id.to_string()];
    expected.sort();
    assert_eq!(assigned, expected);
    t.shutdown().await;
}
