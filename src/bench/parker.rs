//! The agent of the `blocked` and `restart` scenarios: consumers on one agent id that, for each
//! `execution.assigned`, either park the execution (`wait` for the bench's resume signal) or
//! complete it at once, and complete a parked execution when its `signal.received` arrives.
//! Requests to the kernel are bounded by a semaphore, so a burst of 100 000 assignments does
//! not become 100 000 connections.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::RESUME_SIGNAL;
use super::http::{Assigned, ExecutionRef, Http, Intent, StepData};
use super::latency::Latency;
use super::report::Errors;

/// Agent requests in flight at most, across the parker's consumers.
const REQUESTS_IN_FLIGHT: usize = 64;
/// Pause before reconnecting a dropped stream.
const RECONNECT_DELAY: Duration = Duration::from_millis(200);

/// What the parker does with an assigned execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnAssign {
    /// Sends `wait` for the resume signal.
    Park,
    /// Sends `complete`.
    Complete,
}

/// A request an agent push calls for.
enum Job {
    /// `wait` for the resume signal.
    Park(String),
    /// `complete`.
    Complete(String),
}

/// Sessions of the executions assigned, by execution id (kept across a kernel restart).
pub type Sessions = Arc<Mutex<HashMap<String, String>>>;

/// One agent id's consumers and what they did.
pub struct Parker {
    http: Http,
    agent_id: String,
    on_assign: OnAssign,
    sessions: Sessions,
    completing: Mutex<HashSet<String>>,
    requests: Semaphore,
    stop: CancellationToken,
    connected: Semaphore,
    /// Executions parked (`wait` accepted).
    pub parked: AtomicU64,
    /// Executions completed.
    pub completed: AtomicU64,
    /// `wait` intents, request to answer.
    pub wait_latency: Latency,
    /// `complete` intents, request to answer.
    pub complete_latency: Latency,
    /// Failed requests.
    pub errors: Arc<Errors>,
}

impl Parker {
    /// Returns a parker for `agent_id`, using `sessions` (fresh, or kept from an earlier one).
    pub fn new(
        http: Http,
        agent_id: String,
        on_assign: OnAssign,
        sessions: Sessions,
        errors: Arc<Errors>,
    ) -> Arc<Self> {
        Arc::new(Self {
            http,
            agent_id,
            on_assign,
            sessions,
            completing: Mutex::new(HashSet::new()),
            requests: Semaphore::new(REQUESTS_IN_FLIGHT),
            stop: CancellationToken::new(),
            connected: Semaphore::new(0),
            parked: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            wait_latency: Latency::new(),
            complete_latency: Latency::new(),
            errors,
        })
    }

    /// Returns the agent id.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// Returns the sessions map, to hand to a later parker of the same agent.
    pub fn sessions(&self) -> Sessions {
        self.sessions.clone()
    }

    /// Connects `consumers` consumers (`<agent>-<i>`) and waits until all are connected.
    pub async fn connect(
        self: &Arc<Self>,
        consumers: usize,
        within: Duration,
    ) -> Result<(), String> {
        for index in 0..consumers {
            tokio::spawn(self.clone().consume(format!("{}-{index}", self.agent_id)));
        }
        let all = u32::try_from(consumers).unwrap_or(u32::MAX);
        match tokio::time::timeout(within, self.connected.acquire_many(all)).await {
            Ok(Ok(permits)) => {
                permits.forget();
                Ok(())
            }
            _ => Err(format!(
                "agent {} did not connect {consumers} consumers within {within:?}: {}",
                self.agent_id,
                self.errors.first().unwrap_or_default()
            )),
        }
    }

