//! `StoreWriter`: the one actor that writes to the store. Every execution actor sends its
//! commits here and waits for the answer; whatever is queued while a transaction runs goes into
//! the next one (group commit), so throughput follows the batch size, not the fsync rate.

use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::broadcast;

use crate::error::StoreError;
use crate::kernel::CommitNotice;
use crate::metrics::Metrics;
use crate::store::{Commit, Store};

mod messages;
pub use messages::StoreWriterMsg;

/// Dependencies of the store writer.
pub struct StoreWriterArgs {
    /// Storage.
    pub store: Arc<dyn Store>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Where commit notices go.
    pub commits: broadcast::Sender<CommitNotice>,
    /// Most commits per transaction.
    pub max_batch: usize,
    /// Whether traces are exported: each transaction is then a `store commit` span linked to
    /// the `commit` spans of its callers (docs/tracing.md).
    pub traced: bool,
}

/// A commit, the caller waiting for it and the caller's span (traces on only).
type Waiting = (
    Box<Commit>,
    RpcReplyPort<Result<(), StoreError>>,
    tracing::Span,
);

/// A commit of the transaction in flight, reduced to what is left to do once it is durable:
/// the notice to broadcast and the caller to answer.
type Flushing = (CommitNotice, RpcReplyPort<Result<(), StoreError>>);

/// State of the store writer.
pub struct StoreWriterState {
    args: StoreWriterArgs,
    queued: Vec<Waiting>,
    in_flight: Vec<Flushing>,
}

/// The group-committing store writer.
pub struct StoreWriter;

impl Actor for StoreWriter {
    type Msg = StoreWriterMsg;
    type State = StoreWriterState;
    type Arguments = StoreWriterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: StoreWriterArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(StoreWriterState {
            args,
            queued: Vec::new(),
            in_flight: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            StoreWriterMsg::Append(commit, reply) => {
                // ractor runs the handler in the sender's span: the caller's `commit` span.
                let caller = if state.args.traced {
                    tracing::Span::current()
                } else {
                    tracing::Span::none()
                };
                state.queued.push((commit, reply, caller));
                if state.in_flight.is_empty() {
                    start_flush(&myself, state);
                }
            }
            StoreWriterMsg::Flushed(results, latency) => {
                let done = std::mem::take(&mut state.in_flight);
                state.args.metrics.commit_wait(latency);
                state.args.metrics.commit_transaction(done.len());
                for ((notice, reply), result) in done.into_iter().zip(results) {
                    if result.is_ok() {
                        // No receiver is fine: nobody is streaming right now.
                        let _ = state.args.commits.send(notice);
                    }
                    let _ = reply.send(result);
                }
                if !state.queued.is_empty() {
                    start_flush(&myself, state);
                }
            }
        }
        Ok(())
    }
}

/// Hands the oldest queued commits (at most `max_batch`) to the store as one group. The
/// commits move into the group; the writer keeps their callers and notices.
fn start_flush(myself: &ActorRef<StoreWriterMsg>, state: &mut StoreWriterState) {
    let take = state.queued.len().min(state.args.max_batch.max(1));
    let mut group = Vec::with_capacity(take);
    state.in_flight.reserve(take);
    let span = if state.args.traced {
        let events: usize = state.queued[..take]
            .iter()
            .map(|(commit, ..)| commit.events.len())
            .sum();
        tracing::info_span!(
            target: crate::trace::TARGET,
            parent: None,
            "store commit",
            batch.size = take,
            batch.events = events,
        )
    } else {
        tracing::Span::none()
    };
    for (commit, reply, caller) in state.queued.drain(..take) {
        span.follows_from(caller.id());
        let notice = CommitNotice {
            execution_id: commit.execution.id.clone(),
            last_sequence: commit.execution.last_sequence,
        };
        state.in_flight.push((notice, reply));
        group.push(*commit);
    }
    let store = state.args.store.clone();
    let myself = myself.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let expected = group.len();
        let mut results = tracing::Instrument::instrument(store.commit_group(group), span).await;
        // A store answering the wrong number of results must not leave a caller unanswered.
        results.resize_with(expected, || {
            Err(StoreError::Internal(
                "the store returned no result for this commit".to_owned(),
            ))
        });
        let _ = myself.send_message(StoreWriterMsg::Flushed(results, started.elapsed()));
    });
}
