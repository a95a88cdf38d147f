//! Synchronous table tests of the dispatcher's pure core: each case applies inputs in order
//! and compares the effects of the last one and the state after it.

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::dispatch::{ConnectionKey, Dispatch, DispatchEffect, DispatchInput, DispatcherSnapshot};
use crate::execution::JobSpec;
use crate::ids::{ConsumerId, JobId, RunnerId, StepId, ToolId};
use crate::time::Timestamp;

fn at(second: u32) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second)
        .single()
        .unwrap_or_default()
}

fn key(runner: &str, consumer: &str) -> ConnectionKey {
    (RunnerId::new(runner), ConsumerId::new(consumer))
}

fn job(id: &str, step: &str, tool: &str) -> JobSpec {
    JobSpec {
        job_id: id.into(),
        execution_id: "e1".into(),
        step_id: StepId::new(step),
        attempt: 1,
        tool_id: tool.into(),
        arguments: json!({}),
        deadline: at(59),
        not_before: None,
        traceparent: None,
        idempotency_key: None,
    }
}

fn later(mut job: JobSpec, second: u32) -> JobSpec {
    job.not_before = Some(at(second));
    job
}

fn connect(runner: &str, consumer: &str, connection: u64, tools: &[&str]) -> DispatchInput {
    DispatchInput::Connected {
        key: key(runner, consumer),
        connection,
        capabilities: tools.iter().map(|tool| ToolId::from(*tool)).collect(),
    }
}

fn disconnect(runner: &str, consumer: &str, connection: u64) -> DispatchInput {
    DispatchInput::Disconnected {
        key: key(runner, consumer),
        connection,
    }
}

fn deliver(runner: &str, consumer: &str, job: JobSpec) -> DispatchEffect {
    DispatchEffect::Deliver {
        key: key(runner, consumer),
        job,
    }
}

fn ended(step: &str, reason: Option<&str>) -> DispatchInput {
    DispatchInput::StepEnded {
        step_id: StepId::new(step),
        cancel_reason: reason.map(str::to_owned),
    }
}

fn busy(runner: &str, consumer: &str, job: Option<&str>) -> (ConnectionKey, Option<JobId>) {
    (key(runner, consumer), job.map(JobId::from))
}

struct Case {
    name: &'static str,
    /// Inputs applied first, at second 0; their effects are not checked.
    given: Vec<DispatchInput>,
    /// The input under test and when it happens.
    when: (DispatchInput, u32),
    /// Its effects, in order.
    then: Vec<DispatchEffect>,
    /// The state after it.
    state: DispatcherSnapshot,
}

fn run(case: Case) {
    let mut core = Dispatch::default();
    for input in case.given {
        core.apply(input, at(0));
    }
    let (input, second) = case.when;
    let effects = core.apply(input, at(second));
    assert_eq!(effects, case.then, "{}: effects", case.name);
    assert_eq!(core.snapshot(), case.state, "{}: state", case.name);
}

