//! Cluster mode's fence on the write path (migration 0011): a kernel writes an execution only
//! while its partition is still at the epoch the kernel acquired it at, checked in the commit
//! statement itself, so a kernel that has not noticed a takeover (paused, cut off) cannot write
//! after it. Skips (and passes) without `KEEL_TEST_POSTGRES_URL`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_actors::status::ExecutionStatus;
use keel_actors::store::Store;

use super::super::conformance::{at, finish, new_execution};
use super::super::{PartitionFence, StoreError, StoreOptions, partition_of};
use super::cluster::Membership;
use super::{PostgresStore, test_db};

const P: u32 = 4;

/// A fence whose epochs the test sets by hand.
#[derive(Debug, Default)]
struct HandFence(Mutex<HashMap<u32, i64>>);

impl HandFence {
    fn set(&self, partition: u32, epoch: Option<i64>) {
        let mut epochs = self.0.lock().unwrap();
        match epoch {
            Some(epoch) => epochs.insert(partition, epoch),
            None => epochs.remove(&partition),
        };
    }
}

impl PartitionFence for HandFence {
    fn partitions(&self) -> u32 {
        P
    }

    fn epoch(&self, partition: u32) -> Option<i64> {
        self.0.lock().unwrap().get(&partition).copied()
    }
}

fn cluster_options() -> StoreOptions {
    StoreOptions {
        cluster_partitions: Some(P),
        ..StoreOptions::default()
    }
}

async fn join(url: &str, node: &str) -> Membership {
    Membership::join(
        url,
        node,
        &format!("http://{node}"),
        Duration::from_secs(5),
        Duration::from_secs(2),
    )
    .await
    .expect("join")
}

/// A fresh database, a store writing through a hand-set fence, and kernel "a" joined.
async fn fenced_store() -> Option<(
    test_db::TestDatabase,
    Arc<HandFence>,
    PostgresStore,
    Membership,
)> {
    let db = test_db::fresh().await?;
    let fence = Arc::new(HandFence::default());
    let store = PostgresStore::open_fenced(&db.url, &cluster_options(), Some(fence.clone()))
        .await
        .expect("open in cluster mode");
    let a = join(&db.url, "a").await;
    Some((db, fence, store, a))
}

