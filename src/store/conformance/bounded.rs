//! Conformance of the reads bounded by bytes (`Store::events_within`, `Store::feed` with
//! `max_bytes`): a backlog of large events comes back a budget at a time, every event once, in
//! order, and each batch passes its budget by at most one event.

use std::sync::Arc;

use keel_actors::events::{EventBody, NewEvent};
use keel_actors::feed::FeedQuery;
use keel_actors::ids::ExecutionId;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::Store;
use serde_json::Value;

use super::{advance, at, commit_each, create};

/// Events in the backlog.
const EVENTS: i64 = 200;
/// Bytes of each event's signal payload.
const EVENT_BYTES: usize = 64 * 1024;
/// The budget of each read: 16 events' payloads.
const BUDGET: i64 = 1024 * 1024;
/// Events a read within [`BUDGET`] holds: the ones before the last stay under it, and each
/// stored payload is a little larger than [`EVENT_BYTES`] (its JSON around the string).
const PER_BATCH: usize = 16;

/// Commits [`EVENTS`] large signals to a new execution `id` (20 per commit) and a small
/// execution's events between them; returns the large execution's id.
async fn backlog(store: &Arc<dyn Store>, id: &str) -> ExecutionId {
    let mut row = create(store, id, "agent-big", &[], at(1)).await;
    let mut small = create(store, "small", "agent-small", &[], at(2)).await;
    // `create` recorded execution.created; the signals follow it.
    let signals = EVENTS - row.last_sequence;
    for chunk in 0..(signals + 19) / 20 {
        let count = (signals - chunk * 20).min(20);
        let events = (0..count)
            .map(|_| {
                NewEvent::execution(EventBody::SignalReceived {
                    signal_type: "big".to_owned(),
                    payload: Value::String("x".repeat(EVENT_BYTES)),
                    sent_by: None,
                })
            })
            .collect();
        row = commit_each(
            store,
            &[advance(
                &row,
                at(10 + chunk),
                ExecutionStatus::Pending,
                events,
            )],
        )
        .await;
        let signal = NewEvent::execution(EventBody::SignalReceived {
            signal_type: "small".to_owned(),
            payload: Value::Null,
            sent_by: None,
        });
        small = commit_each(
            store,
            &[advance(
                &small,
                at(10 + chunk),
                ExecutionStatus::Pending,
                vec![signal],
            )],
        )
        .await;
    }
    assert_eq!(row.last_sequence, EVENTS);
    row.id
}

/// `Store::events_within`: batches of [`PER_BATCH`] large events, all of them once and in
/// order; a budget of one byte still reads one event; the count bound still holds.
pub async fn a_backlog_of_large_events_is_read_a_budget_at_a_time(store: Arc<dyn Store>) {
    let id = backlog(&store, "big").await;
    let mut cursor = 0;
    let mut sizes = Vec::new();
    let mut sequences = Vec::new();
    loop {
        let batch = store
            .events_within(&id, cursor, 1000, BUDGET)
            .await
            .expect("bounded read");
        sizes.push(batch.items.len());
        sequences.extend(batch.items.iter().map(|event| event.sequence));
        let Some(last) = batch.items.last() else {
            break;
        };
        cursor = last.sequence;
        if !batch.full {
            break;
        }
    }
    assert_read_by_budget(&sequences, &sizes);
    assert_eq!(sizes.len(), 13, "{sizes:?}");

    let one = store
        .events_within(&id, 0, 1000, 1)
        .await
        .expect("one-byte budget");
    assert_eq!(one.items.len(), 1, "a batch always holds one event");
    assert!(one.full);
    let counted = store
        .events_within(&id, 10, 3, i64::MAX)
        .await
        .expect("count bound");
    let read: Vec<i64> = counted.items.iter().map(|event| event.sequence).collect();
    assert_eq!(read, vec![11, 12, 13]);
    assert!(
        counted.full,
        "a batch that stopped at its count may have more"
    );
    let tail = store
        .events_within(&id, EVENTS - 1, 1000, BUDGET)
        .await
        .expect("tail");
    assert_eq!(tail.items.len(), 1);
    assert!(!tail.full, "the end of the log is not full");
}

/// `Store::feed` with `max_bytes`: the same batches across the kernel-wide log, filters kept.
pub async fn the_feed_is_read_a_budget_at_a_time(store: Arc<dyn Store>) {
    let id = backlog(&store, "big").await;
    let query = |after_position: i64| FeedQuery {
        after_position,
        limit: 1000,
        execution_id: Some(id.clone()),
        max_bytes: Some(BUDGET),
        ..FeedQuery::default()
    };
    let mut cursor = 0;
    let mut sizes = Vec::new();
    let mut sequences = Vec::new();
    loop {
        let batch = store.feed(&query(cursor)).await.expect("bounded feed read");
        sizes.push(batch.items.len());
        assert!(batch.items.iter().all(|fed| fed.event.execution_id == id));
        sequences.extend(batch.items.iter().map(|fed| fed.event.sequence));
        let Some(last) = batch.items.last() else {
            break;
        };
        assert!(last.position > cursor);
        cursor = last.position;
        if !batch.full {
            break;
        }
    }
    assert_read_by_budget(&sequences, &sizes);
    // Without a byte budget the count alone bounds the read, and the small execution's events
    // are there too.
    let everything = store
        .feed(&FeedQuery {
            limit: 1000,
            ..FeedQuery::default()
        })
        .await
        .expect("unbounded feed");
    assert_eq!(everything.items.len(), 200 + 1 + 10);
    assert!(!everything.full);
}

/// The backlog's events were read each once, in order, in batches that each stopped once they
/// passed the budget (the first also holds the small `execution.created`, the last what is
/// left).
fn assert_read_by_budget(sequences: &[i64], sizes: &[usize]) {
    assert_eq!(
        sequences,
        (1..=EVENTS).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let (last, before) = sizes.split_last().expect("batches");
    assert!(
        before
            .iter()
            .all(|size| *size == PER_BATCH || *size == PER_BATCH + 1),
        "each batch stops once it passes the budget: {sizes:?}"
    );
    assert!(*last <= PER_BATCH + 1, "{sizes:?}");
}
