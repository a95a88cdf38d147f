//! A whole kernel on a [`MemoryStore`], with a clock driven by tokio's (so `start_paused`
//! tests move wall time and timers together); `eventually` for polling without sleeps.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::memory_store::MemoryStore;
use crate::kernel::{Kernel, KernelConfig};
use crate::policy::{PermissiveEngine, PolicyEngine};
use crate::time::{Clock, Timestamp};

/// A kernel on a memory store, for message-level tests.
pub struct TestKernel {
    /// The handle.
    pub kernel: Kernel,
    /// Its store.
    pub store: Arc<MemoryStore>,
    /// Its clock (wall time advanced by tokio's clock); a restarted kernel keeps it.
    pub clock: Clock,
    /// Tasks the runtime ran before the kernel started (the leak check's baseline).
    baseline: Option<usize>,
}

impl TestKernel {
    /// Starts a kernel with the permissive policy and a short grace period.
    pub async fn start() -> Self {
        Self::start_with(
            Arc::new(MemoryStore::default()),
            Arc::new(PermissiveEngine),
            |_| {},
        )
        .await
    }

    /// Starts a kernel on `store` with `policy`, letting `adjust` change the configuration.
    /// Its clock is [`Clock::tokio`] unless `adjust` sets another.
    pub async fn start_with(
        store: Arc<MemoryStore>,
        policy: Arc<dyn PolicyEngine>,
        adjust: impl FnOnce(&mut KernelConfig),
    ) -> Self {
        let mut config = KernelConfig::new(store.clone(), policy);
        config.agent_grace = Duration::from_millis(200);
        config.call_timeout = Duration::from_secs(5);
        config.clock = Clock::tokio();
        adjust(&mut config);
        let clock = config.clock.clone();
        let baseline = super::leak::alive_tasks();
        match crate::kernel::start(config).await {
            Ok(kernel) => Self {
                kernel,
                store,
                clock,
                baseline,
            },
            Err(error) => panic!("test kernel did not start: {error}"),
        }
    }

    /// Stops this kernel and starts a new one on the same store and clock (a kernel restart);
    /// `adjust` configures the new one as [`start_with`](Self::start_with) does.
    pub async fn restart(
        self,
        policy: Arc<dyn PolicyEngine>,
        adjust: impl FnOnce(&mut KernelConfig),
    ) -> Self {
        let (store, clock) = (self.store.clone(), self.clock.clone());
        self.shutdown().await;
        Self::start_with(store, policy, |config| {
            adjust(config);
            config.clock = clock;
        })
        .await
    }

    /// Stops the kernel and checks that every actor of its tree stopped and that the runtime
    /// runs no more tasks than before the kernel started (the leak check): every actor's
    /// timers are aborted when it stops. Tasks the test itself started after the kernel must
    /// have ended by then.
    pub async fn shutdown(self) {
        let mut tree = Vec::new();
        let root = self
            .kernel
            .ctx
            .root
            .get()
            .expect("a started kernel has its root");
        super::leak::walk("kernel", &root.get_cell(), &mut tree);
        self.kernel.shutdown().await;
        let wait = self.kernel.ctx.config.shutdown_timeout;
        let baseline = self.baseline;
        drop(self);
        super::leak::assert_stopped(&tree, baseline, wait).await;
    }
}

/// Sleeps until `clock` reads `at` (exact under paused time with a [`Clock::tokio`] clock);
/// returns at once for a time already past.
pub async fn sleep_until(clock: &Clock, at: Timestamp) {
    match clock {
        Clock::Tokio { wall, start } => {
            let offset = (at - *wall).to_std().unwrap_or_default();
            tokio::time::sleep_until(*start + offset).await;
        }
        Clock::System => {
            tokio::time::sleep((at - crate::time::now()).to_std().unwrap_or_default()).await
        }
    }
}

/// Polls `check` until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
