//! Paused-time tests of the agent group's replay: results written to a connection that is then
//! replaced (the SDK reconnecting with the same consumer id) are sent again on the new one,
//! within the replay window only.

use std::time::Duration;

use serde_json::json;

use crate::execution::StepOutcome;
use crate::execution::test_support::{allow_all, call, invoke, next_of, running, start, wait_for};
use crate::ids::{AgentId, ConsumerId, RunnerId};

#[tokio::test(start_paused = true)]
async fn results_written_to_a_replaced_connection_are_sent_again_on_the_new_one() {
    let t = start(allow_all(), |_| {}).await;
    let run = running(&t, "c1").await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let step = invoke(&t, &run, call("t", true)).await;
    next_of(&mut runner, "job.assigned").await;
    let outcome = StepOutcome {
        step_id: step.clone(),
        success: true,
        data: Some(json!("found")),
        error: None,
        retryable: false,
        cost: None,
    };
    let (runner_id, consumer) = (RunnerId::new("r1"), ConsumerId::new("r1-a"));
    t.kernel
        .runner_result(&runner_id, Some(&consumer), &run.id, outcome)
        .await
        .expect("result");
    wait_for(&t, &run.id, "step.completed", 1).await;

    // The push sits unread in the old connection, which the reconnect replaces.
    let mut again = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    drop(run.agent);
    let replayed = next_of(&mut again, "tool.result").await;
    assert_eq!(
        (
            replayed.data["step_id"].as_str(),
            replayed.data["result"].as_str()
        ),
        (Some(step.as_str()), Some("found"))
    );

    // Past the replay window nothing is sent again.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let mut later = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("reconnect");
    drop(again);
    let nothing = tokio::time::timeout(Duration::from_millis(1), later.next()).await;
    assert!(nothing.is_err(), "{nothing:?}");
    t.shutdown().await;
}