#[test]
fn every_transition_of_the_dispatch_core() {
    let j1 = job("j1", "s1", "web.search");
    let j2 = job("j2", "s2", "web.search");
    let cases = vec![
        Case {
            name: "a queued job goes to an idle capable connection",
            given: vec![connect("r1", "c1", 1, &["web.search"])],
            when: (DispatchInput::Enqueue(j1.clone()), 0),
            then: vec![deliver("r1", "c1", j1.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "a job nobody can run waits in the queue",
            given: vec![connect("r1", "c1", 1, &["shell.exec"])],
            when: (DispatchInput::Enqueue(j1.clone()), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                queued: vec!["j1".into()],
                ..Default::default()
            },
        },
        Case {
            name: "a queued job goes to a connection that comes later",
            given: vec![DispatchInput::Enqueue(j1.clone())],
            when: (connect("r1", "c1", 1, &["web.search"]), 0),
            then: vec![deliver("r1", "c1", j1.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "a busy connection gets nothing more; the job waits",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (DispatchInput::Enqueue(j2.clone()), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                queued: vec!["j2".into()],
                ..Default::default()
            },
        },
        Case {
            name: "a freed connection takes the next queued job",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
                DispatchInput::Enqueue(j2.clone()),
            ],
            when: (DispatchInput::ConnectionFree(key("r1", "c1")), 0),
            then: vec![deliver("r1", "c1", j2.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j2"))],
                ..Default::default()
            },
        },
        Case {
            name: "jobs of one tool go round-robin over idle connections",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                connect("r2", "c1", 2, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (DispatchInput::Enqueue(j2.clone()), 0),
            then: vec![deliver("r2", "c1", j2.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1")), busy("r2", "c1", Some("j2"))],
                ..Default::default()
            },
        },
        Case {
            name: "a retry job waits for its not_before and asks for a pass then",
            given: vec![connect("r1", "c1", 1, &["web.search"])],
            when: (DispatchInput::Enqueue(later(j1.clone(), 5)), 2),
            then: vec![DispatchEffect::TickAfter(std::time::Duration::from_secs(3))],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                queued: vec!["j1".into()],
                ..Default::default()
            },
        },
        Case {
            name: "a tick at not_before delivers the retry job",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(later(j1.clone(), 5)),
            ],
            when: (DispatchInput::Tick, 5),
            then: vec![deliver("r1", "c1", later(j1.clone(), 5))],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "a job already known is not queued twice",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (DispatchInput::Enqueue(j1.clone()), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "a recovered job is held for the runner grace, not delivered",
            given: vec![connect("r1", "c1", 1, &["web.search"])],
            when: (DispatchInput::Recovered(j1.clone()), 0),
            then: vec![DispatchEffect::ArmRelease {
                job_id: "j1".into(),
            }],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                held: vec!["j1".into()],
                ..Default::default()
            },
        },
        Case {
            name: "a released hold queues the job and delivers it",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Recovered(j1.clone()),
            ],
            when: (
                DispatchInput::ReleaseRecovered {
                    job_id: "j1".into(),
                },
                0,
            ),
            then: vec![deliver("r1", "c1", j1.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "a released at-most-once job is reported lost, not queued or delivered",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::RecoveredAtMostOnce(j1.clone()),
            ],
            when: (
                DispatchInput::ReleaseRecovered {
                    job_id: "j1".into(),
                },
                0,
            ),
            then: vec![DispatchEffect::RunnerLost(j1.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                ..Default::default()
            },
        },
        Case {
            name: "an at-most-once job whose step ended in its hold is not reported lost",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::RecoveredAtMostOnce(j1.clone()),
                ended("s1", None),
            ],
            when: (
                DispatchInput::ReleaseRecovered {
                    job_id: "j1".into(),
                },
                0,
            ),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                ..Default::default()
            },
        },
        Case {
            name: "a release for a job whose step ended meanwhile does nothing",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Recovered(j1.clone()),
                ended("s1", None),
            ],
            when: (
                DispatchInput::ReleaseRecovered {
                    job_id: "j1".into(),
                },
                0,
            ),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                ..Default::default()
            },
        },
        Case {
            name: "a runner leaving with a job stops its actor and starts its grace",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (disconnect("r1", "c1", 1), 0),
            then: vec![
                DispatchEffect::StopRunner(key("r1", "c1")),
                DispatchEffect::ArmRunnerGrace {
                    key: key("r1", "c1"),
                    generation: 1,
                },
            ],
            state: DispatcherSnapshot {
                orphaned: vec![(key("r1", "c1"), "j1".into())],
                ..Default::default()
            },
        },
        Case {
            name: "a late disconnect of a replaced connection is ignored",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                connect("r1", "c1", 2, &["web.search"]),
            ],
            when: (disconnect("r1", "c1", 1), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                ..Default::default()
            },
        },
        Case {
            name: "a runner back within its grace holds its job again",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
                disconnect("r1", "c1", 1),
                DispatchInput::Enqueue(j2.clone()),
            ],
            when: (connect("r1", "c1", 2, &["web.search"]), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                queued: vec!["j2".into()],
                ..Default::default()
            },
        },
        Case {
            name: "a replacing connection keeps the job of the one it replaces",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (connect("r1", "c1", 2, &["web.search"]), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "the grace ends: the job is reported lost",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
                disconnect("r1", "c1", 1),
            ],
            when: (
                DispatchInput::GraceExpired {
                    key: key("r1", "c1"),
                    generation: 1,
                },
                0,
            ),
            then: vec![DispatchEffect::RunnerLost(j1.clone())],
            state: DispatcherSnapshot::default(),
        },
        Case {
            name: "a grace timer of an older generation does nothing",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
                disconnect("r1", "c1", 1),
                connect("r1", "c1", 2, &["web.search"]),
                disconnect("r1", "c1", 2),
            ],
            when: (
                DispatchInput::GraceExpired {
                    key: key("r1", "c1"),
                    generation: 1,
                },
                0,
            ),
            then: vec![],
            state: DispatcherSnapshot {
                orphaned: vec![(key("r1", "c1"), "j1".into())],
                ..Default::default()
            },
        },
        Case {
            name: "a cancelled step tells its runner and frees it for the next job",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
                DispatchInput::Enqueue(j2.clone()),
            ],
            when: (ended("s1", Some("execution cancelled")), 0),
            then: vec![
                DispatchEffect::Cancel {
                    key: key("r1", "c1"),
                    job: j1.clone(),
                    reason: "execution cancelled".into(),
                },
                deliver("r1", "c1", j2.clone()),
            ],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j2"))],
                ..Default::default()
            },
        },
        Case {
            name: "a step ended by its result frees its holder without a notice",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (ended("s1", None), 0),
            then: vec![],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", None)],
                ..Default::default()
            },
        },
        Case {
            name: "an ended step's queued, held and orphaned jobs are dropped",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
                disconnect("r1", "c1", 1),
                DispatchInput::Enqueue(job("j3", "s1", "other")),
                DispatchInput::Recovered(job("j4", "s1", "other")),
            ],
            when: (ended("s1", Some("cancelled")), 0),
            then: vec![],
            state: DispatcherSnapshot::default(),
        },
        Case {
            name: "new capabilities let a waiting job go",
            given: vec![
                connect("r1", "c1", 1, &["shell.exec"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (
                DispatchInput::SetCapabilities {
                    runner_id: RunnerId::new("r1"),
                    tools: vec!["web.search".into()],
                },
                0,
            ),
            then: vec![deliver("r1", "c1", j1.clone())],
            state: DispatcherSnapshot {
                connections: vec![busy("r1", "c1", Some("j1"))],
                ..Default::default()
            },
        },
        Case {
            name: "a failed runner actor drops its connection; its job is kept for the grace",
            given: vec![
                connect("r1", "c1", 1, &["web.search"]),
                DispatchInput::Enqueue(j1.clone()),
            ],
            when: (DispatchInput::RunnerFailed(key("r1", "c1")), 0),
            then: vec![DispatchEffect::ArmRunnerGrace {
                key: key("r1", "c1"),
                generation: 1,
            }],
            state: DispatcherSnapshot {
                orphaned: vec![(key("r1", "c1"), "j1".into())],
                ..Default::default()
            },
        },
        Case {
            name: "a failed idle runner actor only drops its connection",
            given: vec![connect("r1", "c1", 1, &["web.search"])],
            when: (DispatchInput::RunnerFailed(key("r1", "c1")), 0),
            then: vec![],
            state: DispatcherSnapshot::default(),
        },
    ];
    for case in cases {
        run(case);
    }
}

#[test]
fn the_holder_check_names_who_may_report() {
    use super::holders::{JobReport, decide};
    let mut core = Dispatch::default();
    core.apply(connect("r1", "c1", 1, &["web.search"]), at(0));
    core.apply(DispatchInput::Enqueue(job("j1", "s1", "web.search")), at(0));
    core.apply(DispatchInput::Enqueue(job("j2", "s2", "web.search")), at(0));
    let report = |runner: &str, consumer: Option<&str>, step: &str, job: Option<&str>| JobReport {
        runner_id: runner.into(),
        consumer_id: consumer.map(ConsumerId::from),
        execution_id: "e1".into(),
        step_id: StepId::new(step),
        job_id: job.map(JobId::from),
    };
    assert_eq!(
        decide(&core, &report("r1", Some("c1"), "s1", Some("j1"))),
        Ok(())
    );
    assert_eq!(decide(&core, &report("r1", None, "s1", None)), Ok(()));
    assert!(decide(&core, &report("r2", Some("c1"), "s1", Some("j1"))).is_err());
    assert!(decide(&core, &report("r1", Some("c2"), "s1", Some("j1"))).is_err());
    assert!(
        decide(&core, &report("r1", Some("c1"), "s2", Some("j2"))).is_err(),
        "a queued job is held by nobody"
    );
    assert!(
        decide(&core, &report("r1", Some("c1"), "s1", Some("j9"))).is_err(),
        "not the step's current job"
    );
    assert_eq!(
        decide(&core, &report("r1", Some("c1"), "s9", Some("j9"))),
        Ok(()),
        "unknown to the dispatcher: left to the execution"
    );
}