    /// Closes the consumers (their handlers in flight stop too).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until `counter` reaches `target` or `within` passes; returns whether it did.
    pub async fn wait_for(counter: &AtomicU64, target: u64, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while counter.load(Ordering::Relaxed) < target {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Keeps one consumer connected until stopped.
    async fn consume(self: Arc<Self>, consumer_id: String) {
        let mut first = true;
        while !self.stop.is_cancelled() {
            let opened = tokio::select! {
                opened = self.http.agent_stream(&self.agent_id, &consumer_id) => opened,
                () = self.stop.cancelled() => return,
            };
            let mut stream = match opened {
                Ok(stream) => stream,
                Err(error) => {
                    self.errors.record(format!("{consumer_id}: {error}"));
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
            };
            if first {
                self.connected.add_permits(1);
                first = false;
            }
            loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    () = self.stop.cancelled() => return,
                };
                match event {
                    Some(Ok(event)) => self.dispatch(&event.event, &event.data),
                    Some(Err(error)) => {
                        self.errors.record(format!("{consumer_id}: {error}"));
                        break;
                    }
                    None => break,
                }
            }
            tokio::time::sleep(RECONNECT_DELAY).await;
        }
    }

    /// Handles one push.
    fn dispatch(self: &Arc<Self>, event: &str, data: &str) {
        match event {
            "execution.assigned" => match serde_json::from_str::<Assigned>(data) {
                Ok(assigned) => {
                    if let Ok(mut sessions) = self.sessions.lock() {
                        sessions.insert(assigned.execution_id.clone(), assigned.session_id);
                    }
                    self.spawn(match self.on_assign {
                        OnAssign::Park => Job::Park(assigned.execution_id),
                        OnAssign::Complete => Job::Complete(assigned.execution_id),
                    });
                }
                Err(error) => self
                    .errors
                    .record(format!("bad execution.assigned: {error}")),
            },
            "signal.received" => match serde_json::from_str::<ExecutionRef>(data) {
                Ok(signal) => {
                    self.spawn(Job::Complete(signal.execution_id));
                }
                Err(error) => self.errors.record(format!("bad signal.received: {error}")),
            },
            _ => {}
        }
    }

    /// Runs `job` once a request slot is free, unless the parker stops first.
    fn spawn(self: &Arc<Self>, job: Job) {
        let parker = self.clone();
        tokio::spawn(async move {
            let stop = parker.stop.clone();
            tokio::select! {
                () = parker.run(job) => {}
                () = stop.cancelled() => {}
            }
        });
    }

    /// Runs one job within the bound on requests in flight.
    async fn run(&self, job: Job) {
        let Ok(_permit) = self.requests.acquire().await else {
            return;
        };
        match job {
            Job::Park(execution_id) => self.park(&execution_id).await,
            Job::Complete(execution_id) => self.complete(&execution_id).await,
        }
    }

    /// Returns the session of an execution this parker was assigned.
    fn session(&self, execution_id: &str) -> Option<String> {
        self.sessions
            .lock()
            .ok()
            .and_then(|sessions| sessions.get(execution_id).cloned())
    }

    /// Sends `wait` for the resume signal.
    async fn park(&self, execution_id: &str) {
        let Some(session_id) = self.session(execution_id) else {
            return;
        };
        let started = Instant::now();
        let intent = Intent::Wait {
            signal_type: RESUME_SIGNAL,
        };
        match self.http.intent(execution_id, &session_id, intent).await {
            Ok(_) => {
                self.wait_latency.record(started.elapsed());
                self.parked.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => self.errors.record(format!("wait {execution_id}: {error}")),
        }
    }

    /// Sends `complete`, once per execution.
    async fn complete(&self, execution_id: &str) {
        let first = self
            .completing
            .lock()
            .is_ok_and(|mut completing| completing.insert(execution_id.to_owned()));
        if !first {
            return;
        }
        let Some(session_id) = self.session(execution_id) else {
            self.errors
                .record(format!("complete {execution_id}: no session known"));
            return;
        };
        let started = Instant::now();
        let intent = Intent::Complete {
            output: StepData { index: 0 },
        };
        match self.http.intent(execution_id, &session_id, intent).await {
            Ok(_) => {
                self.complete_latency.record(started.elapsed());
                self.completed.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => self
                .errors
                .record(format!("complete {execution_id}: {error}")),
        }
    }
}
