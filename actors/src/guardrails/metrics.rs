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

/// Guardrail metrics.
#[derive(Clone, Debug, Default)]
pub struct GuardrailMetrics {
    /// Circuit breakers opened and closed, by tool id and state entered.
    pub circuit_transitions: Family<CircuitLabels, Counter>,
    /// Tool ids whose breaker is open or half-open.
    pub circuits_open: Gauge,
    /// Intents denied by a budget, by budget.
    pub budget_denials: Family<BudgetLabel, Counter>,
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
        metrics
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
