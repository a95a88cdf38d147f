//! Kernel metrics (Prometheus via `prometheus-client`). One `Metrics` per kernel, registered in
//! its own registry so that tests running several kernels do not share counters.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::status::ExecutionStatus;

pub mod labels;
mod live_tally;
pub mod llm;
mod operator;
mod record;

pub use operator::{AgentLabel, HttpLabels, OperatorMetrics, StepLabels, ToolLabel};

/// Label set with a single `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// Status name.
    pub status: String,
}

/// Labels of the intent counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IntentLabels {
    /// Intent type.
    pub r#type: String,
    /// `accepted`, `denied`, `rate_limited` or `pending_approval`.
    pub decision: String,
}

/// Labels of the policy decision counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// Decision name.
    pub decision: String,
    /// Rule that decided.
    pub rule_id: String,
}

/// Label set with a single `result` (`ok`, `error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// Outcome name.
    pub result: String,
}

/// Label set with a single `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// Kind name (`agent`, `runner`, `execution`; actor kinds).
    pub kind: String,
}

/// Labels of supervision events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SupervisionLabels {
    /// Actor kind.
    pub kind: String,
    /// `started`, `stopped`, `failed`, `restarted`, `gave_up`.
    pub event: String,
}

/// The statuses `executions` counts (the terminal ones are counted by `executions_total`).
const LIVE_STATUSES: [ExecutionStatus; 3] = [
    ExecutionStatus::Pending,
    ExecutionStatus::Running,
    ExecutionStatus::Blocked,
];

