//! The cluster feed's commit order (`super::super::feed`): with several writers, a write that
//! took its position first but commits last is still read, once, by a reader that already read
//! past later commits. Skips (and passes) without `KEEL_TEST_POSTGRES_URL`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use keel_actors::feed::FeedQuery;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::Store;

use super::super::conformance::{at, finish, new_execution};
use super::super::{PartitionFence, StoreOptions};
use super::cluster::Membership;
use super::{PostgresStore, test_db, write};

const P: u32 = 2;

/// Holds the partitions the test acquired, at their epochs.
#[derive(Debug, Default)]
struct Held(Mutex<HashMap<u32, i64>>);

impl PartitionFence for Held {
    fn partitions(&self) -> u32 {
        P
    }

    fn epoch(&self, partition: u32) -> Option<i64> {
        self.0.lock().ok()?.get(&partition).copied()
    }
}

fn everything_after(after_position: i64) -> FeedQuery {
    FeedQuery {
        after_position,
        limit: 1000,
        agent_id: None,
        execution_id: None,
        labels: Vec::new(),
        max_bytes: None,
    }
}

#[tokio::test]
async fn a_reader_never_passes_a_write_that_commits_later() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let options = StoreOptions {
        cluster_partitions: Some(P),
        ..StoreOptions::default()
    };
    let fence = Arc::new(Held::default());
    let store = PostgresStore::open_fenced(&db.url, &options, Some(fence.clone()))
        .await
        .expect("open in cluster mode");
    let member = Membership::join(
        &db.url,
        "a",
        "http://a",
        Duration::from_secs(30),
        Duration::from_secs(2),
    )
    .await
    .expect("join");
    let acquired = member.acquire(&[0, 1]).await.expect("acquire");
    assert_eq!(acquired.len(), 2);
    fence.0.lock().expect("fence").extend(acquired);
    let slow = new_execution("slow", "agent", &[], at(1));
    let fast = new_execution("fast", "agent", &[], at(1));
    let results = store.commit_group(vec![slow.clone(), fast.clone()]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    // A second writer (another kernel's writer connection) writes the slow execution's end
    // with the same statement, inside a transaction it keeps open.
    let mut other = PgConnection::connect(&db.url).await.expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut other)
        .await
        .expect("begin");
    let slow_end = vec![finish(&slow.execution, at(2), ExecutionStatus::Completed)];
    let mut slow_results = vec![Ok(())];
    let mut pending = vec![(0, 1)];
    write::commit_group(
        &mut other,
        &slow_end,
        &mut slow_results,
        &mut pending,
        Some(fence.as_ref()),
    )
    .await
    .expect("held write");
    assert!(slow_results[0].is_ok(), "{slow_results:?}");

    // Meanwhile this kernel writes and commits the fast execution's end.
    let results = store
        .commit_group(vec![finish(
            &fast.execution,
            at(3),
            ExecutionStatus::Completed,
        )])
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    // A reader sees the two creations. The fast end committed, but lies above the held
    // transaction, so it is not read while that transaction runs, and the cursor stays below
    // the held write. (Other transactions on the server, e.g. of tests running beside this
    // one, may delay what is read: the reader reads again until it has what it waits for.)
    let mut reader = Reader::default();
    reader.read_until(&store, 2).await;
    let creations = reader.seen.clone();
    assert!(
        creations.iter().all(|(_, sequence)| *sequence == 1),
        "{creations:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    reader.read_until(&store, 2).await;
    assert_eq!(
        reader.seen, creations,
        "nothing above the held write is read"
    );
    assert!(store.head_position().await.expect("head") <= reader.cursor);

    sqlx::query("COMMIT")
        .execute(&mut other)
        .await
        .expect("commit");
    reader.read_until(&store, 4).await;
    // In transaction order: the held write began first.
    assert_eq!(
        reader.seen[2..],
        [("slow".to_owned(), 2), ("fast".to_owned(), 2)],
        "{:?}",
        reader.seen
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(store.readers())
        .await
        .expect("count");
    assert_eq!(stored, 4);
    let unique: HashSet<_> = reader.seen.iter().collect();
    assert_eq!(unique.len(), 4, "every event read exactly once");
}

/// A feed reader: the events read so far and its cursor.
#[derive(Default)]
struct Reader {
    seen: Vec<(String, i64)>,
    cursor: i64,
}

impl Reader {
    /// Reads until it has `count` events or 10 s passed, moving its cursor like the kernel's
    /// feed reader does.
    async fn read_until(&mut self, store: &PostgresStore, count: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let page = store
                .feed(&everything_after(self.cursor))
                .await
                .expect("feed");
            for event in page.items {
                self.seen
                    .push((event.event.execution_id.to_string(), event.event.sequence));
                self.cursor = event.position;
            }
            if self.seen.len() >= count || tokio::time::Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn retention_runs_only_on_the_kernel_holding_partition_0() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let options = StoreOptions {
        cluster_partitions: Some(P),
        ..StoreOptions::default()
    };
    let fence = Arc::new(Held::default());
    let store = PostgresStore::open_fenced(&db.url, &options, Some(fence.clone()))
        .await
        .expect("open in cluster mode");
    let member = Membership::join(
        &db.url,
        "a",
        "http://a",
        Duration::from_secs(30),
        Duration::from_secs(2),
    )
    .await
    .expect("join");
    let acquired = member.acquire(&[0, 1]).await.expect("acquire");
    fence
        .0
        .lock()
        .expect("fence")
        .extend(acquired.iter().copied());
    let mut commits = Vec::new();
    for n in 0..4 {
        let created = new_execution(&format!("old-{n}"), "agent", &[], at(1));
        commits.push(finish(
            &created.execution,
            at(2),
            ExecutionStatus::Completed,
        ));
        let results = store.commit_group(vec![created]).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    let results = store.commit_group(commits).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    // Without partition 0 this kernel is not elected: nothing is deleted.
    fence
        .0
        .lock()
        .expect("fence")
        .remove(&super::SINGLETON_PARTITION);
    assert_eq!(
        store
            .delete_terminal_before(at(1_000), 10)
            .await
            .expect("retention"),
        0
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM executions")
        .fetch_one(store.readers())
        .await
        .expect("count");
    assert_eq!(left, 4);
    // Holding it, the same call deletes them.
    fence.0.lock().expect("fence").extend(acquired);
    assert_eq!(
        store
            .delete_terminal_before(at(1_000), 10)
            .await
            .expect("retention"),
        4
    );
}
