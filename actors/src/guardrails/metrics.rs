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

/// Labels of the concurrency gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConcurrencyLabels {
    /// `agent` (running executions of an agent id) or `tool` (steps of a tool id).
    pub scope: String,
    /// The agent id or tool id.
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
            "Slots in use of each agent id (running executions) or tool id (remote steps) that has a concurrency limit",
            metrics.concurrency_in_use.clone(),
        );
        registry.register(
            "concurrency_waiting",
            "Work held back by a concurrency limit: pending executions of an agent id at its max_running, queued jobs of a tool id at its max_concurrent_steps",
            metrics.concurrency_waiting.clone(),
        );
        metrics
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
            id: id.to_owned(),
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

    /// Counts one budget denial; `reason` starts with `budget exceeded: <budget> ...`.
    pub fn budget_denied(&self, reason: &str) {
        let budget = reason
            .strip_prefix("budget exceeded: ")
            .and_then(|rest| rest.split([' ', '.']).next())
            .unwrap_or("unknown");
        self.budget_denials
            .get_or_create(&BudgetLabel {
                budget: budget.to_owned(),
            })
            .inc();
    }
}
