//! The dispatcher and its runner actors alone, with a probe in place of the execution they
//! claim jobs from: delivery after a claim, a claim that is never answered, an execution that
//! is gone, and a runner that leaves holding a job (back in time, or lost).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::{Dispatcher, DispatcherMsg, DispatcherSnapshot};
use crate::execution::{ExecutionMsg, JobSpec};
use crate::ids::{ConsumerId, ExecutionId, JobId, RunnerId, StepId};
use crate::policy::PermissiveEngine;
use crate::push::Push;
use crate::testing::{Probe, ProbeContext, Unanswered, eventually, observe};

const WAIT: Duration = Duration::from_secs(5);

/// What the execution probe saw.
#[derive(Debug, PartialEq)]
enum Seen {
    Claim { job_id: JobId, runner_id: RunnerId },
    RunnerLost { job_id: JobId },
    Other,
}

fn job(execution: &ExecutionId, id: &str) -> JobSpec {
    JobSpec {
        job_id: id.into(),
        execution_id: execution.clone(),
        step_id: StepId::new(format!("step-{id}")),
        attempt: 1,
        tool_id: "web.search".into(),
        arguments: json!({"q": id}),
        deadline: crate::time::now() + chrono::Duration::minutes(5),
        not_before: None,
        traceparent: None,
        idempotency_key: None,
    }
}

/// An execution that grants every claim (`keep` is `None`) or never answers one.
async fn execution(keep: Option<Unanswered>) -> Probe<ExecutionMsg, Seen> {
    Probe::answering(move |message| match message {
        ExecutionMsg::ClaimJob {
            job,
            runner_id,
            reply,
        } => {
            let seen = Seen::Claim {
                job_id: job.job_id.clone(),
                runner_id,
            };
            match &keep {
                Some(keep) => keep.keep(reply),
                None => {
                    let _ = reply.send(Some(job));
                }
            }
            seen
        }
        ExecutionMsg::RunnerLost { job_id, .. } => Seen::RunnerLost { job_id },
        _ => Seen::Other,
    })
    .await
}

struct Fixture {
    probes: ProbeContext,
    dispatcher: ractor::ActorRef<DispatcherMsg>,
    execution_id: ExecutionId,
}

async fn fixture(
    execution: &Probe<ExecutionMsg, Seen>,
    adjust: impl FnOnce(&mut crate::kernel::KernelConfig),
) -> Fixture {
    let mut probes = ProbeContext::start_with("a", Arc::new(PermissiveEngine), adjust).await;
    let dispatcher = probes
        .spawn("dispatcher", Dispatcher, probes.ctx.clone())
        .await;
    probes.register_dispatcher(dispatcher.clone());
    let execution_id = ExecutionId::generate();
    probes.register_execution(&execution_id, execution.actor.clone());
    Fixture {
        probes,
        dispatcher,
        execution_id,
    }
}

fn connect(
    dispatcher: &ractor::ActorRef<DispatcherMsg>,
    runner: &str,
    connection: u64,
) -> mpsc::Receiver<Push> {
    let (sender, stream) = mpsc::channel(16);
    let message = DispatcherMsg::RunnerConnected {
        runner_id: RunnerId::new(runner),
        consumer_id: ConsumerId::new("c1"),
        connection,
        capabilities: vec!["web.search".into()],
        sender,
    };
    dispatcher
        .send_message(message)
        .expect("dispatcher running");
    stream
}

