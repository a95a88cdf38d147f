//! Retention: terminal executions older than the retention period are deleted in bounded
//! batches.

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::store::Store;

/// Rows deleted per retention transaction.
const RETENTION_BATCH: i64 = 100;

/// Deletes terminal executions older than `period`, every `interval`, in bounded batches.
pub(super) async fn retention_loop(
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    clock: crate::time::Clock,
    period: std::time::Duration,
    interval: std::time::Duration,
) {
    let mut ticker = tokio::time::interval(interval.max(std::time::Duration::from_secs(1)));
    loop {
        ticker.tick().await;
        let Ok(age) = chrono::Duration::from_std(period) else {
            return;
        };
        let before = clock.now() - age;
        let mut total = 0u64;
        loop {
            match store.delete_terminal_before(before, RETENTION_BATCH).await {
                Ok(deleted) => {
                    total += deleted;
                    metrics.retention_deleted.inc_by(deleted);
                    if deleted < RETENTION_BATCH as u64 {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %error, "retention clean-up failed");
                    break;
                }
            }
        }
        if total > 0 {
            tracing::info!(
                deleted = total,
                "retention clean-up deleted terminal executions"
            );
        }
    }
}
