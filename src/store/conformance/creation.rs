//! Conformance of the creation reads: `Store::execution_by_creation_key` (the key of an
//! `execution.created` event is unique), `Store::pending_queue` (an agent's pending
//! executions, oldest first, with their priority and labels), `Store::pending_count` and
//! `Store::running_executions` (an agent's running and blocked executions, with their labels).

use std::sync::Arc;

use keel_actors::error::StoreError;
use keel_actors::events::{EventBody, NewEvent};
use keel_actors::ids::ExecutionId;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, PendingEntry, RunningEntry, Store};

use super::{advance, at, commit_each, create, new_execution};

/// Returns an `execution.started` event.
fn started() -> NewEvent {
    NewEvent::execution(EventBody::ExecutionStarted {
        session_id: "s".into(),
        consumer_id: "c".into(),
    })
}

/// Returns the creation of a pending execution with `priority` and creation `key`.
fn keyed(id: &str, agent: &str, micros: i64, priority: i64, key: Option<&str>) -> Commit {
    let mut commit = new_execution(id, agent, &[], at(micros));
    if let EventBody::ExecutionCreated { priority: p, .. } = &mut commit.events[0].body {
        *p = priority;
    }
    commit.events[0].idempotency_key = key.map(str::to_owned);
    commit
}

pub async fn a_creation_key_names_one_execution(store: Arc<dyn Store>) {
    assert_eq!(
        store.execution_by_creation_key("k").await.expect("read"),
        None
    );
    commit_each(&store, &[keyed("exec-a", "a", 1, 0, Some("k"))]).await;
    commit_each(&store, &[keyed("exec-b", "a", 2, 0, None)]).await;
    assert_eq!(
        store.execution_by_creation_key("k").await.expect("read"),
        Some(ExecutionId::new("exec-a"))
    );
    let second = store.commit(&[keyed("exec-c", "a", 3, 0, Some("k"))]).await;
    assert!(matches!(second, Err(StoreError::Conflict(_))), "{second:?}");
    assert_eq!(
        store
            .execution(&ExecutionId::new("exec-c"))
            .await
            .expect("read"),
        None
    );
    // Intent keys on other events are not creation keys, and may repeat.
    let row = store
        .execution(&ExecutionId::new("exec-b"))
        .await
        .expect("read")
        .expect("stored");
    let keyed_start = started().with_key(Some("k".to_owned()));
    let later = advance(&row, at(4), ExecutionStatus::Running, vec![keyed_start]);
    store
        .commit(&[later])
        .await
        .expect("a non-creation event may carry the key");
    assert_eq!(
        store.execution_by_creation_key("k").await.expect("read"),
        Some(ExecutionId::new("exec-a"))
    );
}

pub async fn pending_queue_lists_an_agents_pending_executions_with_priorities(
    store: Arc<dyn Store>,
) {
    commit_each(&store, &[keyed("exec-1", "a", 1, 0, None)]).await;
    commit_each(&store, &[keyed("exec-2", "a", 2, 7, None)]).await;
    commit_each(&store, &[keyed("exec-3", "b", 3, 5, None)]).await;
    let started = commit_each(&store, &[keyed("exec-4", "a", 4, -2, None)]).await;
    commit_each(&store, &[keyed("exec-5", "a", 5, -2, None)]).await;
    let moved = advance(
        &started,
        at(6),
        ExecutionStatus::Running,
        vec![self::started()],
    );
    store.commit(&[moved]).await.expect("assigned");
    let queue = store.pending_queue(&"a".into()).await.expect("read");
    let ids: Vec<(&str, i64)> = queue
        .iter()
        .map(|entry| (entry.id.as_str(), entry.priority))
        .collect();
    assert_eq!(ids, [("exec-1", 0), ("exec-2", 7), ("exec-5", -2)]);
    assert_eq!(
        store.pending_queue(&"nobody".into()).await.expect("read"),
        []
    );
    assert_eq!(
        store.pending_count(Some(&"a".into())).await.expect("count"),
        3
    );
    assert_eq!(
        store.pending_count(Some(&"b".into())).await.expect("count"),
        1
    );
    assert_eq!(
        store
            .pending_count(Some(&"nobody".into()))
            .await
            .expect("count"),
        0
    );
    assert_eq!(store.pending_count(None).await.expect("count"), 4);
}

