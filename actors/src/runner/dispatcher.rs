//! `Dispatcher`: matches queued remote jobs with idle runner connections advertising the tool,
//! round-robin per tool. It also supervises runner actors (temporary: a failed one is dropped
//! and its job waits for its deadline or the runner's return). It never calls another actor:
//! claims are made by the runner actors, so no dispatch pass can deadlock an execution.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent as RactorEvent};
use tokio::sync::mpsc;

use super::holders::{self, JobReport};
use super::runner_actor::{RunnerActor, RunnerArgs, RunnerMsg};
use crate::execution::JobSpec;
use crate::ids::StepId;
use crate::kernel::context::Ctx;
use crate::push::Push;
use crate::supervision::{self, ActorKind, SupervisionEvent};

/// Messages of the dispatcher.
pub enum DispatcherMsg {
    /// A runner connection opened (replacing one with the same ids).
    RunnerConnected {
        /// Runner id.
        runner_id: String,
        /// Consumer id.
        consumer_id: String,
        /// Connection number.
        connection: u64,
        /// Tool ids it offers.
        capabilities: Vec<String>,
        /// Its stream.
        sender: mpsc::Sender<Push>,
    },
    /// A runner connection closed.
    RunnerDisconnected {
        /// Runner id.
        runner_id: String,
        /// Consumer id.
        consumer_id: String,
        /// Connection number.
        connection: u64,
    },
    /// Replaces the capabilities of every connection of a runner.
    SetCapabilities {
        /// Runner id.
        runner_id: String,
        /// Tool ids.
        tools: Vec<String>,
    },
    /// Queues a job.
    Enqueue(JobSpec),
    /// A job that was in a runner's hands when the kernel stopped (startup recovery): held for
    /// `runner_grace`, so that a runner still working on it can post its result, then queued.
    Recovered(JobSpec),
    /// The hold of a recovered job ended (sent to itself).
    ReleaseRecovered {
        /// Job id.
        job_id: String,
    },
    /// A connection is idle again (result received, or a job it was handed was stale).
    ConnectionFree {
        /// Runner id.
        runner_id: String,
        /// Consumer id.
        consumer_id: String,
    },
    /// A remote step ended: drop its queued jobs, free its runner, notify it if cancelled.
    StepEnded {
        /// Step id.
        step_id: StepId,
        /// Why the runner should stop, if not by its own result.
        cancel_reason: Option<String>,
    },
    /// The grace of a runner that left holding a job ended (sent to itself).
    RunnerGraceExpired {
        /// Runner id.
        runner_id: String,
        /// Consumer id.
        consumer_id: String,
        /// Orphan generation the timer was armed for.
        generation: u64,
    },
    /// Periodic pass for jobs whose `not_before` has come.
    Tick,
    /// Is a runner's report (result, `started`) from the connection holding the job?
    CheckReport {
        /// The report.
        report: JobReport,
        /// Answer: `Err(reason)` when another connection holds the job.
        reply: RpcReplyPort<Result<(), String>>,
    },
}

pub(super) struct Connection {
    connection: u64,
    capabilities: HashSet<String>,
    actor: ActorRef<RunnerMsg>,
    /// The job this connection holds (set before the job is written to its stream).
    pub(super) busy: Option<JobSpec>,
}

/// State of the dispatcher.
pub struct DispatcherState {
    ctx: Arc<Ctx>,
    /// Open connections by `(runner_id, consumer_id)`.
    pub(super) connections: BTreeMap<(String, String), Connection>,
    pub(super) queue: VecDeque<JobSpec>,
    rotation: HashMap<String, usize>,
    /// Jobs of connections that left, kept for the runner grace, by `(runner_id, consumer_id)`.
    pub(super) orphans: HashMap<(String, String), (JobSpec, u64)>,
    generation: u64,
    /// Recovered jobs held for the runner grace, by job id.
    pub(super) held: HashMap<String, JobSpec>,
}

/// The dispatcher actor.
pub struct Dispatcher;

