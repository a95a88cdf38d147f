//! Settings the actor tree is started with.

use std::sync::Arc;
use std::time::Duration;

use crate::execution::ExecutionSettings;
use crate::policy::PolicyEngine;
use crate::store::Store;
use crate::time::Clock;

/// Everything [`start`](super::start) needs.
#[derive(Clone)]
pub struct KernelConfig {
    /// Durable storage.
    pub store: Arc<dyn Store>,
    /// Policy engine answering `invoke_tool` intents.
    pub policy: Arc<dyn PolicyEngine>,
    /// Timeouts and retry settings of executions.
    pub execution: ExecutionSettings,
    /// How long a disconnected agent consumer keeps its sessions (`--agent-timeout`).
    pub agent_grace: Duration,
    /// How long a disconnected runner may take to come back before its in-flight job is
    /// re-queued (or failed when no attempt is left).
    pub runner_grace: Duration,
    /// How long a call into an actor may take before the caller gets a timeout.
    pub call_timeout: Duration,
    /// Push buffer per SSE connection; a consumer that falls this far behind is disconnected.
    pub push_buffer: usize,
    /// Most events committed in one store transaction.
    pub max_batch: usize,
    /// Restarts of one execution actor allowed within `restart_window` before it is failed.
    pub max_restarts: u32,
    /// Window of `max_restarts`.
    pub restart_window: Duration,
    /// How long shutdown waits for the actor tree to stop.
    pub shutdown_timeout: Duration,
    /// Terminal executions last updated longer ago than this are deleted (`None`: keep all).
    pub retention_period: Option<Duration>,
    /// How often the retention clean-up runs.
    pub cleanup_interval: Duration,
    /// Where actors read the current time (the system clock; tests use a tokio-driven one).
    pub clock: Clock,
    /// How long an execution that only waits (pending, or blocked on a signal or an approval
    /// with no tool step in flight) keeps its actor before it is passivated: stopped, and
    /// rebuilt from the store by the next message that concerns it. `None` keeps them resident.
    pub passivate_after: Option<Duration>,
    /// Calls the policy's hooks (docs/hooks.md); `None` runs no hook.
    pub hook_caller: Option<Arc<dyn crate::hooks::HookCaller>>,
    /// Hooks of the policy in force, in order (replaced with the engine on reload).
    pub hooks: Vec<crate::hooks::HookSpec>,
    /// Trace context of spans (docs/tracing.md); `None` when traces are not exported, and then
    /// nothing is recorded or pushed for them.
    pub traces: Option<Arc<dyn crate::trace::TraceContext>>,
    /// Most distinct agent, tool and runner ids shown as metric label values (`other` past it).
    pub metrics_max_ids: usize,
    /// Whether [`start`](super::start) recovers every open execution of the store. Cluster mode
    /// turns it off: a kernel loads the open executions of each partition when it acquires it
    /// ([`Kernel::recover_partitions`](super::Kernel::recover_partitions)).
    pub recover_at_start: bool,
    /// Cluster mode: whether this kernel owns an execution now. Agent groups offer only those
    /// (another kernel's are matched there, with the same consumers bridged to it).
    pub owns: Option<crate::execution::ReleaseFilter>,
}

impl KernelConfig {
    /// Returns a configuration with the documented defaults.
    pub fn new(store: Arc<dyn Store>, policy: Arc<dyn PolicyEngine>) -> Self {
        Self {
            store,
            policy,
            execution: ExecutionSettings::default(),
            agent_grace: Duration::from_secs(10),
            runner_grace: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            push_buffer: 1024,
            max_batch: 512,
            max_restarts: 3,
            restart_window: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
            retention_period: Some(Duration::from_secs(168 * 3600)),
            cleanup_interval: Duration::from_secs(3600),
            clock: Clock::System,
            passivate_after: Some(Duration::from_secs(1)),
            hook_caller: None,
            hooks: Vec::new(),
            traces: None,
            metrics_max_ids: crate::metrics::labels::DEFAULT_MAX_IDS,
            recover_at_start: true,
            owns: None,
        }
    }
}
