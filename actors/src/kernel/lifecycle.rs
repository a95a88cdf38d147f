//! Starting the kernel (the actor tree, the retention janitor, startup recovery) and stopping
//! it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ractor::Actor;
use tokio::sync::{broadcast, oneshot};

use super::config::KernelConfig;
use super::context::Ctx;
use super::handle::Kernel;
use super::root::{KernelSupervisor, RootArgs};
use super::types::KernelError;
use crate::metrics::Metrics;

/// Starts the actor tree, recovers every non-terminal execution from the store, and returns
/// the handle.
pub async fn start(config: KernelConfig) -> Result<Kernel, KernelError> {
    let (commits, _) = broadcast::channel(4096);
    let metrics = Arc::new(Metrics::new());
    metrics.set_max_id_labels(config.metrics_max_ids);
    if config.owns.is_some() {
        metrics.track_live_executions();
    }
    let ctx = Arc::new(Ctx::new(config, metrics, commits));
    let (ready, ready_rx) = oneshot::channel();
    let (root, _) = Actor::spawn(
        None,
        KernelSupervisor,
        RootArgs {
            ctx: ctx.clone(),
            ready,
        },
    )
    .await
    .map_err(|error| KernelError::Unavailable(format!("actor tree did not start: {error}")))?;
    let _ = ctx.root.set(root);
    ready_rx
        .await
        .map_err(|_| KernelError::Unavailable("actor tree did not start".into()))?;
    if let Some(period) = ctx.config.retention_period {
        let janitor = tokio::spawn(super::retention::retention_loop(
            ctx.store.clone(),
            ctx.metrics.clone(),
            ctx.clock.clone(),
            period,
            ctx.config.cleanup_interval,
        ));
        let _ = ctx.janitor.set(janitor);
    }
    let kernel = Kernel { ctx };
    if kernel.ctx.config.recover_at_start {
        kernel.recover().await?;
    }
    Ok(kernel)
}

impl Kernel {
    /// Stops the actor tree (top-down, bounded by the shutdown deadline), then closes the
    /// store, which releases the database to the next kernel at once (a restart does not wait
    /// for the server to notice a dropped connection). Idempotent.
    pub async fn shutdown(&self) {
        if self.ctx.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(janitor) = self.ctx.janitor.get() {
            janitor.abort();
        }
        let started = std::time::Instant::now();
        let timeout = self.ctx.config.shutdown_timeout;
        if let Some(root) = self.ctx.root.get() {
            let _ = root
                .stop_and_wait(Some("kernel shutdown".into()), Some(timeout))
                .await;
        }
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "actor tree stopped"
        );
        self.ctx.store.close().await;
    }
}
