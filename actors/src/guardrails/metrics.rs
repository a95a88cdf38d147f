//! Metrics of the guardrails, registered with the kernel's other metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of the circuit breaker transition counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CircuitLabels {
    /// Tool id of the breaker.
    pub tool_id: String,
    /// `open` or `closed`: the state entered.
    pub state: String,
}

/// Label set with the budget that denied an intent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabel {
    /// `max_steps`, `max_calls_per_tool`, `max_wall_time`, `max_cost`.
    pub budget: String,
}

/// Labels of the runner circuit breaker transition counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunnerCircuitLabels {
    /// Runner id of the breaker.
    pub runner_id: String,
    /// `open` or `closed`: the state entered.
    pub state: String,
}

/// Labels of the concurrency gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConcurrencyLabels {
    /// `agent` (running executions of an agent id), `label` (those of an agent id carrying a
    /// limited label, all values together) or `tool` (steps of a tool id).
    pub scope: String,
    /// The agent id, `<agent id>/<label key>`, or the tool id.
    pub id: String,
}

/// Guardrail metrics.
#[derive(Clone, Debug, Default)]
pub struct GuardrailMetrics {
    /// Circuit breakers opened and closed, by tool id and state entered.
    pub circuit_transitions: Family<CircuitLabels, Counter>,
    /// Tool ids whose breaker is open or half-open.
    pub circuits_open: Gauge,
    /// Intents denied by a budget, by budget.
    pub budget_denials: Family<BudgetLabel, Counter>,
    /// Slots in use of each agent id or tool id that has a concurrency limit.
    pub concurrency_in_use: Family<ConcurrencyLabels, Gauge>,
    /// Work held back by a concurrency limit now (pending executions, queued jobs).
    pub concurrency_waiting: Family<ConcurrencyLabels, Gauge>,
    /// Runner circuit breakers opened and closed, by runner id and state entered.
    pub runner_circuit_transitions: Family<RunnerCircuitLabels, Counter>,
    /// Runner ids whose breaker is open or half-open.
    pub runner_circuits_open: Gauge,
    /// Local tool calls denied because the tool was at its `max_concurrent_steps`.
    pub concurrency_denials: Family<ScopeLabel, Counter>,
    /// The tool and runner ids shown as label values.
    pub ids: std::sync::Arc<crate::metrics::labels::IdLabels>,
}

/// Label set with the scope of a concurrency limit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabel {
    /// `tool`.
    pub scope: String,
}

impl GuardrailMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "circuit_transitions",
            "Circuit breakers opened and closed, by tool id and state entered",
            metrics.circuit_transitions.clone(),
        );
        registry.register(
            "circuits_open",
            "Tool ids whose circuit breaker is open or half-open",
            metrics.circuits_open.clone(),
        );
        registry.register(
            "budget_denials",
            "Intents denied because an execution budget was spent, by budget",
            metrics.budget_denials.clone(),
        );
        registry.register(
            "concurrency_slots_in_use",
            "Slots in use of each agent id (running executions), agent id and limited label key (its running executions with the label) or tool id (remote steps) that has a concurrency limit",
            metrics.concurrency_in_use.clone(),
        );
        registry.register(
            "concurrency_waiting",
            "Work held back by a concurrency limit: pending executions of an agent id at its max_running or whose label value is full, queued jobs of a tool id at its max_concurrent_steps",
            metrics.concurrency_waiting.clone(),
        );
        registry.register(
            "concurrency_denials",
            "Local tool calls denied because the tool was at its max_concurrent_steps",
            metrics.concurrency_denials.clone(),
        );
        registry.register(
            "runner_circuit_transitions",
            "Runner circuit breakers opened and closed, by runner id and state entered",
            metrics.runner_circuit_transitions.clone(),
        );
        registry.register(
            "runner_circuits_open",
            "Runner ids whose circuit breaker is open or half-open",
            metrics.runner_circuits_open.clone(),
        );
        metrics
    }

    /// Counts one call denied by a concurrency limit of `scope`.
    pub fn concurrency_denied(&self, scope: &str) {
        self.concurrency_denials
            .get_or_create(&ScopeLabel {
                scope: scope.to_owned(),
            })
            .inc();
    }

    /// Counts and logs a runner breaker change; `open` runner breakers are open now.
    pub fn runner_circuit(&self, change: &crate::guardrails::breaker::BreakerChange, open: usize) {
        use crate::guardrails::breaker::BreakerChange;
        let (runner_id, state) = match change {
            BreakerChange::Opened {
                tool_id,
                failures,
                until,
                ..
            } => {
                tracing::warn!(runner.id = %tool_id, failures, until = %crate::time::format(until), "runner circuit breaker opened: no jobs until the cool-down passed");
                (tool_id, "open")
            }
            BreakerChange::Closed { tool_id } => {
                tracing::info!(runner.id = %tool_id, "runner circuit breaker closed");
                (tool_id, "closed")
            }
        };
        self.runner_circuit_transitions
            .get_or_create(&RunnerCircuitLabels {
                runner_id: self.ids.label(runner_id),
                state: state.to_owned(),
            })
            .inc();
        self.runner_circuits_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Shows the slots of `scope`/`id` (`limit` `None`: no limit, the series are removed).
    pub fn concurrency(
        &self,
        scope: &str,
        id: &str,
        limit: Option<u32>,
        used: usize,
        waiting: usize,
    ) {
        let labels = ConcurrencyLabels {
            scope: scope.to_owned(),
            id: crate::metrics::labels::escape(id),
        };
        if limit.is_none() {
            self.concurrency_in_use.remove(&labels);
            self.concurrency_waiting.remove(&labels);
            return;
        }
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        self.concurrency_in_use
            .get_or_create(&labels)
            .set(gauge(used));
        self.concurrency_waiting
            .get_or_create(&labels)
            .set(gauge(waiting));
    }

    /// Counts one budget denial by the limit reached.
    pub fn budget_denied(&self, limit: super::budget::BudgetLimit) {
        self.budget_denials
            .get_or_create(&BudgetLabel {
                budget: limit.as_str().to_owned(),
            })
            .inc();
    }
}
