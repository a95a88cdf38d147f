//! An assignment whose commit lands although the store answered with an error (the connection
//! died during `COMMIT`). The agent group sees a failed offer and offers the execution again; by
//! then it is no longer pending, so that offer is refused — the assignment push must still reach
//! the consumer the store assigned it to, or the execution stays `running` with nobody on it.

use std::time::Duration;

use serde_json::json;

use super::test_support::{allow_all, events_of, next_of, start};
use crate::execution::Intent;
use crate::ids::{AgentId, ConsumerId, SessionId};
use crate::status::ExecutionStatus;
use crate::testing::eventually;

#[tokio::test(start_paused = true)]
async fn an_assignment_that_landed_despite_its_error_reaches_its_consumer() {
    let t = start(allow_all(), |_| {}).await;
    let row = t
        .kernel
        .create_execution(AgentId::new("a"), json!({"n": 1}), None)
        .await
        .expect("create");

    t.store.lose_commit_answers(true);
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    let started = eventually(Duration::from_secs(5), || async {
        let started = events_of(&t, &row.id, "execution.started");
        (!started.is_empty()).then_some(started)
    })
    .await
    .expect("the assignment was committed");
    t.store.lose_commit_answers(false);

    // The group's next offer finds the execution running; the push arrives all the same.
    let assigned = next_of(&mut agent, "execution.assigned").await;
    assert_eq!(assigned.data["execution_id"], row.id.as_str());
    let stored = serde_json::to_value(&started[0]).expect("event json");
    assert_eq!(
        assigned.data["session_id"], stored["payload"]["session_id"],
        "the session the store holds"
    );
    assert_eq!(events_of(&t, &row.id, "execution.started").len(), 1);

    let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
    let reply = t
        .kernel
        .submit_intent(
            &row.id,
            &session,
            Intent::Complete {
                output: Some(json!("done")),
            },
        )
        .await
        .expect("the session is the execution's");
    assert!(reply.accepted, "{reply:?}");
    assert_eq!(
        t.kernel.execution(&row.id).await.expect("row").status,
        ExecutionStatus::Completed
    );
    t.shutdown().await;
}
