//! Storage conformance suite: backend-neutral test bodies over `Arc<dyn Store>`. Each function
//! expects a fresh, empty store; `tests.rs` runs every one on a temp SQLite file, and the
//! PostgreSQL adapter will run the same functions against `TEST_DATABASE_URL`.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use serde_json::{Value, json};

use keel_actors::error::StoreError;
use keel_actors::events::{EventBody, NewEvent, seal};
use keel_actors::ids::{AgentId, ConsumerId, ExecutionId, SessionId, StepId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, ExecutionRow, ListFilter, Store};
use keel_actors::time::Timestamp;

mod batch;
mod bounded;
mod creation;
mod feed;
mod runner_results;
mod tool_calls;
pub use batch::{
    MANY, a_clean_group_answers_ok_for_each_commit,
    a_group_writes_every_commit_but_the_failing_ones,
    a_groups_events_take_positions_in_commit_order, a_reused_creation_key_fails_only_its_commit,
    a_wrong_previous_status_still_writes_the_new_status, creations,
    many_executions_in_one_batch_are_all_or_nothing, resume, resumed_to, with_step,
};
pub use bounded::{
    a_backlog_of_large_events_is_read_a_budget_at_a_time, the_feed_is_read_a_budget_at_a_time,
};
pub use creation::{
    a_creation_key_names_one_execution, a_nul_in_one_input_leaves_the_agents_queue_readable,
    pending_and_running_executions_carry_their_labels,
    pending_queue_lists_an_agents_pending_executions_with_priorities,
    running_executions_lists_an_agents_running_and_blocked_executions,
};
pub use feed::{the_feed_reads_every_execution_in_position_order, webhook_positions_round_trip};
pub use runner_results::{
    a_nul_in_a_result_leaves_the_runner_results_readable,
    runner_results_since_names_the_runner_of_each_remote_result,
};
pub use tool_calls::{
    active_local_steps_counts_unfinished_local_steps_of_a_tool, step_row,
    tool_calls_since_lists_allowed_calls_oldest_first,
    tool_results_since_lists_step_results_oldest_first,
};

/// Returns a fixed time `micros` microseconds after 2026-01-01T00:00:00Z.
pub fn at(micros: i64) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date")
        + Duration::microseconds(micros)
}

/// Returns the commit creating a pending execution with one `execution.created` event.
pub fn new_execution(
    id: &str,
    agent: &str,
    labels: &[(&str, &str)],
    created_at: Timestamp,
) -> Commit {
    let labels: Option<BTreeMap<String, String>> = (!labels.is_empty()).then(|| {
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    });
    let input = json!({ "task": id, "n": 1 });
    let body = EventBody::ExecutionCreated {
        agent_id: agent.into(),
        input: input.clone(),
        labels: serde_json::to_value(&labels).expect("labels serialize"),
        priority: 0,
        traceparent: None,
        created_by: None,
        on_behalf_of: None,
    };
    let execution_id = ExecutionId::new(id);
    let events = seal(
        &execution_id,
        0,
        created_at,
        None,
        vec![NewEvent::execution(body)],
    );
    let execution = ExecutionRow {
        id: execution_id,
        agent_id: AgentId::new(agent),
        status: ExecutionStatus::Pending,
        labels: labels.map(Arc::new),
        input: Arc::new(input),
        output: None,
        created_at,
        updated_at: created_at,
        session_id: None,
        consumer_id: None,
        last_sequence: 1,
    };
    Commit {
        execution,
        events,
        steps: Vec::new(),
        previous_status: None,
    }
}

/// Returns the commit appending `new_events` after `row` and moving it to `status`.
pub fn advance(
    row: &ExecutionRow,
    when: Timestamp,
    status: ExecutionStatus,
    new_events: Vec<NewEvent>,
) -> Commit {
    let events = seal(&row.id, row.last_sequence, when, None, new_events);
    let mut execution = row.clone();
    execution.status = status;
    execution.updated_at = when;
    execution.last_sequence = events
        .last()
        .map_or(row.last_sequence, |event| event.sequence);
    Commit {
        execution,
        events,
        steps: Vec::new(),
        previous_status: Some(row.status),
    }
}