impl Actor for Dispatcher {
    type Msg = DispatcherMsg;
    type State = DispatcherState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        ctx: Arc<Ctx>,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(Duration::from_secs(1), || DispatcherMsg::Tick);
        Ok(DispatcherState {
            ctx,
            connections: BTreeMap::new(),
            queue: VecDeque::new(),
            rotation: HashMap::new(),
            orphans: HashMap::new(),
            generation: 0,
            held: HashMap::new(),
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself
            .stop_children_and_wait(
                Some("kernel shutdown".into()),
                Some(state.ctx.config.shutdown_timeout),
            )
            .await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            DispatcherMsg::RunnerConnected {
                runner_id,
                consumer_id,
                connection,
                capabilities,
                sender,
            } => {
                let args = RunnerArgs {
                    ctx: state.ctx.clone(),
                    runner_id: runner_id.clone(),
                    consumer_id: consumer_id.clone(),
                    connection,
                    sender,
                };
                let (actor, _) =
                    Actor::spawn_linked(None, RunnerActor, args, myself.get_cell()).await?;
                supervision::report(
                    &state.ctx.metrics,
                    ActorKind::Runner,
                    Some(&runner_id),
                    &SupervisionEvent::Started,
                );
                let key = (runner_id, consumer_id);
                // A runner that comes back keeps working on its job and posts the result
                // itself: the new connection holds the job the old one had.
                let kept = state.orphans.remove(&key).map(|(job, _)| job);
                let mut entry = Connection {
                    connection,
                    capabilities: capabilities.into_iter().collect(),
                    actor,
                    busy: kept,
                };
                if let Some(old) = state.connections.remove(&key) {
                    old.actor.stop(Some("replaced by a new connection".into()));
                    entry.busy = entry.busy.or(old.busy);
                }
                state.connections.insert(key, entry);
            }
            DispatcherMsg::RunnerDisconnected {
                runner_id,
                consumer_id,
                connection,
            } => {
                let key = (runner_id, consumer_id);
                if state
                    .connections
                    .get(&key)
                    .is_some_and(|entry| entry.connection == connection)
                    && let Some(entry) = state.connections.remove(&key)
                {
                    entry.actor.stop(Some("runner disconnected".into()));
                    if let Some(job) = entry.busy {
                        orphan(&myself, state, key, job);
                    }
                }
            }
            DispatcherMsg::SetCapabilities { runner_id, tools } => {
                for ((runner, _), entry) in state.connections.iter_mut() {
                    if runner == &runner_id {
                        entry.capabilities = tools.iter().cloned().collect();
                    }
                }
            }
            // A rebuilt execution (crash restart, passivation) re-announces its jobs: one the
            // dispatcher already holds somewhere must not be delivered twice.
            DispatcherMsg::Enqueue(job) | DispatcherMsg::Recovered(job)
                if knows(state, &job.job_id) => {}
            DispatcherMsg::Enqueue(job) => {
                // A retry job is due at `not_before`: pass again right then, not at the next tick.
                if let Some(delay) = job
                    .not_before
                    .and_then(|at| (at - state.ctx.now()).to_std().ok())
                {
                    myself.send_after(delay, || DispatcherMsg::Tick);
                }
                state.queue.push_back(job);
            }
            DispatcherMsg::Recovered(job) => {
                let job_id = job.job_id.clone();
                myself.send_after(state.ctx.config.runner_grace, move || {
                    DispatcherMsg::ReleaseRecovered { job_id }
                });
                state.held.insert(job.job_id.clone(), job);
            }
            DispatcherMsg::ReleaseRecovered { job_id } => {
                if let Some(job) = state.held.remove(&job_id) {
                    tracing::info!(step.id = %job.step_id, job.id = %job_id, "recovered job re-queued after the runner grace");
                    state.queue.push_back(job);
                }
            }
            DispatcherMsg::ConnectionFree {
                runner_id,
                consumer_id,
            } => {
                if let Some(entry) = state.connections.get_mut(&(runner_id, consumer_id)) {
                    entry.busy = None;
                }
            }
            DispatcherMsg::StepEnded {
                step_id,
                cancel_reason,
            } => step_ended(state, &step_id, cancel_reason.as_deref()),
            DispatcherMsg::RunnerGraceExpired {
                runner_id,
                consumer_id,
                generation,
            } => {
                let key = (runner_id, consumer_id);
                if state
                    .orphans
                    .get(&key)
                    .is_some_and(|(_, armed)| *armed == generation)
                    && let Some((job, _)) = state.orphans.remove(&key)
                {
                    tell_runner_lost(state, job);
                }
            }
            DispatcherMsg::Tick => {}
            DispatcherMsg::CheckReport { report, reply } => {
                let _ = reply.send(holders::decide(state, &report));
                return Ok(());
            }
        }
        dispatch_pass(state);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: RactorEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let RactorEvent::ActorFailed(cell, error) = event {
            let failed = state
                .connections
                .iter()
                .find(|(_, entry)| entry.actor.get_id() == cell.get_id())
                .map(|(key, _)| key.clone());
            if let Some(key) = failed {
                state.connections.remove(&key);
                let event = SupervisionEvent::GaveUp {
                    error: error.to_string(),
                    count: 1,
                };
                supervision::report(&state.ctx.metrics, ActorKind::Runner, Some(&key.0), &event);
            }
        }
        Ok(())
    }
}

