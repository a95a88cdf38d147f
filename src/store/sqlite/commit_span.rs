//! The trace span of one SQLite write transaction (docs/tracing.md).

use super::ready::ReadyCommit;

/// The span of one transaction: a root of its own (it serves many executions) with its batch
/// size, linked to the span of every caller it answers. Disabled when traces are off.
pub(super) fn store_commit_span(
    commits: &[ReadyCommit],
    callers: &[tracing::Span],
) -> tracing::Span {
    let span = tracing::info_span!(
        target: keel_actors::trace::TARGET,
        parent: None,
        "store commit",
        batch.size = commits.len(),
        batch.events = commits.iter().map(|ready| ready.commit.events.len()).sum::<usize>(),
    );
    if !span.is_disabled() {
        for caller in callers {
            span.follows_from(caller.id());
        }
    }
    span
}