/// Returns the commit ending `row` with the terminal `status`.
pub fn finish(row: &ExecutionRow, when: Timestamp, status: ExecutionStatus) -> Commit {
    let body = match status {
        ExecutionStatus::Completed => EventBody::ExecutionCompleted {
            output: json!({ "done": row.id.as_str() }),
        },
        ExecutionStatus::Failed => EventBody::ExecutionFailed {
            error: "boom".to_owned(),
        },
        _ => EventBody::ExecutionCancelled {
            reason: "user".to_owned(),
        },
    };
    let mut commit = advance(row, when, status, vec![NewEvent::execution(body)]);
    if status == ExecutionStatus::Completed {
        commit.execution.output = Some(json!({ "done": row.id.as_str() }));
    }
    commit
}

/// Commits `commits` one by one and returns the last execution row.
pub async fn commit_each(store: &Arc<dyn Store>, commits: &[Commit]) -> ExecutionRow {
    for commit in commits {
        store
            .commit(std::slice::from_ref(commit))
            .await
            .expect("commit succeeds");
    }
    commits
        .last()
        .expect("at least one commit")
        .execution
        .clone()
}

/// Creates an execution and returns its row.
pub async fn create(
    store: &Arc<dyn Store>,
    id: &str,
    agent: &str,
    labels: &[(&str, &str)],
    when: Timestamp,
) -> ExecutionRow {
    commit_each(store, &[new_execution(id, agent, labels, when)]).await
}

/// Returns the ids of `rows`, in order.
pub fn ids(rows: &[ExecutionRow]) -> Vec<String> {
    rows.iter().map(|row| row.id.as_str().to_owned()).collect()
}

/// Returns the sequences of an execution's stored events.
pub async fn sequences(store: &Arc<dyn Store>, id: &str) -> Vec<i64> {
    let events = store
        .events(&ExecutionId::new(id), 0, 1000)
        .await
        .expect("events read");
    events.iter().map(|event| event.sequence).collect()
}

