//! The JSON view of circuit breakers (`GET /v0/breakers`): those open, half-open, or closed
//! with failures in their window.

use serde_json::{Value, json};

use super::{BreakerConfig, BreakerSet, Breakers, State, sub};
use crate::ids::{RunnerId, ToolId};
use crate::time::{self, Timestamp};

impl Breakers {
    /// Returns the tool breakers that are not closed, or have failures in their window, as
    /// JSON.
    pub fn view(&self, now: Timestamp, set: &BreakerSet) -> Vec<Value> {
        self.view_with(now, "tool_id", |id| set.config(&ToolId::new(id)))
    }

    /// Returns the runner breakers that are not closed, or have failures in their window.
    pub fn runner_view(&self, now: Timestamp, set: &BreakerSet) -> Vec<Value> {
        self.view_with(now, "runner_id", |id| set.runner_config(&RunnerId::new(id)))
    }

    fn view_with<'a>(
        &self,
        now: Timestamp,
        key: &str,
        config_of: impl Fn(&str) -> Option<&'a BreakerConfig>,
    ) -> Vec<Value> {
        let mut tools: Vec<&String> = self.breakers.keys().collect();
        tools.sort();
        tools
            .into_iter()
            .filter_map(|tool_id| {
                let breaker = &self.breakers[tool_id];
                let config = config_of(tool_id)?;
                let recent = breaker
                    .failures
                    .iter()
                    .filter(|at| **at > sub(now, config.window))
                    .count();
                let mut entry = json!({
                    key: tool_id,
                    "window": config.window_text,
                    "cool_down": config.cool_down_text,
                });
                match config.failure_rate {
                    None => entry["failures"] = json!(config.failures),
                    Some(rate) => {
                        entry["failure_rate"] = json!(rate.rate);
                        entry["min_calls"] = json!(rate.min_calls);
                        let calls = recent
                            + breaker
                                .successes
                                .iter()
                                .filter(|at| **at > sub(now, config.window))
                                .count();
                        entry["recent_calls"] = json!(calls);
                    }
                }
                match breaker.state {
                    State::Closed if recent == 0 => return None,
                    State::Closed => {
                        entry["state"] = json!("closed");
                        entry["recent_failures"] = json!(recent);
                    }
                    State::Open { until } => {
                        entry["state"] = json!(if now < until { "open" } else { "half_open" });
                        entry["until"] = json!(time::format(&until));
                    }
                    State::HalfOpen { since } => {
                        entry["state"] = json!("half_open");
                        entry["probe_since"] = json!(time::format(&since));
                    }
                }
                if let Some(opened_at) = breaker.opened_at {
                    entry["opened_at"] = json!(time::format(&opened_at));
                }
                Some(entry)
            })
            .collect()
    }
}
