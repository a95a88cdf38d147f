//! Paused-time test of backpressure on agent streams: a consumer whose push buffer is full is
//! disconnected (counted in `keel_slow_consumers_disconnected_total`), and after the grace its
//! executions are reset and assigned to another consumer.

use std::time::Duration;

use serde_json::json;

use crate::execution::test_support::{allow_all, next_of, running, start};
use crate::ids::{AgentId, ConsumerId};

#[tokio::test(start_paused = true)]
async fn a_consumer_that_cannot_keep_up_is_disconnected_counted_and_its_work_reassigned() {
    let t = start(allow_all(), |config| {
        config.push_buffer = 1;
        config.agent_grace = Duration::from_secs(2);
    })
    .await;
    let metric = "keel_slow_consumers_disconnected_total{kind=\"agent\"} 1";
    let run = running(&t, "slow").await;
    // Its next assignment fills the one-push buffer; nobody reads it.
    let second = t
        .kernel
        .create_execution(AgentId::new("a"), json!(2), None)
        .await
        .expect("create");
    assert!(!t.kernel.encode_metrics().contains(metric));
    // One more push (the cancellation of the first execution) does not fit.
    t.kernel.cancel(&run.id).await.expect("cancel");
    let mut counted = false;
    for _ in 0..100 {
        if t.kernel.encode_metrics().contains(metric) {
            counted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(counted, "{}", t.kernel.encode_metrics());
    // After the grace the second execution is reset and goes to a consumer that reads.
    let mut fast = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("fast"))
        .await
        .expect("connect");
    let assigned = next_of(&mut fast, "execution.assigned").await;
    assert_eq!(assigned.data["execution_id"], second.id.as_str());
    drop(run);
    t.shutdown().await;
}