fn holding(runner: &str, job: Option<&str>) -> DispatcherSnapshot {
    DispatcherSnapshot {
        connections: vec![(
            (RunnerId::new(runner), ConsumerId::new("c1")),
            job.map(JobId::from),
        )],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_job_is_written_to_the_runner_only_after_its_execution_grants_the_claim() {
    let mut execution = execution(None).await;
    let f = fixture(&execution, |_| {}).await;
    let mut stream = connect(&f.dispatcher, "r1", 1);
    f.dispatcher
        .send_message(DispatcherMsg::Enqueue(job(&f.execution_id, "j1")))
        .expect("sent");

    let claim = execution.expect(WAIT, Some).await;
    assert_eq!(
        claim,
        Seen::Claim {
            job_id: "j1".into(),
            runner_id: "r1".into()
        }
    );
    let assigned = tokio::time::timeout(WAIT, stream.recv())
        .await
        .expect("in time")
        .expect("a push");
    assert_eq!(assigned.event, "job.assigned");
    assert_eq!(assigned.data["id"], "j1");
    assert_eq!(assigned.data["arguments"], json!({"q": "j1"}));
    assert_eq!(
        observe(&f.dispatcher, DispatcherMsg::Observe).await,
        holding("r1", Some("j1"))
    );
    f.probes.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_claim_the_execution_never_answers_frees_the_runner_after_the_call_timeout() {
    let keep = Unanswered::default();
    let mut execution = execution(Some(keep.clone())).await;
    let f = fixture(&execution, |config| {
        config.call_timeout = Duration::from_secs(2);
    })
    .await;
    let mut stream = connect(&f.dispatcher, "r1", 1);
    f.dispatcher
        .send_message(DispatcherMsg::Enqueue(job(&f.execution_id, "j1")))
        .expect("sent");
    execution
        .expect(WAIT, |seen| {
            matches!(seen, Seen::Claim { .. }).then_some(())
        })
        .await;
    assert_eq!(keep.len(), 1, "the claim is held, not answered");
    assert_eq!(
        observe(&f.dispatcher, DispatcherMsg::Observe).await,
        holding("r1", Some("j1")),
        "busy while the claim is out"
    );

    let dispatcher = f.dispatcher.clone();
    let freed = eventually(Duration::from_secs(10), || {
        let dispatcher = dispatcher.clone();
        async move {
            let snapshot = observe(&dispatcher, DispatcherMsg::Observe).await;
            (snapshot == holding("r1", None)).then_some(())
        }
    })
    .await;
    assert!(freed.is_some(), "the connection is idle again");
    assert!(
        stream.try_recv().is_err(),
        "nothing was written to the runner"
    );
    execution.expect_none_within(Duration::from_secs(1)).await;
    f.probes.finish().await;
}

#[tokio::test]
async fn a_job_of_an_execution_that_is_gone_is_not_delivered() {
    let execution = execution(None).await;
    let f = fixture(&execution, |_| {}).await;
    let mut stream = connect(&f.dispatcher, "r1", 1);
    drop(execution);
    let gone = ExecutionId::generate();
    f.dispatcher
        .send_message(DispatcherMsg::Enqueue(job(&gone, "j1")))
        .expect("sent");
    let dispatcher = f.dispatcher.clone();
    let freed = eventually(WAIT, || {
        let dispatcher = dispatcher.clone();
        async move {
            let snapshot = observe(&dispatcher, DispatcherMsg::Observe).await;
            (snapshot == holding("r1", None)).then_some(())
        }
    })
    .await;
    assert!(freed.is_some(), "the connection is idle again");
    assert!(
        stream.try_recv().is_err(),
        "nothing was written to the runner"
    );
    f.probes.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_runner_that_leaves_with_a_job_keeps_it_if_back_in_time_else_it_is_reported_lost() {
    let mut execution = execution(None).await;
    let f = fixture(&execution, |config| {
        config.runner_grace = Duration::from_secs(3);
    })
    .await;
    let _stream = connect(&f.dispatcher, "r1", 1);
    f.dispatcher
        .send_message(DispatcherMsg::Enqueue(job(&f.execution_id, "j1")))
        .expect("sent");
    execution
        .expect(WAIT, |seen| {
            matches!(seen, Seen::Claim { .. }).then_some(())
        })
        .await;

    // Restart mid-conversation: the connection drops and a new one comes back in the grace.
    let leave = |connection| DispatcherMsg::RunnerDisconnected {
        runner_id: RunnerId::new("r1"),
        consumer_id: ConsumerId::new("c1"),
        connection,
    };
    f.dispatcher.send_message(leave(1)).expect("sent");
    let orphaned = observe(&f.dispatcher, DispatcherMsg::Observe).await;
    assert_eq!(orphaned.connections, vec![]);
    assert_eq!(orphaned.orphaned.len(), 1);
    let _back = connect(&f.dispatcher, "r1", 2);
    assert_eq!(
        observe(&f.dispatcher, DispatcherMsg::Observe).await,
        holding("r1", Some("j1")),
        "the returning connection holds its job"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    execution
        .expect_none_within(Duration::from_millis(100))
        .await;

    // Gone for good: after the grace the execution hears that the runner is lost.
    f.dispatcher.send_message(leave(2)).expect("sent");
    let lost = execution
        .expect(Duration::from_secs(10), |seen| match seen {
            Seen::RunnerLost { job_id } => Some(job_id),
            _ => None,
        })
        .await;
    assert_eq!(lost, "j1");
    assert_eq!(
        observe(&f.dispatcher, DispatcherMsg::Observe).await,
        DispatcherSnapshot::default()
    );
    f.probes.finish().await;
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn a_stopped_dispatcher_leaves_no_tick_behind() {
    let mut probes = ProbeContext::start("a", Arc::new(PermissiveEngine)).await;
    let before = alive_tasks();
    let dispatcher = probes
        .spawn("dispatcher", Dispatcher, probes.ctx.clone())
        .await;
    dispatcher
        .stop_and_wait(Some("test".into()), Some(WAIT))
        .await
        .expect("stopped");
    // Time stands still while this task keeps yielding: a tick that outlived the dispatcher
    // would still be sleeping, not yet failing to send.
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        alive_tasks(),
        before,
        "the dispatcher and all its timers are gone"
    );
    probes.finish().await;
}
