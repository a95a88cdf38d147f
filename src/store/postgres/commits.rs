//! Commits on PostgreSQL (`Store::commit`, `Store::commit_group`): the commits are checked,
//! written on the writer connection by `super::write` within the writer's time bound, and
//! cluster mode is told once something was committed.

use keel_actors::error::StoreError;
use keel_actors::store::Commit;

use super::PostgresStore;

impl PostgresStore {
    /// `Store::commit`: the batch in one transaction, all or nothing.
    pub(super) async fn write_batch(&self, batch: &[Commit]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut pending = Vec::with_capacity(batch.len());
        for (index, checked) in super::write::check(batch).into_iter().enumerate() {
            pending.push((index, checked?));
        }
        let mut checkout = self.writer.checkout().await?;
        let outcome = self
            .writer
            .bounded(super::write::commit_all(
                checkout.connection(),
                batch,
                pending,
                self.fence.as_deref(),
            ))
            .await;
        let outcome = checkout.finish(outcome);
        if outcome.is_ok() {
            self.committed();
        }
        outcome
    }

    /// `Store::commit_group`: the group commit, each commit failing alone.
    pub(super) async fn write_group(&self, group: Vec<Commit>) -> Vec<Result<(), StoreError>> {
        let mut results = Vec::with_capacity(group.len());
        let mut pending = Vec::with_capacity(group.len());
        for (index, checked) in super::write::check(&group).into_iter().enumerate() {
            match checked {
                Ok(previous) => {
                    pending.push((index, previous));
                    results.push(Ok(()));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        if pending.is_empty() {
            return results;
        }
        let outcome = match self.writer.checkout().await {
            Ok(mut checkout) => {
                let outcome = self
                    .writer
                    .bounded(super::write::commit_group(
                        checkout.connection(),
                        &group,
                        &mut results,
                        &mut pending,
                        self.fence.as_deref(),
                    ))
                    .await;
                checkout.finish(outcome)
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {}
            Err(StoreError::Unavailable(reason)) => {
                for (index, _) in pending {
                    results[index] = Err(StoreError::Unavailable(reason.clone()));
                }
            }
            // The statement failed for one of its commits (say a reused event id): each of
            // the commits it did not write is committed alone, so that one fails alone.
            Err(_) => {
                for (index, _) in pending {
                    results[index] = self.write_batch(std::slice::from_ref(&group[index])).await;
                }
            }
        }
        if results.iter().any(Result::is_ok) {
            self.committed();
        }
        results
    }
}
