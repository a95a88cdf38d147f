//! Conformance of large batches: `Store::commit` of many executions is all or nothing, and
//! `Store::commit_group` (the store writer's group commit) writes every commit but the failing
//! ones. The backends' own tests add that such a group is one transaction.

use std::sync::Arc;

use keel_actors::error::StoreError;
use keel_actors::events::{EventBody, NewEvent};
use keel_actors::feed::FeedQuery;
use keel_actors::ids::ExecutionId;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, ExecutionRow, ListFilter, Store};

use super::{advance, at, create, new_execution, sequences};

/// Executions in the large batches below.
pub const MANY: usize = 200;

/// Returns `count` commits creating executions `{prefix}-0` …, each with one label.
pub fn creations(prefix: &str, count: usize) -> Vec<Commit> {
    (0..count)
        .map(|index| {
            let id = format!("{prefix}-{index}");
            new_execution(&id, "agent-batch", &[("batch", prefix)], at(index as i64))
        })
        .collect()
}

/// Returns the commit moving `row` to running with one `execution.resumed` event.
pub fn resume(row: &ExecutionRow, micros: i64) -> Commit {
    resumed_to(row, ExecutionStatus::Running, micros)
}

/// Returns the commit that blocks `row` on the local step `step` (tool `web`).
pub fn with_step(row: &ExecutionRow, step: &str, micros: i64) -> Commit {
    let mut commit = resumed_to(row, ExecutionStatus::Blocked, micros);
    commit.steps = vec![super::step_row(
        row,
        &keel_actors::ids::StepId::new(step),
        "web",
        at(micros),
    )];
    commit
}

/// Returns the commit moving `row` to `status` with one `execution.resumed` event (the store
/// does not check that an event fits the status).
pub fn resumed_to(row: &ExecutionRow, status: ExecutionStatus, micros: i64) -> Commit {
    advance(
        row,
        at(micros),
        status,
        vec![NewEvent::execution(EventBody::ExecutionResumed {
            reason: "batch".into(),
        })],
    )
}

/// Returns the commit appending after a stale view of `row` (its sequence is taken).
fn stale(row: &ExecutionRow) -> Commit {
    let mut old = row.clone();
    old.last_sequence = 0;
    resume(&old, 9_000)
}

/// Counts the executions labelled `batch=prefix`.
async fn labelled(store: &Arc<dyn Store>, prefix: &str) -> usize {
    let filter = ListFilter {
        labels: vec![("batch".into(), prefix.into())],
        limit: 1000,
        ..ListFilter::default()
    };
    store.list_executions(&filter).await.expect("list").len()
}

/// 200 new executions and, last, a commit whose sequence is taken: the batch fails with
/// `Conflict` and writes nothing, not even the first 200; without the bad commit it lands.
pub async fn many_executions_in_one_batch_are_all_or_nothing(store: Arc<dyn Store>) {
    let existing = create(&store, "exec-old", "agent-a", &[], at(1)).await;
    let mut batch = creations("many", MANY);
    batch.push(stale(&existing));

    let result = store.commit(&batch).await;
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "got {result:?}"
    );
    assert_eq!(labelled(&store, "many").await, 0, "no execution row leaks");
    for index in [0, MANY / 2, MANY - 1] {
        let id = format!("many-{index}");
        assert!(sequences(&store, &id).await.is_empty(), "{id} has events");
    }
    assert_eq!(
        store.execution(&existing.id).await.expect("row read"),
        Some(existing.clone())
    );

    batch.pop();
    store.commit(&batch).await.expect("the batch alone commits");
    assert_eq!(labelled(&store, "many").await, MANY);
    for index in [0, MANY / 2, MANY - 1] {
        assert_eq!(sequences(&store, &format!("many-{index}")).await, vec![1]);
    }
}

/// A group of 200 commits with a taken sequence and an inconsistent commit among them: those
/// two fail (`Conflict`, `Internal`) and change nothing, every other commit lands, including
/// two commits of one execution that follow each other inside the group.
pub async fn a_group_writes_every_commit_but_the_failing_ones(store: Arc<dyn Store>) {
    let existing = create(&store, "exec-old", "agent-a", &[], at(1)).await;
    let mut group = creations("group", MANY - 4);
    let chained_first = new_execution("exec-chain", "agent-a", &[], at(5));
    let chained_second = resume(&chained_first.execution, 6);
    let mut inconsistent = new_execution("exec-bad", "agent-a", &[], at(7));
    inconsistent.execution.last_sequence = 5;
    let conflict_at = MANY / 2;
    group.insert(conflict_at, stale(&existing));
    group.insert(conflict_at + 1, inconsistent);
    group.push(chained_first);
    group.push(chained_second.clone());
    assert_eq!(group.len(), MANY);

    let results = store.commit_group(group).await;
    assert_eq!(results.len(), MANY);
    for (index, result) in results.iter().enumerate() {
        match index {
            i if i == conflict_at => assert!(
                matches!(result, Err(StoreError::Conflict(_))),
                "stale commit: {result:?}"
            ),
            i if i == conflict_at + 1 => assert!(
                matches!(result, Err(StoreError::Internal(_))),
                "inconsistent commit: {result:?}"
            ),
            _ => assert!(result.is_ok(), "commit {index}: {result:?}"),
        }
    }
    assert_eq!(labelled(&store, "group").await, MANY - 4);
    assert_eq!(
        store.execution(&existing.id).await.expect("row read"),
        Some(existing)
    );
    assert_eq!(sequences(&store, "exec-old").await, vec![1]);
    assert_eq!(
        store
            .execution(&ExecutionId::new("exec-bad"))
            .await
            .expect("row read"),
        None
    );
    assert_eq!(sequences(&store, "exec-chain").await, vec![1, 2]);
    assert_eq!(
        store
            .execution(&ExecutionId::new("exec-chain"))
            .await
            .expect("row read"),
        Some(chained_second.execution)
    );
}

