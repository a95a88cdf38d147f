//! Snapshots of an actor's observable state, on demand (as quickwit-actors' `observe`): the
//! actor answers an `Observe` message with a copy of what its pure core holds, between two
//! messages, so a test asserts state and not only the messages that came out.

use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};

/// How long an actor gets to answer an observation.
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks `actor` for a snapshot with the message `ask` builds; panics if it does not answer.
///
/// ```ignore
/// let snapshot = observe(&dispatcher, DispatcherMsg::Observe).await;
/// assert_eq!(snapshot.queued, vec![job_id]);
/// ```
pub async fn observe<M, S>(actor: &ActorRef<M>, ask: impl FnOnce(RpcReplyPort<S>) -> M) -> S
where
    M: ractor::Message,
    S: Send + 'static,
{
    match actor.call(ask, Some(OBSERVE_TIMEOUT)).await {
        Ok(ractor::rpc::CallResult::Success(snapshot)) => snapshot,
        Ok(ractor::rpc::CallResult::Timeout) => {
            panic!("observe: the actor did not answer within {OBSERVE_TIMEOUT:?}")
        }
        Ok(ractor::rpc::CallResult::SenderError) | Err(_) => {
            panic!("observe: the actor is not running")
        }
    }
}
