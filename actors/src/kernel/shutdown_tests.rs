//! `TestKernel::shutdown` checks the runtime's task count too: the agent group's and the
//! dispatcher's pending timers (a consumer's disconnect grace, a runner's grace while it holds
//! a job) are aborted when they stop, instead of outliving them.

use std::time::Duration;

use crate::agent_group::AgentGroupMsg;
use crate::execution::test_support::{allow_all, call, invoke, next_of, running, start};
use crate::ids::{AgentId, ConsumerId};
use crate::runner::DispatcherMsg;
use crate::testing::observe;

#[tokio::test]
async fn a_shutdown_leaves_no_grace_timer_of_a_group_or_the_dispatcher_behind() {
    let t = start(allow_all(), |config| {
        config.agent_grace = Duration::from_secs(120);
        config.runner_grace = Duration::from_secs(120);
        // How long the leak check waits: far shorter than the graces.
        config.shutdown_timeout = Duration::from_secs(2);
    })
    .await;
    let mut runner = t
        .kernel
        .connect_runner("r1".into(), ConsumerId::new("r1-a"), vec!["t".into()])
        .await
        .expect("runner");
    let run = running(&t, "c1").await;
    invoke(&t, &run, call("t", true)).await;
    next_of(&mut runner, "job.assigned").await;
    // Both leave: the runner holding its job (runner grace), the agent's consumer (its grace).
    drop(runner);
    drop(run.agent);
    let dispatcher = t.kernel.ctx.dispatcher().expect("dispatcher");
    let orphaned = observe(&dispatcher, DispatcherMsg::Observe).await.orphaned;
    assert_eq!(orphaned.len(), 1, "the runner's grace started");
    let group = t
        .kernel
        .ctx
        .agent_groups
        .get(&AgentId::new("a"))
        .expect("agent group");
    let away = observe(&group, AgentGroupMsg::Observe).await.away;
    assert_eq!(away, ["c1"], "the consumer's grace started");
    t.shutdown().await;
}