/// Every metric the kernel exposes.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Recent supervision events (what `supervision::report` logged), for tests and diagnostics.
    pub supervision_log: crate::supervision::SupervisionLog,
    /// Executions currently in each status.
    pub executions: Family<StatusLabel, Gauge>,
    /// `executions`' gauges of the three non-terminal statuses, taken from the family once:
    /// every commit that changes a status moves one (no label allocated, hashed and looked up).
    live: [Gauge; 3],
    /// Cluster mode: the status each live execution is counted under.
    tally: live_tally::LiveTally,
    /// Executions created and ended, by outcome.
    pub executions_total: Family<StatusLabel, Counter>,
    /// Intents processed, by type and decision.
    pub intents: Family<IntentLabels, Counter>,
    /// Policy decisions, by decision and rule.
    pub policy_decisions: Family<RuleLabels, Counter>,
    /// Policy reloads (file change, SIGHUP), by result.
    pub policy_reloads: Family<ResultLabel, Counter>,
    /// Steps that ended, by outcome.
    pub steps: Family<StatusLabel, Counter>,
    /// Open SSE connections, by kind.
    pub sse_connections: Family<KindLabel, Gauge>,
    /// Supervision events, by actor kind and event.
    pub supervision: Family<SupervisionLabels, Counter>,
    /// Store commit latency in seconds.
    pub commit_seconds: Histogram,
    /// Executions per store transaction (group commit).
    pub commit_batch: Histogram,
    /// Terminal executions deleted by retention.
    pub retention_deleted: Counter,
    /// Stalls reported by the watchdog, by kind (`no_intent`, `job_not_started`).
    pub stalls: Family<KindLabel, Counter>,
    /// Tool calls of re-runs answered from the journal, by kind (`remote`, `local`).
    pub steps_replayed: Family<KindLabel, Counter>,
    /// Creations refused because a backlog bound was reached, by kind (`agent`, `kernel`).
    pub backlog_refused: Family<KindLabel, Counter>,
    /// SSE consumers disconnected because their push buffer was full, by kind (`agent`).
    pub slow_consumers: Family<KindLabel, Counter>,
    /// Execution actors stopped because their execution only waits.
    pub passivations: Counter,
    /// Passivated executions with a wake-up time in the supervisor's index.
    pub executions_dormant: Gauge,
    /// Step durations, policy latency, HTTP durations and queue depths.
    pub operator: OperatorMetrics,
    /// Budgets and circuit breakers.
    pub guardrails: crate::guardrails::metrics::GuardrailMetrics,
    /// Model calls through the LLM gateway.
    pub llm: llm::LlmMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("keel");
        let executions = Family::<StatusLabel, Gauge>::default();
        let executions_total = Family::<StatusLabel, Counter>::default();
        let intents = Family::<IntentLabels, Counter>::default();
        let policy_decisions = Family::<RuleLabels, Counter>::default();
        let policy_reloads = Family::<ResultLabel, Counter>::default();
        let steps = Family::<StatusLabel, Counter>::default();
        let sse_connections = Family::<KindLabel, Gauge>::default();
        let supervision = Family::<SupervisionLabels, Counter>::default();
        let commit_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let commit_batch = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        let retention_deleted = Counter::default();
        let stalls = Family::<KindLabel, Counter>::default();
        let steps_replayed = Family::<KindLabel, Counter>::default();
        let backlog_refused = Family::<KindLabel, Counter>::default();
        let slow_consumers = Family::<KindLabel, Counter>::default();
        let passivations = Counter::default();
        let executions_dormant = Gauge::default();
        registry.register(
            "execution_passivations",
            "Execution actors stopped while their execution waits (rebuilt from the store on demand)",
            passivations.clone(),
        );
        registry.register(
            "dormant_executions",
            "Passivated executions waiting for a deadline in the wake-up index",
            executions_dormant.clone(),
        );
        registry.register(
            "live_executions",
            "Non-terminal executions by current status",
            executions.clone(),
        );
        registry.register(
            "executions",
            "Executions created and ended, by outcome",
            executions_total.clone(),
        );
        registry.register(
            "intents",
            "Intents processed by type and decision",
            intents.clone(),
        );
        registry.register(
            "policy_decisions",
            "Policy decisions by decision and rule",
            policy_decisions.clone(),
        );
        registry.register(
            "policy_reloads",
            "Policy reloads by result",
            policy_reloads.clone(),
        );
        registry.register("steps", "Steps ended by outcome", steps.clone());
        registry.register(
            "sse_connections",
            "Open SSE connections by kind",
            sse_connections.clone(),
        );
        registry.register(
            "supervision_events",
            "Actor supervision events",
            supervision.clone(),
        );
        registry.register(
            "store_commit_seconds",
            "Store commit latency",
            commit_seconds.clone(),
        );
        registry.register(
            "store_commit_batch_size",
            "Executions per store transaction (group commit)",
            commit_batch.clone(),
        );
        registry.register(
            "retention_deleted_executions",
            "Terminal executions deleted by retention",
            retention_deleted.clone(),
        );
        registry.register(
            "stalls",
            "Stalls reported by the watchdog, by kind",
            stalls.clone(),
        );
        registry.register(
            "steps_replayed",
            "Tool calls of re-runs answered from the journal instead of run again, by kind",
            steps_replayed.clone(),
        );
        registry.register(
            "backlog_refused",
            "Creations refused with 429 because a backlog bound was reached, by kind",
            backlog_refused.clone(),
        );
        registry.register(
            "slow_consumers_disconnected",
            "SSE consumers disconnected because they could not keep up with their pushes, by kind",
            slow_consumers.clone(),
        );
        let operator = OperatorMetrics::register(&mut registry);
        let guardrails = crate::guardrails::metrics::GuardrailMetrics::register(&mut registry);
        let llm = llm::LlmMetrics::register(&mut registry);
        let live = LIVE_STATUSES.map(|status| {
            executions
                .get_or_create(&StatusLabel {
                    status: status.as_str().to_owned(),
                })
                .clone()
        });
        Self {
            live,
            tally: live_tally::LiveTally::default(),
            operator,
            guardrails,
            llm,
            registry: Mutex::new(registry),
            supervision_log: crate::supervision::SupervisionLog::default(),
            executions,
            executions_total,
            intents,
            policy_decisions,
            policy_reloads,
            steps,
            sse_connections,
            supervision,
            commit_seconds,
            commit_batch,
            retention_deleted,
            stalls,
            steps_replayed,
            backlog_refused,
            slow_consumers,
            passivations,
            executions_dormant,
        }
    }

    /// Bounds the distinct agent, tool and runner ids shown as label values
    /// (`--metrics-max-ids`); ids past it are counted under `other`.
    pub fn set_max_id_labels(&self, limit: usize) {
        self.operator.ids.set_limit(limit);
        self.guardrails.ids.set_limit(limit);
    }

    /// Registers a metric kept outside this struct (the webhook deliveries' metrics, for one),
    /// so `/metrics` shows it with the others under the `keel_` prefix.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        let mut registry = match self.registry.lock() {
            Ok(registry) => registry,
            Err(poisoned) => poisoned.into_inner(),
        };
        registry.register(name, help, metric);
    }

    /// Returns the text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = match self.registry.lock() {
            Ok(registry) => registry,
            Err(poisoned) => poisoned.into_inner(),
        };
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            text.clear();
        }
        text
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
