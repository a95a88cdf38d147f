//! Creations in doubt. A creation whose commit failed may still have been stored: the database
//! applied the `COMMIT` but its answer was lost with the connection, or the call timed out
//! while the commit was still queued. The client got 503 (and may create again), but the stored
//! execution must not stay `pending` forever, unknown to its agent group until the next kernel
//! restart. Once the store answers again, an execution found there is activated, which
//! announces it to its group like any rebuilt pending execution; one found absent twice is
//! forgotten.

use std::sync::Arc;
use std::time::Duration;

use ractor::{ActorRef, ActorStatus};

use super::context::call;
use super::types::KernelError;
use crate::error::StoreError;
use crate::execution::ExecutionSupervisorMsg;
use crate::ids::ExecutionId;
use crate::store::Store;

/// Delay before the first look at the store; it doubles up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(250);
/// Longest delay between two looks.
const MAX_DELAY: Duration = Duration::from_secs(5);
/// Looks before giving up (about five minutes of outage).
const MAX_LOOKS: u32 = 64;
/// Successful reads finding nothing before the creation counts as not stored.
const ABSENT_LOOKS: u32 = 2;

/// Returns whether a failed creation may nevertheless have been stored.
pub(crate) fn in_doubt(error: &KernelError) -> bool {
    matches!(
        error,
        KernelError::Store(StoreError::Unavailable(_)) | KernelError::Timeout(_)
    )
}

/// Looks for execution `id` in the store until the store answers, and activates it when it
/// was stored. Ends early when the kernel stops.
pub(crate) async fn settle_creation(
    store: Arc<dyn Store>,
    executions: ActorRef<ExecutionSupervisorMsg>,
    timeout: Duration,
    id: ExecutionId,
) {
    let mut delay = FIRST_DELAY;
    let mut absent = 0;
    for _ in 0..MAX_LOOKS {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_DELAY);
        if !matches!(executions.get_status(), ActorStatus::Running) {
            return;
        }
        match store.execution(&id).await {
            Ok(Some(_)) => {
                let activate = |reply| ExecutionSupervisorMsg::Activate {
                    id: id.clone(),
                    announce: true,
                    reply,
                };
                if let Ok(Ok(_)) =
                    call(&executions, activate, timeout, "execution supervisor").await
                {
                    tracing::warn!(execution.id = %id, "a creation answered as failed was stored after all; its execution is offered to its agent");
                    return;
                }
            }
            Ok(None) => {
                absent += 1;
                if absent >= ABSENT_LOOKS {
                    return;
                }
            }
            Err(_) => {}
        }
    }
    tracing::warn!(execution.id = %id, "gave up finding out whether a failed creation was stored");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::execution::test_support::{allow_all, next_of, start};
    use crate::ids::{AgentId, ConsumerId};
    use crate::store::ListFilter;

    #[tokio::test(start_paused = true)]
    async fn a_creation_stored_although_its_commit_answer_was_lost_is_offered_to_the_agent() {
        let t = start(allow_all(), |_| {}).await;
        let mut agent = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");

        t.store.lose_commit_answers(true);
        let failed = t
            .kernel
            .create_execution(AgentId::new("a"), json!(1), None)
            .await;
        assert!(
            matches!(failed, Err(ref error) if in_doubt(error)),
            "{failed:?}"
        );
        t.store.lose_commit_answers(false);
        let stored = t
            .store
            .list_executions(&ListFilter {
                limit: 10,
                ..ListFilter::default()
            })
            .await
            .expect("list");
        assert_eq!(stored.len(), 1, "the creation landed");

        let assigned = next_of(&mut agent, "execution.assigned").await;
        assert_eq!(assigned.data["execution_id"], stored[0].id.as_str());
        t.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_creation_that_was_not_stored_is_forgotten() {
        let t = start(allow_all(), |_| {}).await;
        let mut agent = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
            .await
            .expect("connect");
        t.store.fail_commits(true);
        let failed = t
            .kernel
            .create_execution(AgentId::new("a"), json!(1), None)
            .await;
        assert!(
            matches!(failed, Err(ref error) if in_doubt(error)),
            "{failed:?}"
        );
        t.store.fail_commits(false);
        let nothing = tokio::time::timeout(
            Duration::from_secs(2),
            next_of(&mut agent, "execution.assigned"),
        )
        .await;
        assert!(nothing.is_err(), "{nothing:?}");
        let stored = t
            .store
            .list_executions(&ListFilter {
                limit: 10,
                ..ListFilter::default()
            })
            .await
            .expect("list");
        assert!(stored.is_empty(), "{stored:?}");
        t.shutdown().await;
    }
}