fn orphan(
    myself: &ActorRef<DispatcherMsg>,
    state: &mut DispatcherState,
    key: (String, String),
    job: JobSpec,
) {
    state.generation += 1;
    let generation = state.generation;
    tracing::info!(runner.id = %key.0, step.id = %job.step_id, "runner left holding a job, grace started");
    state.orphans.insert(key.clone(), (job, generation));
    let (runner_id, consumer_id) = key;
    myself.send_after(state.ctx.config.runner_grace, move || {
        DispatcherMsg::RunnerGraceExpired {
            runner_id,
            consumer_id,
            generation,
        }
    });
}

/// Returns whether a job is queued, held, in a runner's hands or orphaned.
fn knows(state: &DispatcherState, job_id: &str) -> bool {
    state.queue.iter().any(|job| job.job_id == job_id)
        || state.held.contains_key(job_id)
        || state
            .connections
            .values()
            .any(|entry| entry.busy.as_ref().is_some_and(|job| job.job_id == job_id))
        || state.orphans.values().any(|(job, _)| job.job_id == job_id)
}

fn tell_runner_lost(state: &DispatcherState, job: JobSpec) {
    let execution_id = crate::ids::ExecutionId::from(job.execution_id.as_str());
    if let Some(execution) = state.ctx.execution(&execution_id) {
        let _ = execution.send_message(crate::execution::ExecutionMsg::RunnerLost {
            step_id: job.step_id,
            job_id: job.job_id,
        });
    }
}

fn step_ended(state: &mut DispatcherState, step_id: &StepId, cancel_reason: Option<&str>) {
    state.queue.retain(|job| &job.step_id != step_id);
    state.orphans.retain(|_, (job, _)| &job.step_id != step_id);
    state.held.retain(|_, job| &job.step_id != step_id);
    for entry in state.connections.values_mut() {
        let holds = entry
            .busy
            .as_ref()
            .is_some_and(|job| &job.step_id == step_id);
        if !holds {
            continue;
        }
        if let (Some(job), Some(reason)) = (entry.busy.take(), cancel_reason) {
            let notice =
                Push::job_cancelled(&job.job_id, &job.execution_id, job.step_id.as_str(), reason);
            let _ = entry.actor.send_message(RunnerMsg::Notify(notice));
        }
    }
}

fn dispatch_pass(state: &mut DispatcherState) {
    let now = state.ctx.now();
    let mut index = 0;
    while index < state.queue.len() {
        let job = &state.queue[index];
        if job.not_before.is_some_and(|at| at > now) {
            index += 1;
            continue;
        }
        let candidates: Vec<(String, String)> = state
            .connections
            .iter()
            .filter(|(_, entry)| entry.busy.is_none() && entry.capabilities.contains(&job.tool_id))
            .map(|(key, _)| key.clone())
            .collect();
        if candidates.is_empty() {
            index += 1;
            continue;
        }
        let turn = state.rotation.entry(job.tool_id.clone()).or_default();
        let key = candidates[*turn % candidates.len()].clone();
        *turn = turn.wrapping_add(1);
        let Some(job) = state.queue.remove(index) else {
            break;
        };
        if let Some(entry) = state.connections.get_mut(&key) {
            entry.busy = Some(job.clone());
            let _ = entry.actor.send_message(RunnerMsg::Deliver(job));
        }
    }
}