#[tokio::test]
async fn a_write_under_a_superseded_epoch_is_refused_and_changes_nothing() {
    let Some((db, fence, store, a)) = fenced_store().await else {
        return;
    };
    let acquired = a.acquire(&[0, 1, 2, 3]).await.expect("acquire");
    assert_eq!(acquired.len(), 4);
    for (partition, epoch) in &acquired {
        fence.set(*partition, Some(*epoch));
    }

    let created = new_execution("fenced-1", "agent", &[], at(1));
    let row = created.execution.clone();
    let partition = partition_of("fenced-1", P);
    let first_epoch = acquired
        .iter()
        .find(|(id, _)| *id == partition)
        .map(|(_, epoch)| *epoch)
        .expect("partition acquired");
    let results = store.commit_group(vec![created]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (stored_partition, epochs): (Option<i32>, Vec<Option<i64>>) = (
        sqlx::query_scalar("SELECT partition FROM executions WHERE id = 'fenced-1'")
            .fetch_one(store.readers())
            .await
            .expect("partition"),
        sqlx::query_scalar("SELECT epoch FROM events WHERE execution_id = 'fenced-1'")
            .fetch_all(store.readers())
            .await
            .expect("epochs"),
    );
    assert_eq!(stored_partition, Some(partition as i32));
    assert_eq!(epochs, vec![Some(first_epoch)]);

    // Another kernel takes the partition; this kernel has not noticed (its fence still says
    // the old epoch): the database refuses the write.
    a.release(&[partition]).await.expect("release");
    let b = join(&db.url, "b").await;
    let taken = b.acquire(&[partition]).await.expect("b acquires");
    assert_eq!(taken, vec![(partition, first_epoch + 1)]);
    let done = finish(&row, at(2), ExecutionStatus::Completed);
    let results = store.commit_group(vec![done.clone()]).await;
    assert!(
        matches!(&results[0], Err(StoreError::Unavailable(message)) if message.contains("does not hold")),
        "{results:?}"
    );
    // Same through the all-or-nothing path.
    let refused = store.commit(std::slice::from_ref(&done)).await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "{refused:?}"
    );
    let stored = store
        .execution(&row.id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(stored.last_sequence, 1);
    assert_eq!(stored.status, ExecutionStatus::Pending);

    // Once this kernel knows it does not hold the partition, it does not even ask.
    fence.set(partition, None);
    let results = store.commit_group(vec![done.clone()]).await;
    assert!(
        matches!(&results[0], Err(StoreError::Unavailable(_))),
        "{results:?}"
    );

    // Holding the new epoch, the write goes through and its event records that epoch.
    fence.set(partition, Some(first_epoch + 1));
    let results = store.commit_group(vec![done]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let epochs: Vec<Option<i64>> = sqlx::query_scalar(
        "SELECT epoch FROM events WHERE execution_id = 'fenced-1' ORDER BY sequence",
    )
    .fetch_all(store.readers())
    .await
    .expect("epochs");
    assert_eq!(epochs, vec![Some(first_epoch), Some(first_epoch + 1)]);
}

#[tokio::test]
async fn a_fenced_execution_fails_alone_in_its_group() {
    let Some((db, fence, store, a)) = fenced_store().await else {
        return;
    };
    for (partition, epoch) in a.acquire(&[0, 1, 2, 3]).await.expect("acquire") {
        fence.set(partition, Some(epoch));
    }
    // Two executions in different partitions; the first partition's epoch moves on.
    let ids: Vec<String> = (0..64).map(|n| format!("group-{n}")).collect();
    let lost = partition_of(&ids[0], P);
    let other = ids
        .iter()
        .find(|id| partition_of(id, P) != lost)
        .expect("an id in another partition")
        .clone();
    a.release(&[lost]).await.expect("release");
    join(&db.url, "b")
        .await
        .acquire(&[lost])
        .await
        .expect("b acquires");
    let results = store
        .commit_group(vec![
            new_execution(&ids[0], "agent", &[], at(1)),
            new_execution(&other, "agent", &[], at(1)),
        ])
        .await;
    assert!(
        matches!(&results[0], Err(StoreError::Unavailable(_))),
        "{results:?}"
    );
    assert!(results[1].is_ok(), "{results:?}");
    let stored: Vec<String> = sqlx::query_scalar("SELECT id FROM executions")
        .fetch_all(store.readers())
        .await
        .expect("ids");
    assert_eq!(stored, vec![other]);
}

#[tokio::test]
async fn each_event_records_the_epoch_of_its_own_executions_partition() {
    let Some((_db, fence, store, a)) = fenced_store().await else {
        return;
    };
    a.acquire(&[0, 1, 2, 3]).await.expect("acquire");
    // Partition p is taken again p times, so each partition is at its own epoch.
    for partition in 1..P {
        for _ in 0..partition {
            a.release(&[partition]).await.expect("release");
            a.acquire(&[partition]).await.expect("acquire again");
        }
    }
    let epochs: Vec<(i32, i64)> = sqlx::query_as("SELECT id, epoch FROM partitions ORDER BY id")
        .fetch_all(store.readers())
        .await
        .expect("epochs");
    for (partition, epoch) in &epochs {
        fence.set(*partition as u32, Some(*epoch));
    }
    // One execution per partition, created in one group, then one group in which their
    // second events are interleaved with further creations.
    let mut ids: Vec<String> = Vec::new();
    let mut n = 0;
    while ids.len() < P as usize {
        n += 1;
        let id = format!("mixed-{n}");
        if !ids
            .iter()
            .any(|other| partition_of(other, P) == partition_of(&id, P))
        {
            ids.push(id);
        }
    }
    let created: Vec<_> = ids
        .iter()
        .map(|id| new_execution(id, "agent", &[], at(1)))
        .collect();
    let rows: Vec<_> = created
        .iter()
        .map(|commit| commit.execution.clone())
        .collect();
    let results = store.commit_group(created).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut mixed = Vec::new();
    for (row, n) in rows.iter().rev().zip(100..) {
        mixed.push(finish(row, at(2), ExecutionStatus::Completed));
        mixed.push(new_execution(
            &format!("{}-{n}", row.id),
            "agent",
            &[],
            at(2),
        ));
    }
    let results = store.commit_group(mixed).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let recorded: Vec<(String, i64, Option<i64>)> =
        sqlx::query_as("SELECT execution_id, sequence, epoch FROM events ORDER BY position")
            .fetch_all(store.readers())
            .await
            .expect("events");
    assert_eq!(recorded.len(), 3 * P as usize);
    let epoch_of: HashMap<u32, i64> = epochs
        .iter()
        .map(|(partition, epoch)| (*partition as u32, *epoch))
        .collect();
    let distinct: std::collections::HashSet<i64> = epoch_of.values().copied().collect();
    assert_eq!(distinct.len(), P as usize, "{epochs:?}");
    for (execution, sequence, epoch) in &recorded {
        assert_eq!(
            *epoch,
            Some(epoch_of[&partition_of(execution, P)]),
            "event {sequence} of {execution}: {recorded:?}"
        );
    }
}

#[tokio::test]
async fn the_database_computes_the_same_partitions_as_the_kernel() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let store = PostgresStore::open(&db.url, &StoreOptions::default())
        .await
        .expect("open");
    for id in [
        "",
        "a",
        "0192f6e2-7c1e-7d3a-9a55-3f1b2c4d5e6f",
        "exé-ünï",
        "x".repeat(300).as_str(),
    ] {
        for partitions in [1_u32, 7, 64, 4096] {
            let sql: i32 = sqlx::query_scalar("SELECT keel_partition($1, $2)")
                .bind(id)
                .bind(partitions as i32)
                .fetch_one(store.readers())
                .await
                .expect("keel_partition");
            assert_eq!(
                sql as u32,
                partition_of(id, partitions),
                "{id:?} % {partitions}"
            );
        }
    }
}

#[tokio::test]
async fn the_recovery_index_of_partitions_lists_only_their_open_executions() {
    let Some((_db, fence, store, a)) = fenced_store().await else {
        return;
    };
    for (partition, epoch) in a.acquire(&[0, 1, 2, 3]).await.expect("acquire") {
        fence.set(partition, Some(epoch));
    }
    // Two open executions in each partition and one finished one.
    let mut by_partition: HashMap<u32, Vec<String>> = HashMap::new();
    let mut n = 0;
    while by_partition.values().map(Vec::len).sum::<usize>() < 2 * P as usize {
        n += 1;
        let id = format!("recover-{n}");
        let partition = partition_of(&id, P);
        let open = by_partition.entry(partition).or_default();
        if open.len() == 2 {
            continue;
        }
        let created = new_execution(&id, "agent", &[], at(n));
        assert!(
            store
                .commit_group(vec![created])
                .await
                .iter()
                .all(Result::is_ok)
        );
        open.push(id);
    }
    let finished = new_execution("recover-done", "agent", &[], at(0));
    let row = finished.execution.clone();
    assert!(
        store
            .commit_group(vec![finished])
            .await
            .iter()
            .all(Result::is_ok)
    );
    let done = finish(&row, at(1), ExecutionStatus::Completed);
    assert!(
        store
            .commit_group(vec![done])
            .await
            .iter()
            .all(Result::is_ok)
    );

    let wanted = [1_u32, 3];
    let mut found: Vec<String> = store
        .recovery_index_of(&wanted)
        .await
        .expect("index")
        .into_iter()
        .map(|entry| entry.id.to_string())
        .collect();
    found.sort();
    let mut expected: Vec<String> = wanted
        .iter()
        .flat_map(|partition| by_partition[partition].clone())
        .collect();
    expected.sort();
    assert_eq!(found, expected);
    assert!(
        store
            .recovery_index_of(&[])
            .await
            .expect("index")
            .is_empty()
    );
}
