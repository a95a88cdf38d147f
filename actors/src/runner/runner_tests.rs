//! One runner actor alone, with probes in place of the execution it claims jobs from and of
//! the dispatcher it frees itself with: a granted claim is written to the stream, a stale or
//! unanswered claim and a full stream free the connection instead, a notice is relayed.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::{DispatcherMsg, RunnerActor, RunnerArgs, RunnerMsg};
use crate::execution::{ExecutionMsg, JobSpec};
use crate::ids::{ConsumerId, ExecutionId, RunnerId, StepId};
use crate::policy::PermissiveEngine;
use crate::push::Push;
use crate::testing::{Probe, ProbeContext, Unanswered};

const WAIT: Duration = Duration::from_secs(5);

fn job(execution: &ExecutionId) -> JobSpec {
    JobSpec {
        job_id: "j1".into(),
        execution_id: execution.clone(),
        step_id: StepId::new("s1"),
        attempt: 2,
        tool_id: "web.search".into(),
        arguments: json!({"q": "keel"}),
        deadline: crate::time::now() + chrono::Duration::minutes(1),
        not_before: None,
        traceparent: None,
        idempotency_key: None,
    }
}

/// An execution answering claims with `grant` (`None`: keeps them unanswered).
async fn execution(grant: Option<bool>, keep: Unanswered) -> Probe<ExecutionMsg, String> {
    Probe::answering(move |message| match message {
        ExecutionMsg::ClaimJob {
            job,
            runner_id,
            reply,
        } => {
            match grant {
                Some(true) => {
                    let _ = reply.send(Some(job));
                }
                Some(false) => {
                    let _ = reply.send(None);
                }
                None => keep.keep(reply),
            }
            runner_id.to_string()
        }
        _ => String::new(),
    })
    .await
}

struct Fixture {
    probes: ProbeContext,
    runner: ractor::ActorRef<RunnerMsg>,
    stream: mpsc::Receiver<Push>,
    id: ExecutionId,
}

async fn fixture(
    execution: &Probe<ExecutionMsg, String>,
    buffer: usize,
    call_timeout: Duration,
) -> Fixture {
    let mut probes = ProbeContext::start_with("a", Arc::new(PermissiveEngine), |config| {
        config.call_timeout = call_timeout;
    })
    .await;
    let id = ExecutionId::generate();
    probes.register_execution(&id, execution.actor.clone());
    let (sender, stream) = mpsc::channel(buffer);
    let args = RunnerArgs {
        ctx: probes.ctx.clone(),
        runner_id: RunnerId::new("r1"),
        consumer_id: ConsumerId::new("c1"),
        connection: 1,
        sender,
    };
    let runner = probes.spawn("runner", RunnerActor, args).await;
    Fixture {
        probes,
        runner,
        stream,
        id,
    }
}

async fn freed(probes: &mut ProbeContext) {
    probes
        .dispatcher
        .expect_msg(WAIT, |message| match message {
            DispatcherMsg::ConnectionFree {
                runner_id,
                consumer_id,
            } => {
                assert_eq!((runner_id.as_str(), consumer_id.as_str()), ("r1", "c1"));
                Some(())
            }
            _ => None,
        })
        .await;
}

#[tokio::test]
async fn a_granted_claim_is_written_to_the_stream_as_job_assigned() {
    let mut execution = execution(Some(true), Unanswered::default()).await;
    let mut f = fixture(&execution, 4, WAIT).await;
    f.runner
        .send_message(RunnerMsg::Deliver(job(&f.id)))
        .expect("sent");
    assert_eq!(execution.expect(WAIT, Some).await, "r1", "claimed as r1");
    let pushed = tokio::time::timeout(WAIT, f.stream.recv())
        .await
        .expect("in time")
        .expect("a push");
    assert_eq!(pushed.event, "job.assigned");
    assert_eq!(
        (
            &pushed.data["id"],
            &pushed.data["attempt"],
            &pushed.data["step_id"]
        ),
        (&json!("j1"), &json!(2), &json!("s1"))
    );
    assert_eq!(pushed.data["not_before"], "0001-01-01T00:00:00Z");
    f.probes
        .dispatcher
        .expect_none_within(Duration::from_millis(100))
        .await;

    let notice = Push::job_cancelled(&"j1".into(), &f.id, &"s1".into(), "execution cancelled");
    f.runner
        .send_message(RunnerMsg::Notify(notice.clone()))
        .expect("sent");
    let relayed = tokio::time::timeout(WAIT, f.stream.recv())
        .await
        .expect("in time");
    assert_eq!(relayed, Some(notice));
    f.probes.finish().await;
}

#[tokio::test]
async fn a_stale_job_is_not_written_and_the_connection_is_freed() {
    let execution = execution(Some(false), Unanswered::default()).await;
    let mut f = fixture(&execution, 4, WAIT).await;
    f.runner
        .send_message(RunnerMsg::Deliver(job(&f.id)))
        .expect("sent");
    freed(&mut f.probes).await;
    assert!(f.stream.try_recv().is_err(), "nothing written");
    f.probes.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_claim_never_answered_frees_the_connection_after_the_call_timeout() {
    let keep = Unanswered::default();
    let execution = execution(None, keep.clone()).await;
    let mut f = fixture(&execution, 4, Duration::from_secs(2)).await;
    f.runner
        .send_message(RunnerMsg::Deliver(job(&f.id)))
        .expect("sent");
    freed(&mut f.probes).await;
    assert_eq!(keep.len(), 1);
    assert!(f.stream.try_recv().is_err(), "nothing written");
    f.probes.finish().await;
}

#[tokio::test]
async fn a_full_stream_frees_the_connection_instead_of_waiting() {
    let execution = execution(Some(true), Unanswered::default()).await;
    let mut f = fixture(&execution, 1, WAIT).await;
    let filler = Push::job_cancelled(&"j0".into(), &f.id, &"s0".into(), "filler");
    f.runner
        .send_message(RunnerMsg::Notify(filler))
        .expect("sent");
    f.runner
        .send_message(RunnerMsg::Deliver(job(&f.id)))
        .expect("sent");
    freed(&mut f.probes).await;
    let only = f.stream.try_recv().expect("the filler");
    assert_eq!(only.event, "job.cancelled");
    assert!(f.stream.try_recv().is_err(), "the job did not fit");
    f.probes.finish().await;
}
