//! The store writer alone (with the policy actor `ProbeContext` starts beside it) on a memory
//! store: a commit is answered only once durable, a failing store fails every waiting caller
//! and writes nothing, a commit that lands but whose answer is lost is reported as failed, and
//! the writer carries on once the store is back.

use std::sync::Arc;

use serde_json::json;

use crate::error::StoreError;
use crate::execution::actor::record_creation;
use crate::ids::{AgentId, ExecutionId};
use crate::kernel::KernelError;
use crate::policy::PermissiveEngine;
use crate::testing::ProbeContext;

#[tokio::test]
async fn a_commit_is_answered_once_durable_and_a_failing_store_fails_it_without_writing() {
    let probes = ProbeContext::start("a", Arc::new(PermissiveEngine)).await;
    let ctx = probes.ctx.clone();
    let mut notices = ctx.commits.subscribe();

    let first = ExecutionId::generate();
    record_creation(&ctx, &first, &"a".into(), json!(1), None)
        .await
        .expect("committed");
    assert_eq!(
        probes.store.all_events(&first).len(),
        1,
        "durable when answered"
    );
    assert_eq!(probes.store.transactions(), 1);
    let notice = notices
        .try_recv()
        .expect("a commit notice after the commit");
    assert_eq!(notice.execution_id, first);

    // The database goes away: every caller hears it, nothing is written or announced.
    probes.store.fail_commits(true);
    let (second, third) = (ExecutionId::generate(), ExecutionId::generate());
    let agent = AgentId::from("a");
    let (left, right) = tokio::join!(
        record_creation(&ctx, &second, &agent, json!(2), None),
        record_creation(&ctx, &third, &agent, json!(3), None),
    );
    for result in [left, right] {
        assert!(
            matches!(result, Err(KernelError::Store(StoreError::Unavailable(_)))),
            "{:?}",
            result.err()
        );
    }
    assert!(probes.store.all_events(&second).is_empty());
    assert!(probes.store.all_events(&third).is_empty());
    assert_eq!(probes.store.transactions(), 1);
    assert!(notices.try_recv().is_err(), "no notice for a failed commit");

    // The connection dies during COMMIT: the rows landed, the caller is told it failed.
    probes.store.fail_commits(false);
    probes.store.lose_commit_answers(true);
    let fourth = ExecutionId::generate();
    let lost = record_creation(&ctx, &fourth, &"a".into(), json!(4), None).await;
    assert!(lost.is_err());
    assert_eq!(probes.store.all_events(&fourth).len(), 1);

    // Back: the writer was not stopped by the failures.
    probes.store.lose_commit_answers(false);
    let fifth = ExecutionId::generate();
    record_creation(&ctx, &fifth, &"a".into(), json!(5), None)
        .await
        .expect("committed after the outage");
    assert_eq!(probes.store.all_events(&fifth).len(), 1);
    probes.finish().await;
}