pub async fn running_executions_lists_an_agents_running_and_blocked_executions(
    store: Arc<dyn Store>,
) {
    commit_each(&store, &[keyed("exec-p", "a", 1, 0, None)]).await;
    let running = commit_each(&store, &[keyed("exec-r", "a", 2, 0, None)]).await;
    let blocked = commit_each(&store, &[keyed("exec-b", "a", 3, 0, None)]).await;
    let done = commit_each(&store, &[keyed("exec-d", "a", 4, 0, None)]).await;
    let other = commit_each(&store, &[keyed("exec-o", "b", 5, 0, None)]).await;
    assert_eq!(
        store.running_executions(&"a".into()).await.expect("read"),
        Vec::<RunningEntry>::new()
    );
    let run = |row, micros| advance(row, at(micros), ExecutionStatus::Running, vec![started()]);
    store
        .commit(&[run(&running, 6), run(&other, 7)])
        .await
        .expect("assigned");
    let blocked = advance(&blocked, at(8), ExecutionStatus::Running, vec![started()]);
    let waiting = NewEvent::execution(EventBody::ExecutionBlocked {
        reason: "signal".into(),
        reference: "go".to_owned(),
        tool_id: None,
        arguments: None,
        remote: None,
    });
    let blocked_row = blocked.execution.clone();
    store.commit(&[blocked]).await.expect("assigned");
    let blocked = advance(&blocked_row, at(9), ExecutionStatus::Blocked, vec![waiting]);
    store.commit(&[blocked]).await.expect("blocked");
    let done = advance(&done, at(10), ExecutionStatus::Running, vec![started()]);
    let done_row = done.execution.clone();
    store.commit(&[done]).await.expect("assigned");
    let finished = super::finish(&done_row, at(11), ExecutionStatus::Completed);
    store.commit(&[finished]).await.expect("completed");
    let ids = |found: Vec<RunningEntry>| {
        found
            .iter()
            .map(|entry| entry.id.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.running_executions(&"a".into()).await.expect("read")),
        ["exec-b", "exec-r"]
    );
    assert_eq!(
        ids(store.running_executions(&"b".into()).await.expect("read")),
        ["exec-o"]
    );
    assert_eq!(
        store
            .running_executions(&"nobody".into())
            .await
            .expect("read"),
        Vec::<RunningEntry>::new()
    );
}

pub async fn pending_and_running_executions_carry_their_labels(store: Arc<dyn Store>) {
    let labelled = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect::<std::collections::BTreeMap<_, _>>(),
        )
    };
    let acme = [("tenant", "acme"), ("tier", "gold")];
    create(&store, "exec-1", "a", &acme, at(1)).await;
    create(&store, "exec-2", "a", &[], at(2)).await;
    let running = create(&store, "exec-3", "a", &[("tenant", "bolt")], at(3)).await;
    create(&store, "exec-4", "a", &[], at(4)).await;
    let unlabelled = create(&store, "exec-5", "a", &[], at(5)).await;
    let run = |row, micros| advance(row, at(micros), ExecutionStatus::Running, vec![started()]);
    store
        .commit(&[run(&running, 6), run(&unlabelled, 7)])
        .await
        .expect("assigned");
    let entry = |id: &str, labels| PendingEntry {
        id: ExecutionId::new(id),
        priority: 0,
        labels,
    };
    assert_eq!(
        store.pending_queue(&"a".into()).await.expect("read"),
        [
            entry("exec-1", labelled(&acme)),
            entry("exec-2", None),
            entry("exec-4", None),
        ]
    );
    let running = |id: &str, labels| RunningEntry {
        id: ExecutionId::new(id),
        labels,
    };
    assert_eq!(
        store.running_executions(&"a".into()).await.expect("read"),
        [
            running("exec-3", labelled(&[("tenant", "bolt")])),
            running("exec-5", None),
        ]
    );
}

/// A NUL (`\u0000`) in one execution's input breaks no read of the agent's queue: the other
/// pending executions, and the one holding it, are listed with their priorities (PostgreSQL
/// cannot de-escape the NUL in a `json` value, and a plain `->>` failed the whole read).
pub async fn a_nul_in_one_input_leaves_the_agents_queue_readable(store: Arc<dyn Store>) {
    commit_each(&store, &[keyed("exec-1", "a", 1, 4, None)]).await;
    let mut poisoned = keyed("exec-2", "a", 2, 9, None);
    if let EventBody::ExecutionCreated { input, .. } = &mut poisoned.events[0].body {
        *input = serde_json::json!({ "text": "a\u{0}b", "raw": "\\u0000", "nested": ["\u{0}"] });
    }
    commit_each(&store, &[poisoned]).await;
    commit_each(&store, &[keyed("exec-3", "a", 3, -1, None)]).await;
    let queue = store.pending_queue(&"a".into()).await.expect("read");
    let ids: Vec<(&str, i64)> = queue
        .iter()
        .map(|entry| (entry.id.as_str(), entry.priority))
        .collect();
    assert_eq!(ids, [("exec-1", 4), ("exec-2", 9), ("exec-3", -1)]);
    let events = store
        .events(&ExecutionId::new("exec-2"), 0, 10)
        .await
        .expect("events read");
    let EventBody::ExecutionCreated { input, .. } = &events[0].body else {
        panic!("first event: {:?}", events[0].body);
    };
    assert_eq!(
        input,
        &serde_json::json!({ "text": "a\u{0}b", "raw": "\\u0000", "nested": ["\u{0}"] }),
        "the input reads back unchanged"
    );
}