/// A group whose commits all pass is answered `Ok` for each, and an empty group has no results.
pub async fn a_clean_group_answers_ok_for_each_commit(store: Arc<dyn Store>) {
    assert!(store.commit_group(Vec::new()).await.is_empty());
    let created = creations("clean", 3);
    let rows: Vec<ExecutionRow> = created.iter().map(|c| c.execution.clone()).collect();
    let results = store.commit_group(created).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let resumed: Vec<Commit> = rows.iter().map(|row| resume(row, 50)).collect();
    let results = store.commit_group(resumed).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for row in &rows {
        assert_eq!(sequences(&store, row.id.as_str()).await, vec![1, 2]);
    }
}

/// A reused creation key in a group (a uniqueness violation the database reports, not a
/// sequence check) fails that commit alone; the rest of the group lands.
pub async fn a_reused_creation_key_fails_only_its_commit(store: Arc<dyn Store>) {
    let mut group = creations("dup", 10);
    for index in [2, 7] {
        group[index].events[0].idempotency_key = Some("dup-key".to_owned());
    }
    let results = store.commit_group(group).await;
    for (index, result) in results.iter().enumerate() {
        if index == 7 {
            assert!(
                matches!(result, Err(StoreError::Conflict(_))),
                "reused key: {result:?}"
            );
        } else {
            assert!(result.is_ok(), "commit {index}: {result:?}");
        }
    }
    assert_eq!(labelled(&store, "dup").await, 9);
    assert!(sequences(&store, "dup-7").await.is_empty());
    assert_eq!(
        store
            .execution_by_creation_key("dup-key")
            .await
            .expect("read"),
        Some(ExecutionId::new("dup-2"))
    );
}

/// The events of one group take positions in the order of its commits, and within a commit in
/// sequence order, across more events than one statement of a batched writer takes.
pub async fn a_groups_events_take_positions_in_commit_order(store: Arc<dyn Store>) {
    let created = creations("order", 12);
    let rows: Vec<ExecutionRow> = created.iter().map(|c| c.execution.clone()).collect();
    store.commit(&created).await.expect("creations");
    let signal = |kind: String| {
        NewEvent::execution(EventBody::SignalReceived {
            signal_type: kind,
            payload: serde_json::Value::Null,
            sent_by: None,
        })
    };
    // Every other execution in reverse, three events each: 18 events in one group.
    let group: Vec<Commit> = rows
        .iter()
        .rev()
        .step_by(2)
        .map(|row| {
            let events = (0..3).map(|n| signal(format!("s{n}"))).collect();
            advance(row, at(50), ExecutionStatus::Pending, events)
        })
        .collect();
    let expected: Vec<(String, i64)> = group
        .iter()
        .flat_map(|commit| commit.events.iter())
        .map(|event| (event.execution_id.as_str().to_owned(), event.sequence))
        .collect();
    let head = store.head_position().await.expect("head");
    let results = store.commit_group(group).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let query = FeedQuery {
        after_position: head,
        limit: 100,
        ..FeedQuery::default()
    };
    let fed: Vec<(String, i64)> = store
        .feed(&query)
        .await
        .expect("feed")
        .items
        .iter()
        .map(|fed| {
            (
                fed.event.execution_id.as_str().to_owned(),
                fed.event.sequence,
            )
        })
        .collect();
    assert_eq!(fed, expected);
}

/// `Commit::previous_status` is a hint: a commit that names the wrong previous status still
/// moves the execution to its new one.
pub async fn a_wrong_previous_status_still_writes_the_new_status(store: Arc<dyn Store>) {
    let created = creations("hint", 1);
    let row = created[0].execution.clone();
    store.commit(&created).await.expect("created");
    let mut resumed = resume(&row, 10);
    assert_eq!(row.status, ExecutionStatus::Pending);
    resumed.previous_status = Some(ExecutionStatus::Running);
    store.commit(&[resumed]).await.expect("resumed");
    let stored = store.execution(&row.id).await.expect("read").expect("row");
    assert_eq!(stored.status, ExecutionStatus::Running);
    assert_eq!(stored.last_sequence, 2);
    let filter = ListFilter {
        status: Some(ExecutionStatus::Running),
        labels: vec![("batch".into(), "hint".into())],
        limit: 10,
        ..ListFilter::default()
    };
    let listed = store.list_executions(&filter).await.expect("list");
    assert_eq!(listed.len(), 1, "listed by its new status: {listed:?}");
}
