//! The writer thread's loop: takes requests off the channel, folds waiting commit groups into
//! one transaction (up to `MAX_FOLDED` commits) and answers each request once its work is done.

use std::sync::Arc;
use std::sync::mpsc;

use keel_actors::metrics::Metrics;

use super::super::checkpoint::Checkpointer;
use super::super::connection::Writer;
use super::super::ready::ReadyCommit;
use super::super::write;
use super::{CommitReply, MAX_FOLDED, Request};

/// Serves requests until `Close` or until every handle is dropped. The checkpointer is stopped
/// before the connection is closed either way, so the writer's is the file's last connection.
pub(super) fn serve(
    mut writer: Writer,
    checkpointer: Checkpointer,
    requests: &mpsc::Receiver<Request>,
) {
    let mut next: Option<Request> = None;
    let mut metrics: Option<Arc<Metrics>> = None;
    loop {
        let request = match next.take() {
            Some(request) => request,
            None => match requests.recv() {
                Ok(request) => request,
                Err(_) => break,
            },
        };
        match request {
            Request::Commit {
                group,
                all_or_nothing: false,
                reply,
                caller,
            } => {
                let first = (group, reply, caller);
                next = fold_and_commit(&mut writer, requests, first, metrics.as_deref());
            }
            Request::Commit {
                group,
                all_or_nothing,
                reply,
                caller,
            } => {
                let span = super::super::commit_span::store_commit_span(
                    &group,
                    std::slice::from_ref(&caller),
                );
                let results = span.in_scope(|| writer.commit_group(&group, all_or_nothing));
                if let Some(metrics) = &metrics {
                    metrics.commit_transaction(group.len());
                }
                let _ = reply.send((results, group));
            }
            Request::DeleteTerminal {
                before,
                limit,
                reply,
            } => {
                let result = writer.in_transaction(|connection| {
                    write::delete_terminal_before(connection, &before, limit)
                });
                let _ = reply.send(result);
            }
            Request::SetWebhookPosition {
                id,
                position,
                reply,
            } => {
                let result = writer.in_transaction(|connection| {
                    write::set_webhook_position(connection, &id, position)
                });
                let _ = reply.send(result);
            }
            Request::PutApiKeys { keys, reply } => {
                let result = writer.in_transaction(|connection| {
                    super::super::super::keys::sqlite_put_keys(connection, &keys)
                });
                let _ = reply.send(result);
            }
            #[cfg(test)]
            Request::Pragma { name, reply } => {
                let result = writer
                    .connection
                    .query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
                    .map_err(write::map_rusqlite_error);
                let _ = reply.send(result);
            }
            #[cfg(test)]
            Request::Hold { release } => {
                let _ = release.recv_timeout(std::time::Duration::from_secs(10));
            }
            #[cfg(test)]
            Request::Checkpoints { reply } => {
                let _ = reply.send(checkpointer.complete());
            }
            Request::Observe(observer) => metrics = Some(observer),
            Request::Close { reply } => {
                // Closing the last connection checkpoints the WAL; it must finish before the
                // caller releases the kernel lock.
                drop(checkpointer);
                drop(writer);
                let _ = reply.send(());
                return;
            }
        }
    }
    drop(checkpointer);
    drop(writer);
}

/// Commits `group` and the independent groups already waiting behind it in the channel (up to
/// `MAX_FOLDED` commits) in one transaction, and answers each group its own results: a commit
/// that fails still fails alone, so folding changes nothing but the number of transactions.
/// Returns the request that stopped the folding (not a group, or an all-or-nothing one), to be
/// served next.
fn fold_and_commit(
    writer: &mut Writer,
    requests: &mpsc::Receiver<Request>,
    (group, reply, caller): (Vec<ReadyCommit>, CommitReply, tracing::Span),
    metrics: Option<&Metrics>,
) -> Option<Request> {
    let mut sizes = vec![group.len()];
    let mut replies = vec![reply];
    let mut callers = vec![caller];
    let mut folded = group;
    let mut stopped = None;
    while folded.len() < MAX_FOLDED {
        match requests.try_recv() {
            Ok(Request::Commit {
                group,
                all_or_nothing: false,
                reply,
                caller,
            }) => {
                sizes.push(group.len());
                replies.push(reply);
                callers.push(caller);
                folded.extend(group);
            }
            Ok(other) => {
                stopped = Some(other);
                break;
            }
            Err(_) => break,
        }
    }
    let span = super::super::commit_span::store_commit_span(&folded, &callers);
    let mut results = span
        .in_scope(|| writer.commit_group(&folded, false))
        .into_iter();
    if let Some(metrics) = metrics {
        metrics.commit_transaction(folded.len());
    }
    let mut spent = folded.into_iter();
    for (size, reply) in sizes.into_iter().zip(replies) {
        let answer = (
            results.by_ref().take(size).collect(),
            spent.by_ref().take(size).collect(),
        );
        let _ = reply.send(answer);
    }
    stopped
}
