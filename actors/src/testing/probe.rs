//! Probes: actors standing in for a neighbour of the actor under test. A probe records every
//! message it receives, in order, and can answer RPCs — from a closure, from a script of one
//! step per message, or not at all (a neighbour that never answers).
//!
//! A probe records what its handler returns for each message (`R`). The plain probe records the
//! messages themselves; a probe that answers RPCs consumes the reply port, so its handler
//! returns a record of its own choosing (often the message's fields, or a test's own enum).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;

type Step<M, R> = Box<dyn FnOnce(M) -> R + Send>;
type Fallback<M, R> = Box<dyn FnMut(M) -> R + Send>;

/// What a probe does with each message: the next script step, else the fallback.
pub struct Script<M, R> {
    steps: VecDeque<Step<M, R>>,
    otherwise: Fallback<M, R>,
}

impl<M, R> Script<M, R> {
    /// A script that hands every message to `otherwise`.
    pub fn new(otherwise: impl FnMut(M) -> R + Send + 'static) -> Self {
        Self {
            steps: VecDeque::new(),
            otherwise: Box::new(otherwise),
        }
    }

    /// Adds a step that handles the next message not handled by an earlier step.
    #[must_use]
    pub fn then(mut self, step: impl FnOnce(M) -> R + Send + 'static) -> Self {
        self.steps.push_back(Box::new(step));
        self
    }

    fn handle(&mut self, message: M) -> R {
        match self.steps.pop_front() {
            Some(step) => step(message),
            None => (self.otherwise)(message),
        }
    }
}

/// Keeps whatever a probe must not drop — typically the reply port of an RPC it will never
/// answer, so the caller sees a timeout (a neighbour that hangs) rather than an error (a
/// neighbour that died). Cloned into a probe's handler; everything kept is dropped with the
/// last clone.
#[derive(Clone, Default)]
pub struct Unanswered(Arc<Mutex<Vec<Box<dyn Any + Send>>>>);

impl Unanswered {
    /// Keeps `value` (a reply port, usually) alive without answering it.
    pub fn keep<T: Send + 'static>(&self, value: T) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(value));
    }

    /// Returns how many values are kept.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Returns whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct ProbeActor<M, R>(std::marker::PhantomData<fn() -> (M, R)>);

struct ProbeState<M, R> {
    script: Script<M, R>,
    log: mpsc::UnboundedSender<R>,
}

impl<M: ractor::Message, R: Send + 'static> Actor for ProbeActor<M, R> {
    type Msg = M;
    type State = ProbeState<M, R>;
    type Arguments = ProbeState<M, R>;

    async fn pre_start(
        &self,
        _myself: ActorRef<M>,
        state: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<M>,
        message: M,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let record = state.script.handle(message);
        let _ = state.log.send(record);
        Ok(())
    }
}

/// A running probe and the log of what it received. Dropping it stops the probe.
pub struct Probe<M: ractor::Message, R: Send + 'static = M> {
    /// The probe, to register where the neighbour would be.
    pub actor: ActorRef<M>,
    log: mpsc::UnboundedReceiver<R>,
}

/// The earlier name of [`Probe`].
pub type ProbeHandle<M> = Probe<M, M>;

impl<M: ractor::Message> Probe<M, M> {
    /// Starts a probe that records every message as it is and answers nothing (a reply port
    /// in a recorded message stays alive until the record is taken and dropped).
    pub async fn start() -> Self {
        Self::scripted(Script::new(|message| message)).await
    }
}

impl<M: ractor::Message, R: Send + 'static> Probe<M, R> {
    /// Starts a probe that hands every message to `answer` and records what it returns.
    pub async fn answering(answer: impl FnMut(M) -> R + Send + 'static) -> Self {
        Self::scripted(Script::new(answer)).await
    }

    /// Starts a probe that follows `script`.
    pub async fn scripted(script: Script<M, R>) -> Self {
        let (log, received) = mpsc::unbounded_channel();
        let state = ProbeState { script, log };
        match Actor::spawn(None, ProbeActor(std::marker::PhantomData), state).await {
            Ok((actor, _)) => Self {
                actor,
                log: received,
            },
            Err(error) => panic!("probe did not start: {error}"),
        }
    }

    /// Waits for the next record and returns what `accept` makes of it; panics if nothing
    /// arrives within `timeout` or if the next record is not accepted (messages are checked
    /// in the order they arrived).
    pub async fn expect<T>(&mut self, timeout: Duration, accept: impl FnOnce(R) -> Option<T>) -> T {
        match tokio::time::timeout(timeout, self.log.recv()).await {
            Ok(Some(record)) => match accept(record) {
                Some(value) => value,
                None => panic!("probe: the next message is not the one expected"),
            },
            Ok(None) | Err(_) => panic!("probe: no message within {timeout:?}"),
        }
    }

    /// Waits for the first record `accept` takes, skipping others; panics after `timeout`.
    pub async fn expect_msg<T>(
        &mut self,
        timeout: Duration,
        mut accept: impl FnMut(R) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.log.recv()).await {
                Ok(Some(record)) => {
                    if let Some(value) = accept(record) {
                        return value;
                    }
                }
                Ok(None) | Err(_) => {
                    panic!("probe: expected message not received within {timeout:?}")
                }
            }
        }
    }

    /// Asserts that no message arrives within `wait`.
    pub async fn expect_none_within(&mut self, wait: Duration) {
        if let Ok(Some(_)) = tokio::time::timeout(wait, self.log.recv()).await {
            panic!("probe: unexpected message within {wait:?}");
        }
    }

    /// The earlier name of [`expect_none_within`](Self::expect_none_within).
    pub async fn expect_no_msg(&mut self, wait: Duration) {
        self.expect_none_within(wait).await;
    }

    /// Returns every record received so far and not yet taken, in order.
    pub fn drain(&mut self) -> Vec<R> {
        let mut records = Vec::new();
        while let Ok(record) = self.log.try_recv() {
            records.push(record);
        }
        records
    }
}

impl<M: ractor::Message, R: Send + 'static> Drop for Probe<M, R> {
    fn drop(&mut self) {
        self.actor.stop(Some("probe dropped".into()));
    }
}
