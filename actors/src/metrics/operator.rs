//! The metrics operators scale and alert on: step durations by tool and outcome, policy
//! evaluation latency, HTTP request durations by route and status, and queue depths (pending
//! executions per agent, the age of the oldest, queued remote steps per tool). Queue depths are
//! read from the store when `/metrics` is scraped ([`OperatorMetrics::set_queue_depths`]), so
//! they are what is durable, whichever actor holds the work.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::ids::ToolId;
use crate::store::QueueDepths;
use crate::time::Timestamp;

/// Labels of the step duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// Tool of the step.
    pub tool_id: String,
    /// Terminal status (`succeeded`, `failed`, `timed_out`, `cancelled`).
    pub outcome: String,
}

/// Labels of the HTTP request histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// Request method.
    pub method: String,
    /// Route template (`/v0/executions/{id}`), `unmatched` for unknown paths.
    pub route: String,
    /// Response status code.
    pub status: String,
}

/// Label set with a single `agent_id`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    /// Agent id.
    pub agent_id: String,
}

/// Label set with a single `tool_id`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabel {
    /// Tool id.
    pub tool_id: String,
}

/// See the module documentation.
pub struct OperatorMetrics {
    /// Step duration from creation to its terminal event, in seconds.
    pub step_duration: Family<StepLabels, Histogram>,
    /// Time to evaluate one tool call against the policy (rules and rate limits), in seconds.
    pub policy_evaluation: Histogram,
    /// HTTP request duration until the response head, in seconds.
    pub http_request: Family<HttpLabels, Histogram>,
    /// Pending executions per agent.
    pub pending_executions: Family<AgentLabel, Gauge>,
    /// Age of the oldest pending execution in seconds (0 when none is pending).
    pub oldest_pending_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Remote steps waiting for a runner, per tool.
    pub queued_jobs: Family<ToolLabel, Gauge>,
    /// The agent and tool ids shown as label values.
    pub ids: super::labels::IdLabels,
}

impl OperatorMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            step_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 18))
            }),
            policy_evaluation: Histogram::new(exponential_buckets(0.000_001, 4.0, 11)),
            http_request: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
            }),
            pending_executions: Family::default(),
            oldest_pending_age: Gauge::default(),
            queued_jobs: Family::default(),
            ids: super::labels::IdLabels::default(),
        };
        registry.register(
            "step_duration_seconds",
            "Tool step duration from creation to its terminal event, by tool and outcome",
            metrics.step_duration.clone(),
        );
        registry.register(
            "policy_evaluation_seconds",
            "Time to evaluate one tool call against the policy, rate limits included",
            metrics.policy_evaluation.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request duration until the response head, by method, route and status",
            metrics.http_request.clone(),
        );
        registry.register(
            "pending_executions",
            "Pending executions (waiting for an agent) per agent, read from the store at scrape",
            metrics.pending_executions.clone(),
        );
        registry.register(
            "oldest_pending_execution_age_seconds",
            "Age of the oldest pending execution, 0 when none is pending, read at scrape",
            metrics.oldest_pending_age.clone(),
        );
        registry.register(
            "queued_jobs",
            "Remote steps waiting for a runner (created, not handed out) per tool, read at scrape",
            metrics.queued_jobs.clone(),
        );
        metrics
    }

    /// Records a step that reached `outcome` after `seconds`.
    pub fn step_finished(&self, tool_id: &ToolId, outcome: &str, seconds: f64) {
        let labels = StepLabels {
            tool_id: self.ids.label(tool_id.as_str()),
            outcome: outcome.to_owned(),
        };
        self.step_duration
            .get_or_create(&labels)
            .observe(seconds.max(0.0));
    }

    /// Records one HTTP request.
    pub fn http_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let labels = HttpLabels {
            method: method.to_owned(),
            route: super::labels::escape(route),
            status: status.to_string(),
        };
        self.http_request.get_or_create(&labels).observe(seconds);
    }

    /// Replaces the queue gauges with `depths` as of `now` (agents and tools with nothing
    /// waiting disappear from the exposition).
    pub fn set_queue_depths(&self, depths: &QueueDepths, now: Timestamp) {
        self.pending_executions.clear();
        for (agent_id, count, _) in &depths.pending_by_agent {
            let labels = AgentLabel {
                agent_id: self.ids.label(agent_id.as_str()),
            };
            self.pending_executions
                .get_or_create(&labels)
                .inc_by(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        let oldest = depths
            .pending_by_agent
            .iter()
            .map(|(_, _, created_at)| *created_at)
            .min();
        let age = oldest.map_or(0.0, |oldest| {
            (now - oldest).to_std().map_or(0.0, |age| age.as_secs_f64())
        });
        self.oldest_pending_age.set(age);
        self.queued_jobs.clear();
        for (tool_id, count) in &depths.queued_by_tool {
            let labels = ToolLabel {
                tool_id: self.ids.label(tool_id.as_str()),
            };
            self.queued_jobs
                .get_or_create(&labels)
                .inc_by(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depths_replace_the_gauges_and_age_the_oldest() {
        let mut registry = Registry::default();
        let metrics = OperatorMetrics::register(&mut registry);
        let now = crate::time::now();
        let depths = QueueDepths {
            pending_by_agent: vec![
                ("a".into(), 3, now - chrono::Duration::seconds(40)),
                ("b".into(), 1, now - chrono::Duration::seconds(5)),
            ],
            queued_by_tool: vec![("t".into(), 2)],
        };
        metrics.set_queue_depths(&depths, now);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("pending_executions{agent_id=\"a\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("oldest_pending_execution_age_seconds 40.0"),
            "{text}"
        );
        assert!(text.contains("queued_jobs{tool_id=\"t\"} 2"), "{text}");
        metrics.set_queue_depths(&QueueDepths::default(), now);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("agent_id=\"a\""), "{text}");
        assert!(
            text.contains("oldest_pending_execution_age_seconds 0.0"),
            "{text}"
        );
    }
}
