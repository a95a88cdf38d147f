//! What the kernel records through [`Metrics`]: live executions moving between status gauges,
//! and one method per counted occurrence (outcomes, intents, policy decisions, steps, streams,
//! supervision, stalls, commits). The families themselves are built in `metrics.rs`.

use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

use super::labels;
use super::{
    IntentLabels, KindLabel, LIVE_STATUSES, Metrics, ResultLabel, RuleLabels, StatusLabel,
    SupervisionLabels,
};
use crate::ids::ExecutionId;
use crate::status::ExecutionStatus;

impl Metrics {
    /// Cluster mode: counts each live execution under the status recorded for it, so that
    /// [`Self::executions_released`] takes back exactly what was counted.
    pub fn track_live_executions(&self) {
        self.tally.turn_on();
    }

    /// Moves live execution `id` from one status gauge to another. The gauge counts
    /// non-terminal executions only; ended ones are counted by `executions_total`. With
    /// [`Self::track_live_executions`], `from` is the status it was counted under instead.
    pub fn execution_moved(
        &self,
        id: &ExecutionId,
        from: Option<ExecutionStatus>,
        to: ExecutionStatus,
    ) {
        let from = self.tally.moved(id, from, to);
        if from == Some(to) {
            return;
        }
        if let Some(gauge) = from.and_then(|from| self.live_gauge(from)) {
            gauge.dec();
        }
        if let Some(gauge) = self.live_gauge(to) {
            gauge.inc();
        }
    }

    /// Cluster mode: the executions `matches` selects left this kernel (their partition
    /// moved): they leave the gauges they were counted in.
    pub fn executions_released(&self, matches: &dyn Fn(&ExecutionId) -> bool) {
        for status in self.tally.forget(matches) {
            if let Some(gauge) = self.live_gauge(status) {
                gauge.dec();
            }
        }
    }

    /// Returns the `executions` gauge of a non-terminal status.
    fn live_gauge(&self, status: ExecutionStatus) -> Option<&Gauge> {
        let index = LIVE_STATUSES.iter().position(|live| *live == status)?;
        self.live.get(index)
    }

    /// Counts an execution lifecycle outcome (`created`, `completed`, ...).
    pub fn execution_outcome(&self, status: &str) {
        self.executions_total
            .get_or_create(&StatusLabel {
                status: status.to_owned(),
            })
            .inc();
    }

    /// Counts one processed intent.
    pub fn intent(&self, intent_type: &str, decision: &str) {
        let labels = IntentLabels {
            r#type: intent_type.to_owned(),
            decision: decision.to_owned(),
        };
        self.intents.get_or_create(&labels).inc();
    }

    /// Counts one policy decision.
    pub fn policy_decision(&self, decision: &str, rule_id: &str) {
        let labels = RuleLabels {
            decision: decision.to_owned(),
            rule_id: labels::escape(rule_id),
        };
        self.policy_decisions.get_or_create(&labels).inc();
    }

    /// Counts one policy reload attempt (`ok` or `error`).
    pub fn policy_reload(&self, result: &str) {
        self.policy_reloads
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts one ended step.
    pub fn step_ended(&self, status: &str) {
        self.steps
            .get_or_create(&StatusLabel {
                status: status.to_owned(),
            })
            .inc();
    }

    /// Counts an SSE connection opening.
    pub fn sse_connected(&self, kind: &str) {
        self.sse_connections
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts an SSE connection closing.
    pub fn sse_disconnected(&self, kind: &str) {
        self.sse_connections
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .dec();
    }

    /// Counts a supervision event.
    pub fn supervision_event(&self, kind: &str, event: &str) {
        let labels = SupervisionLabels {
            kind: kind.to_owned(),
            event: event.to_owned(),
        };
        self.supervision.get_or_create(&labels).inc();
    }

    /// Counts one tool call answered from the journal (`remote` or `local`).
    pub fn step_replayed(&self, kind: &str) {
        self.steps_replayed
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one stall reported by the watchdog.
    pub fn stall(&self, kind: &str) {
        self.stalls
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Records one commit's latency, as its caller waited for it.
    pub fn commit_wait(&self, latency: Duration) {
        self.commit_seconds.observe(latency.as_secs_f64());
    }

    /// Records one store transaction and the executions it wrote (a store that folds commits
    /// itself reports this: [`crate::store::Store::observe_transactions`]).
    pub fn commit_transaction(&self, executions: usize) {
        self.commit_batch.observe(executions as f64);
    }
}
