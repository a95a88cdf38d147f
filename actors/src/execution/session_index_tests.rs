//! `ctx.sessions` maps the session of each execution that is not terminal to its execution (for
//! the session errors of WIRE.md §9.2). A terminal execution leaves the map, as after a restart
//! (recovery only enters non-terminal ones): before, every completed execution kept its entry
//! for the life of the process, about 100 bytes each and one of the allocations that kept a
//! burst's memory pinned (docs/benchmarks.md, T6).

use serde_json::json;

use super::test_support::{allow_all, running, start};
use crate::execution::Intent;
use crate::execution::Rejection;
use crate::kernel::KernelError;

#[tokio::test]
async fn a_finished_execution_leaves_the_session_index() {
    let t = start(allow_all(), |_| {}).await;
    let ctx = t.kernel.ctx.clone();
    let first = running(&t, "c1").await;
    assert_eq!(ctx.session_owner(&first.session), Some(first.id.clone()));

    let reply = t
        .kernel
        .submit_intent(
            &first.id,
            &first.session,
            Intent::Complete {
                output: Some(json!(1)),
            },
        )
        .await
        .expect("complete");
    assert!(reply.accepted, "{reply:?}");
    assert_eq!(ctx.session_owner(&first.session), None);
    assert!(crate::kernel::context::read(&ctx.sessions).is_empty());

    // Its session used on another execution is now unknown (401), as after a restart.
    let second = running(&t, "c2").await;
    let refused = t
        .kernel
        .submit_intent(
            &second.id,
            &first.session,
            Intent::Complete {
                output: Some(json!(2)),
            },
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(KernelError::Rejected(Rejection::SessionNotFound(_)))
        ),
        "{refused:?}"
    );
    assert_eq!(ctx.session_owner(&second.session), Some(second.id.clone()));
}
