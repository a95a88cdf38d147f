//! Conformance of the kernel-wide feed (`Store::feed`, `Store::head_position`) and of the webhook
//! positions (`Store::webhook_positions`, `Store::set_webhook_position`).

use std::sync::Arc;

use keel_actors::events::{EventBody, NewEvent};
use keel_actors::feed::FeedQuery;
use keel_actors::status::ExecutionStatus;
use keel_actors::store::Store;

use super::{advance, at, commit_each, create};

fn query(after_position: i64, limit: i64) -> FeedQuery {
    FeedQuery {
        after_position,
        limit,
        ..FeedQuery::default()
    }
}

/// Events of several executions come back in commit order by position, paged and filtered by
/// agent, execution and labels; the head is the newest position.
pub async fn the_feed_reads_every_execution_in_position_order(store: Arc<dyn Store>) {
    assert_eq!(store.head_position().await.expect("head"), 0);
    assert!(
        store
            .feed(&query(0, 10))
            .await
            .expect("feed")
            .items
            .is_empty()
    );
    let a = create(&store, "fa", "agent-a", &[("team", "red")], at(1)).await;
    let b = create(&store, "fb", "agent-b", &[("team", "blue")], at(2)).await;
    let signal = |kind: &str| {
        NewEvent::execution(EventBody::SignalReceived {
            signal_type: kind.to_owned(),
            payload: serde_json::Value::Null,
            sent_by: None,
        })
    };
    let a = commit_each(
        &store,
        &[advance(
            &a,
            at(3),
            ExecutionStatus::Pending,
            vec![signal("x")],
        )],
    )
    .await;
    commit_each(
        &store,
        &[advance(
            &b,
            at(4),
            ExecutionStatus::Pending,
            vec![signal("y"), signal("z")],
        )],
    )
    .await;
    commit_each(
        &store,
        &[advance(
            &a,
            at(5),
            ExecutionStatus::Pending,
            vec![signal("w")],
        )],
    )
    .await;

    let all = store.feed(&query(0, 100)).await.expect("feed").items;
    let order: Vec<(String, i64)> = all
        .iter()
        .map(|event| {
            (
                event.event.execution_id.as_str().to_owned(),
                event.event.sequence,
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = [
        ("fa", 1),
        ("fb", 1),
        ("fa", 2),
        ("fb", 2),
        ("fb", 3),
        ("fa", 3),
    ]
    .iter()
    .map(|(id, sequence)| ((*id).to_owned(), *sequence))
    .collect();
    assert_eq!(order, expected);
    assert!(
        all.windows(2)
            .all(|pair| pair[0].position < pair[1].position)
    );
    assert_eq!(all[0].agent_id, "agent-a");
    assert_eq!(all[1].agent_id, "agent-b");
    let head = store.head_position().await.expect("head");
    assert_eq!(head, all[5].position);

    let page = store.feed(&query(all[1].position, 2)).await.expect("page");
    assert_eq!(page.items, all[2..4].to_vec());
    assert!(page.full, "a page that stopped at its count may have more");
    assert!(
        store
            .feed(&query(head, 10))
            .await
            .expect("after head")
            .items
            .is_empty()
    );

    let by_agent = store
        .feed(&FeedQuery {
            agent_id: Some("agent-b".into()),
            ..query(0, 100)
        })
        .await
        .expect("by agent")
        .items;
    assert_eq!(by_agent.len(), 3);
    assert!(by_agent.iter().all(|event| event.agent_id == "agent-b"));
    let by_execution = store
        .feed(&FeedQuery {
            execution_id: Some("fa".into()),
            ..query(0, 100)
        })
        .await
        .expect("by execution")
        .items;
    assert_eq!(by_execution.len(), 3);
    let by_label = store
        .feed(&FeedQuery {
            labels: vec![("team".to_owned(), "red".to_owned())],
            ..query(0, 100)
        })
        .await
        .expect("by label")
        .items;
    assert!(
        by_label
            .iter()
            .all(|event| event.event.execution_id.as_str() == "fa")
    );
    assert_eq!(by_label.len(), 3);
    let nobody = store
        .feed(&FeedQuery {
            labels: vec![("team".to_owned(), "green".to_owned())],
            ..query(0, 100)
        })
        .await
        .expect("no label match")
        .items;
    assert!(nobody.is_empty());
}

/// A webhook position is stored, overwritten and read back per subscription.
pub async fn webhook_positions_round_trip(store: Arc<dyn Store>) {
    assert!(store.webhook_positions().await.expect("read").is_empty());
    store.set_webhook_position("b", 7).await.expect("set");
    store.set_webhook_position("a", 3).await.expect("set");
    store.set_webhook_position("b", 9).await.expect("overwrite");
    assert_eq!(
        store.webhook_positions().await.expect("read"),
        vec![("a".to_owned(), 3), ("b".to_owned(), 9)]
    );
}