/// Every envelope field, JSON payloads, and null vs present step ids and keys read back exactly.
pub async fn commit_round_trips_every_event_field(store: Arc<dyn Store>) {
    let created = new_execution(
        "exec-rt",
        "agent-a",
        &[("team", "ml"), ("env", "prod")],
        at(1),
    );
    store
        .commit(std::slice::from_ref(&created))
        .await
        .expect("create commits");
    let step = StepId::new("step-1");
    let arguments = json!({
        "nested": {"list": [1, 2.5, -3e-7, null, true, "ü ✓ \"q\"\n"]},
        "empty": {},
        "big": 9_007_199_254_740_993_i64,
    });
    let bodies = vec![
        NewEvent::execution(EventBody::ExecutionStarted {
            session_id: "sess-1".into(),
            consumer_id: "c-1".into(),
        }),
        NewEvent::step(
            &step,
            EventBody::StepCreated {
                tool_id: "http.get".into(),
                tool_version: 0,
                arguments: arguments.clone(),
                max_attempts: 3,
                attempt: 1,
                deadline: at(500),
                remote: true,
                timeout_ms: None,
                retry_base_delay_ms: None,
                retry_max_delay_ms: None,
                max_retries: None,
                replay_of: None,
                key_of: None,
                repeats: None,
                proposed_arguments: None,
                at_most_once: false,
            },
        )
        .with_key(Some("intent-key-1".into())),
        NewEvent::step(&step, EventBody::StepTimedOut {}),
        NewEvent::execution(EventBody::ExecutionBlocked {
            reason: "tool".into(),
            reference: "step-1".into(),
            tool_id: None,
            arguments: None,
            remote: None,
        }),
        NewEvent::execution(EventBody::SignalReceived {
            signal_type: "go".into(),
            payload: Value::Null,
            sent_by: None,
        }),
    ];
    let mut next = advance(&created.execution, at(2), ExecutionStatus::Blocked, bodies);
    next.execution.session_id = Some("sess-1".into());
    next.execution.consumer_id = Some("c-1".into());
    store
        .commit(std::slice::from_ref(&next))
        .await
        .expect("follow-up commits");

    let id = &created.execution.id;
    let stored = store.events(id, 0, 100).await.expect("events read");
    let expected: Vec<_> = created.events.iter().chain(&next.events).cloned().collect();
    assert_eq!(stored, expected);
    assert_eq!(
        stored
            .iter()
            .map(|event| event.sequence)
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    assert_eq!(stored[0].step_id, None);
    assert_eq!(stored[2].step_id, Some(step.clone()));
    assert_eq!(stored[2].idempotency_key.as_deref(), Some("intent-key-1"));
    assert_eq!(stored[3].idempotency_key, None);
    assert_eq!(stored[2].body.payload()["arguments"], arguments);
    assert_eq!(stored[3].body.payload(), json!({}));
    assert!(
        stored[4].body.payload().get("tool_id").is_none(),
        "absent optional stays absent"
    );
    assert_eq!(
        stored[5].body.payload(),
        json!({"signal_type": "go", "payload": null})
    );
    assert_eq!(stored[1].timestamp, at(2));
    assert_eq!(stored[1].correlation_id, next.events[0].id);

    let page = store.events(id, 2, 2).await.expect("page read");
    assert_eq!(
        page.iter().map(|event| event.sequence).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert!(store.events(id, 6, 10).await.expect("tail read").is_empty());
    assert_eq!(
        store.execution(id).await.expect("row read"),
        Some(next.execution)
    );
}

/// Unknown executions read as absent, with no events.
pub async fn unknown_execution_reads_as_none(store: Arc<dyn Store>) {
    let id = ExecutionId::new("exec-missing");
    assert_eq!(store.execution(&id).await.expect("row read"), None);
    assert!(
        store
            .events(&id, 0, 10)
            .await
            .expect("events read")
            .is_empty()
    );
}

/// A batch whose second commit collides on a sequence leaves nothing of the first behind.
pub async fn batch_is_all_or_nothing(store: Arc<dyn Store>) {
    let existing = create(&store, "exec-old", "agent-a", &[], at(1)).await;
    let fresh = new_execution("exec-new", "agent-a", &[("k", "v")], at(2));
    let mut stale = existing.clone();
    stale.last_sequence = 0;
    let colliding = advance(
        &stale,
        at(3),
        ExecutionStatus::Running,
        vec![NewEvent::execution(EventBody::ExecutionResumed {
            reason: "x".into(),
        })],
    );
    assert_eq!(colliding.events[0].sequence, 1);

    let result = store.commit(&[fresh.clone(), colliding]).await;
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "got {result:?}"
    );
    assert_eq!(
        store
            .execution(&fresh.execution.id)
            .await
            .expect("row read"),
        None
    );
    assert!(sequences(&store, "exec-new").await.is_empty());
    let everything = ListFilter {
        limit: 10,
        ..ListFilter::default()
    };
    assert_eq!(
        ids(&store.list_executions(&everything).await.expect("list")),
        vec!["exec-old"]
    );
    let labelled = ListFilter {
        labels: vec![("k".into(), "v".into())],
        limit: 10,
        ..ListFilter::default()
    };
    assert!(
        store
            .list_executions(&labelled)
            .await
            .expect("list")
            .is_empty(),
        "no label rows leak"
    );
    assert_eq!(
        store.execution(&existing.id).await.expect("row read"),
        Some(existing)
    );
    assert_eq!(sequences(&store, "exec-old").await, vec![1]);

    store
        .commit(&[fresh])
        .await
        .expect("the same commit alone succeeds afterwards");
    assert_eq!(sequences(&store, "exec-new").await, vec![1]);
}

/// Events must follow the stored last sequence exactly: no reuse, no gap, new executions
/// start at 1.
pub async fn sequences_stay_contiguous_and_unique(store: Arc<dyn Store>) {
    let row = create(&store, "exec-seq", "agent-a", &[], at(1)).await;
    let resumed = |reason: &str| {
        NewEvent::execution(EventBody::ExecutionResumed {
            reason: reason.into(),
        })
    };
    let two = advance(
        &row,
        at(2),
        ExecutionStatus::Running,
        vec![resumed("a"), resumed("b")],
    );
    let three = advance(
        &two.execution,
        at(3),
        ExecutionStatus::Running,
        vec![resumed("c")],
    );
    let current = commit_each(&store, &[two.clone(), three]).await;
    assert_eq!(sequences(&store, "exec-seq").await, vec![1, 2, 3, 4]);

    let replay = advance(
        &two.execution,
        at(4),
        ExecutionStatus::Blocked,
        vec![resumed("stale")],
    );
    assert!(matches!(
        store.commit(&[replay]).await,
        Err(StoreError::Conflict(_))
    ));
    let mut ahead = current.clone();
    ahead.last_sequence = 6;
    let gap = advance(
        &ahead,
        at(4),
        ExecutionStatus::Blocked,
        vec![resumed("gap")],
    );
    assert!(matches!(
        store.commit(&[gap]).await,
        Err(StoreError::Conflict(_))
    ));
    let mut late = new_execution("exec-late", "agent-a", &[], at(5)).execution;
    late.last_sequence = 1;
    let late_start = advance(
        &late,
        at(5),
        ExecutionStatus::Pending,
        vec![resumed("late")],
    );
    assert!(matches!(
        store.commit(&[late_start]).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store
            .execution(&ExecutionId::new("exec-late"))
            .await
            .expect("row read"),
        None
    );

    assert_eq!(sequences(&store, "exec-seq").await, vec![1, 2, 3, 4]);
    assert_eq!(
        store.execution(&current.id).await.expect("row read"),
        Some(current.clone())
    );
    let next = advance(
        &current,
        at(6),
        ExecutionStatus::Running,
        vec![resumed("d")],
    );
    store
        .commit(&[next])
        .await
        .expect("the right next sequence commits");
    assert_eq!(sequences(&store, "exec-seq").await, vec![1, 2, 3, 4, 5]);
}

/// Inconsistent commits (foreign events, gaps inside one commit, a wrong last_sequence) are
/// caller bugs and are refused before anything is written.
pub async fn inconsistent_commits_are_refused(store: Arc<dyn Store>) {
    let mut foreign = new_execution("exec-x", "agent-a", &[], at(1));
    foreign.events[0].execution_id = ExecutionId::new("exec-y");
    let mut wrong_last = new_execution("exec-x", "agent-a", &[], at(1));
    wrong_last.execution.last_sequence = 2;
    let row = new_execution("exec-x", "agent-a", &[], at(1)).execution;
    let resumed = || NewEvent::execution(EventBody::ExecutionResumed { reason: "r".into() });
    let mut holey = advance(
        &row,
        at(2),
        ExecutionStatus::Running,
        vec![resumed(), resumed()],
    );
    holey.events[1].sequence = 4;
    holey.execution.last_sequence = 4;
    for commit in [foreign, wrong_last, holey] {
        let result = store.commit(&[commit]).await;
        assert!(
            matches!(result, Err(StoreError::Internal(_))),
            "got {result:?}"
        );
    }
    assert_eq!(
        store
            .execution(&ExecutionId::new("exec-x"))
            .await
            .expect("row read"),
        None
    );
}

/// The projection row follows each commit; creation fields are written once; `None` and
/// JSON null outputs and absent vs empty labels stay distinct.
pub async fn execution_row_follows_commits(store: Arc<dyn Store>) {
    let mut empty_labels = new_execution("exec-empty", "agent-a", &[], at(1));
    empty_labels.execution.labels = Some(Arc::new(BTreeMap::new()));
    let no_labels = new_execution("exec-none", "agent-a", &[], at(2));
    store
        .commit(&[empty_labels, no_labels])
        .await
        .expect("two creations in one batch commit");
    let read = |id: &'static str| {
        let store = store.clone();
        async move {
            store
                .execution(&ExecutionId::new(id))
                .await
                .expect("row read")
                .expect("row exists")
        }
    };
    assert_eq!(
        read("exec-empty").await.labels,
        Some(Arc::new(BTreeMap::new()))
    );
    let row = read("exec-none").await;
    assert_eq!(row.labels, None);

    let mut started = advance(
        &row,
        at(3),
        ExecutionStatus::Running,
        vec![NewEvent::execution(EventBody::ExecutionStarted {
            session_id: "s".into(),
            consumer_id: "c".into(),
        })],
    );
    started.execution.session_id = Some("s".into());
    started.execution.consumer_id = Some("c".into());
    started.execution.agent_id = AgentId::new("agent-renamed");
    started.execution.input = Arc::new(json!("changed"));
    started.execution.created_at = at(99);
    let mut done = finish(&started.execution, at(4), ExecutionStatus::Completed);
    done.execution.output = Some(Value::Null);
    commit_each(&store, &[started.clone()]).await;
    let after_start = read("exec-none").await;
    assert_eq!(after_start.status, ExecutionStatus::Running);
    assert_eq!(
        (
            after_start.session_id.as_ref().map(SessionId::as_str),
            after_start.consumer_id.as_ref().map(ConsumerId::as_str)
        ),
        (Some("s"), Some("c"))
    );
    assert_eq!(
        (after_start.updated_at, after_start.last_sequence),
        (at(3), 2)
    );
    assert_eq!(
        after_start.agent_id, row.agent_id,
        "agent_id is fixed at creation"
    );
    assert_eq!(
        (after_start.input, after_start.created_at),
        (row.input.clone(), row.created_at)
    );
    assert_eq!(after_start.output, None);

    commit_each(&store, &[done]).await;
    let after_done = read("exec-none").await;
    assert_eq!(
        (after_done.status, after_done.output),
        (ExecutionStatus::Completed, Some(Value::Null))
    );
}

/// Many tasks committing at once all land, each with contiguous sequences.
pub async fn concurrent_commits_all_land(store: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for task in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("exec-c{task}");
            let mut row = create(&store, &id, "agent-a", &[], at(task)).await;
            for round in 0..3 {
                let body = EventBody::ExecutionResumed {
                    reason: format!("round {round}").into(),
                };
                row = commit_each(
                    &store,
                    &[advance(
                        &row,
                        at(100 + round),
                        ExecutionStatus::Running,
                        vec![NewEvent::execution(body)],
                    )],
                )
                .await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task finishes");
    }
    for task in 0..8 {
        assert_eq!(
            sequences(&store, &format!("exec-c{task}")).await,
            vec![1, 2, 3, 4]
        );
    }
    let all = store
        .list_executions(&ListFilter {
            limit: 100,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(all.len(), 8);
}

/// `ping` round-trips.
pub async fn ping_answers(store: Arc<dyn Store>) {
    store.ping().await.expect("ping succeeds");
}

/// Lists newest first, ties broken by id descending, at most `limit` rows.
pub async fn list_orders_newest_first(store: Arc<dyn Store>) {
    let created = [
        ("exec-1", at(10)),
        ("exec-3", at(20)),
        ("exec-2", at(20)),
        ("exec-4", at(5)),
        ("exec-5", at(20)),
        ("exec-6", at(999_999)),
        ("exec-0", at(1_000_000)),
        ("exec-7", at(86_400_000_000)),
    ];
    for (id, when) in created {
        create(&store, id, "agent-a", &[], when).await;
    }
    let list = |limit: i64| {
        let store = store.clone();
        async move {
            ids(&store
                .list_executions(&ListFilter {
                    limit,
                    ..ListFilter::default()
                })
                .await
                .expect("list"))
        }
    };
    let newest_first = vec![
        "exec-7", "exec-0", "exec-6", "exec-5", "exec-3", "exec-2", "exec-1", "exec-4",
    ];
    assert_eq!(list(100).await, newest_first);
    assert_eq!(list(2).await, newest_first[..2]);
    assert!(list(0).await.is_empty());
}

/// Pages through a keyset cursor (taking `limit + 1` rows like the HTTP layer), across ties,
/// alone and combined with a filter, over at least three pages.
pub async fn list_pages_through_a_cursor(store: Arc<dyn Store>) {
    for index in 0..10_i64 {
        let row = create(
            &store,
            &format!("exec-{index:02}"),
            "agent-a",
            &[("tier", "gold")],
            at(index / 2 * 1000),
        )
        .await;
        if index % 3 == 0 {
            commit_each(&store, &[finish(&row, at(50_000), ExecutionStatus::Failed)]).await;
        }
    }
    let full = store
        .list_executions(&ListFilter {
            limit: 100,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    let failed: Vec<String> = full
        .iter()
        .filter(|row| row.status == ExecutionStatus::Failed)
        .map(|row| row.id.to_string())
        .collect();
    assert_eq!(failed, vec!["exec-09", "exec-06", "exec-03", "exec-00"]);

    for (base, page_size, expected_pages) in [
        (ListFilter::default(), 3, vec![3, 3, 3, 1]),
        (
            ListFilter {
                status: Some(ExecutionStatus::Failed),
                labels: vec![("tier".into(), "gold".into())],
                ..ListFilter::default()
            },
            1,
            vec![1, 1, 1, 1],
        ),
    ] {
        let mut pages = Vec::new();
        let mut after = None;
        loop {
            let filter = ListFilter {
                after: after.clone(),
                limit: page_size + 1,
                ..base.clone()
            };
            let mut rows = store.list_executions(&filter).await.expect("page");
            let more = rows.len() as i64 > page_size;
            rows.truncate(page_size as usize);
            after = rows.last().map(|row| (row.created_at, row.id.clone()));
            pages.push(ids(&rows));
            if !more {
                break;
            }
        }
        assert_eq!(
            pages.iter().map(Vec::len).collect::<Vec<_>>(),
            expected_pages
        );
        let flattened: Vec<String> = pages.concat();
        let expected = if base.status.is_some() {
            failed.clone()
        } else {
            ids(&full)
        };
        assert_eq!(flattened, expected);
    }
}

/// Status and agent filters match exactly; every label pair must match (AND).
pub async fn list_filters_by_status_agent_and_every_label(store: Arc<dyn Store>) {
    create(
        &store,
        "exec-a",
        "agent-x",
        &[("team", "ml"), ("env", "prod")],
        at(1),
    )
    .await;
    let b = create(
        &store,
        "exec-b",
        "agent-x",
        &[("team", "ml"), ("env", "dev")],
        at(2),
    )
    .await;
    let c = create(
        &store,
        "exec-c",
        "agent-y",
        &[("team", "ml"), ("env", "prod")],
        at(3),
    )
    .await;
    create(&store, "exec-d", "agent-y", &[], at(4)).await;
    create(&store, "exec-e", "agent-xx", &[("team", "ops")], at(5)).await;
    let resumed = NewEvent::execution(EventBody::ExecutionResumed { reason: "r".into() });
    commit_each(
        &store,
        &[advance(&b, at(6), ExecutionStatus::Running, vec![resumed])],
    )
    .await;
    commit_each(&store, &[finish(&c, at(7), ExecutionStatus::Completed)]).await;

    let label = |key: &str, value: &str| (key.to_owned(), value.to_owned());
    let cases: Vec<(ListFilter, Vec<&str>)> = vec![
        (
            ListFilter {
                status: Some(ExecutionStatus::Running),
                ..ListFilter::default()
            },
            vec!["exec-b"],
        ),
        (
            ListFilter {
                status: Some(ExecutionStatus::Pending),
                ..ListFilter::default()
            },
            vec!["exec-e", "exec-d", "exec-a"],
        ),
        (
            ListFilter {
                agent_id: Some("agent-x".into()),
                ..ListFilter::default()
            },
            vec!["exec-b", "exec-a"],
        ),
        (
            ListFilter {
                labels: vec![label("team", "ml")],
                ..ListFilter::default()
            },
            vec!["exec-c", "exec-b", "exec-a"],
        ),
        (
            ListFilter {
                labels: vec![label("team", "ml"), label("env", "prod")],
                ..ListFilter::default()
            },
            vec!["exec-c", "exec-a"],
        ),
        (
            ListFilter {
                agent_id: Some("agent-y".into()),
                labels: vec![label("env", "prod"), label("team", "ml")],
                ..ListFilter::default()
            },
            vec!["exec-c"],
        ),
        (
            ListFilter {
                status: Some(ExecutionStatus::Pending),
                labels: vec![label("env", "prod")],
                ..ListFilter::default()
            },
            vec!["exec-a"],
        ),
        (
            ListFilter {
                labels: vec![label("team", "nope")],
                ..ListFilter::default()
            },
            vec![],
        ),
        (
            ListFilter {
                labels: vec![label("ml", "team")],
                ..ListFilter::default()
            },
            vec![],
        ),
        (
            ListFilter {
                labels: vec![label("team", "ml"), label("team", "ops")],
                ..ListFilter::default()
            },
            vec![],
        ),
        (
            ListFilter {
                agent_id: Some("agent".into()),
                ..ListFilter::default()
            },
            vec![],
        ),
    ];
    for (filter, expected) in cases {
        let filter = ListFilter {
            limit: 50,
            ..filter
        };
        let rows = store.list_executions(&filter).await.expect("list");
        assert_eq!(ids(&rows), expected, "filter {filter:?}");
    }
}

/// Non-terminal executions come back oldest first (ties by id); terminal ones never do.
pub async fn non_terminal_executions_oldest_first(store: Arc<dyn Store>) {
    let resumed = || NewEvent::execution(EventBody::ExecutionResumed { reason: "r".into() });
    let running = create(&store, "exec-run", "agent-a", &[], at(30)).await;
    commit_each(
        &store,
        &[advance(
            &running,
            at(31),
            ExecutionStatus::Running,
            vec![resumed()],
        )],
    )
    .await;
    let blocked = create(&store, "exec-blk", "agent-a", &[], at(10)).await;
    commit_each(
        &store,
        &[advance(
            &blocked,
            at(32),
            ExecutionStatus::Blocked,
            vec![resumed()],
        )],
    )
    .await;
    create(&store, "exec-p2", "agent-a", &[], at(20)).await;
    create(&store, "exec-p1", "agent-a", &[], at(20)).await;
    for (id, status) in [
        ("exec-done", ExecutionStatus::Completed),
        ("exec-bad", ExecutionStatus::Failed),
        ("exec-off", ExecutionStatus::Cancelled),
    ] {
        let row = create(&store, id, "agent-a", &[], at(1)).await;
        commit_each(&store, &[finish(&row, at(2), status)]).await;
    }
    let found = store
        .non_terminal_executions()
        .await
        .expect("non-terminal read");
    let found: Vec<&str> = found.iter().map(ExecutionId::as_str).collect();
    assert_eq!(found, vec!["exec-blk", "exec-p1", "exec-p2", "exec-run"]);
}

/// Retention deletes only terminal executions updated strictly before the cutoff, oldest
/// first, at most `limit` per call, with all their rows.
pub async fn delete_terminal_before_is_bounded_and_spares_live_executions(store: Arc<dyn Store>) {
    let ended = [
        ("exec-t1", ExecutionStatus::Completed, at(100)),
        ("exec-t2", ExecutionStatus::Failed, at(200)),
        ("exec-t3", ExecutionStatus::Cancelled, at(300)),
        ("exec-edge", ExecutionStatus::Completed, at(5_000)),
        ("exec-recent", ExecutionStatus::Completed, at(10_000)),
    ];
    for (id, status, when) in ended {
        let row = create(&store, id, "agent-a", &[("keep", "no")], at(1)).await;
        commit_each(&store, &[finish(&row, when, status)]).await;
    }
    create(
        &store,
        "exec-old-pending",
        "agent-a",
        &[("keep", "yes")],
        at(0),
    )
    .await;
    let running = create(&store, "exec-old-running", "agent-a", &[], at(2)).await;
    let resumed = NewEvent::execution(EventBody::ExecutionResumed { reason: "r".into() });
    commit_each(
        &store,
        &[advance(
            &running,
            at(50),
            ExecutionStatus::Running,
            vec![resumed],
        )],
    )
    .await;
    let exists = |id: &'static str| {
        let store = store.clone();
        async move {
            store
                .execution(&ExecutionId::new(id))
                .await
                .expect("row read")
                .is_some()
        }
    };

    assert_eq!(
        store
            .delete_terminal_before(at(5_000), 0)
            .await
            .expect("delete"),
        0
    );
    assert_eq!(
        store
            .delete_terminal_before(at(5_000), 2)
            .await
            .expect("delete"),
        2
    );
    assert!(
        !exists("exec-t1").await && !exists("exec-t2").await,
        "oldest go first"
    );
    assert!(exists("exec-t3").await);
    assert!(
        sequences(&store, "exec-t1").await.is_empty(),
        "events are deleted with the execution"
    );
    assert_eq!(
        store
            .delete_terminal_before(at(5_000), 10)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        store
            .delete_terminal_before(at(5_000), 10)
            .await
            .expect("delete"),
        0
    );

    for id in [
        "exec-edge",
        "exec-recent",
        "exec-old-pending",
        "exec-old-running",
    ] {
        assert!(exists(id).await, "{id} is kept");
    }
    assert_eq!(sequences(&store, "exec-old-running").await, vec![1, 2]);
    let gone = ListFilter {
        labels: vec![("keep".into(), "no".into())],
        limit: 50,
        ..ListFilter::default()
    };
    assert_eq!(
        ids(&store.list_executions(&gone).await.expect("list")),
        vec!["exec-recent", "exec-edge"]
    );
    let live = store
        .non_terminal_executions()
        .await
        .expect("non-terminal read");
    assert_eq!(
        live,
        vec![
            ExecutionId::new("exec-old-pending"),
            ExecutionId::new("exec-old-running")
        ]
    );
}
