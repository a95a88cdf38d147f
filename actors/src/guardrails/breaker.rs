//! Circuit breakers per tool id (docs/guardrails.md, "Circuit breakers"): the pure state
//! machine the policy actor runs.
//!
//! A breaker is **closed** while fewer than `failures` results of its tool failed within the
//! last `window`. The failure that reaches `failures` **opens** it for `cool_down`: every
//! `invoke_tool` for the tool is denied at once. After the cool-down the next intent is let
//! through as the **probe** (half-open); other intents are denied while the probe runs. The first
//! result of the tool reported after that decides: a success closes the breaker, a failure opens
//! it again for another cool-down. A probe that reports nothing within a cool-down gives way to
//! a new probe.
//!
//! Everything is computed from results (`step.completed`, `step.failed`, `step.timed_out`) and
//! their times, so replaying the results of the last `window + cool_down` rebuilds the state
//! after a restart ([`Breakers::record`] in time order).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use serde_json::{Value, json};

use crate::policy::rules::Glob;
use crate::time::{self, Timestamp};

/// One `circuit_breakers:` entry of a policy.
#[derive(Clone, Debug)]
pub struct BreakerConfig {
    /// Tool ids it applies to (each matching tool id has a breaker of its own).
    pub tools: Vec<Glob>,
    /// Failures within `window` that open it.
    pub failures: u32,
    /// Window the failures are counted in.
    pub window: Duration,
    /// `window` as written, for messages.
    pub window_text: String,
    /// How long it stays open before a probe.
    pub cool_down: Duration,
    /// `cool_down` as written, for messages.
    pub cool_down_text: String,
}

impl BreakerConfig {
    /// Returns whether the entry applies to `tool_id`.
    pub fn matches(&self, tool_id: &str) -> bool {
        self.tools.iter().any(|glob| glob.is_match(tool_id))
    }
}

/// The breakers of a policy: the first entry that matches a tool id configures its breaker.
#[derive(Clone, Debug, Default)]
pub struct BreakerSet(pub Vec<BreakerConfig>);

impl BreakerSet {
    /// Returns the entry for `tool_id`, if any.
    pub fn config(&self, tool_id: &str) -> Option<&BreakerConfig> {
        self.0.iter().find(|config| config.matches(tool_id))
    }

    /// Returns how far back results matter: the longest `window + cool_down`.
    pub fn horizon(&self) -> Option<Duration> {
        self.0
            .iter()
            .map(|config| config.window + config.cool_down)
            .max()
    }
}

/// State of one breaker.
#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Calls pass; failures within the window are counted.
    Closed,
    /// Calls are denied until `until`.
    Open { until: Timestamp },
    /// One probe was let through at `since`; its result decides.
    HalfOpen { since: Timestamp },
}

/// One breaker: its state and the failures of the window.
#[derive(Clone, Debug)]
struct Breaker {
    state: State,
    failures: VecDeque<Timestamp>,
    opened_at: Option<Timestamp>,
}

/// A change of a breaker's state, to record as an event and count in metrics.
#[derive(Clone, Debug, PartialEq)]
pub enum BreakerChange {
    /// The breaker opened (again, after a failed probe when `probe` is set).
    Opened {
        /// Tool id.
        tool_id: String,
        /// Failures within the window that opened it (1 for a failed probe).
        failures: u32,
        /// Until when intents are denied.
        until: Timestamp,
        /// Whether a failed probe opened it.
        probe: bool,
    },
    /// A probe succeeded: the breaker closed.
    Closed {
        /// Tool id.
        tool_id: String,
    },
}

/// The breakers of every tool id that has one.
#[derive(Debug, Default)]
pub struct Breakers {
    breakers: HashMap<String, Breaker>,
}

impl Breakers {
    /// Decides whether an intent for `tool_id` may pass at `now`; returns the denial reason
    /// when the breaker is open or its probe is running.
    pub fn admit(
        &mut self,
        tool_id: &str,
        config: &BreakerConfig,
        now: Timestamp,
    ) -> Option<String> {
        let breaker = self.breakers.get_mut(tool_id)?;
        match breaker.state {
            State::Closed => None,
            State::Open { until } if now < until => Some(format!(
                "circuit open for tool {tool_id}: {} failures within {}; next probe after {}",
                config.failures,
                config.window_text,
                time::format(&until)
            )),
            State::HalfOpen { since } if now < add(since, config.cool_down) => Some(format!(
                "circuit half-open for tool {tool_id}: a probe call is running"
            )),
            // The cool-down passed (or the last probe never reported): this call is the probe.
            State::Open { .. } | State::HalfOpen { .. } => {
                breaker.state = State::HalfOpen { since: now };
                None
            }
        }
    }

    /// Records one result of `tool_id` at `at`; returns the change of state it causes.
    pub fn record(
        &mut self,
        tool_id: &str,
        config: &BreakerConfig,
        success: bool,
        at: Timestamp,
    ) -> Option<BreakerChange> {
        let breaker = self
            .breakers
            .entry(tool_id.to_owned())
            .or_insert_with(|| Breaker {
                state: State::Closed,
                failures: VecDeque::new(),
                opened_at: None,
            });
        match breaker.state {
            State::Closed => {
                if success {
                    return None;
                }
                let oldest = sub(at, config.window);
                while breaker
                    .failures
                    .front()
                    .is_some_and(|first| *first <= oldest)
                {
                    breaker.failures.pop_front();
                }
                breaker.failures.push_back(at);
                let failures = u32::try_from(breaker.failures.len()).unwrap_or(u32::MAX);
                if failures < config.failures {
                    return None;
                }
                Some(open(breaker, tool_id, config, at, failures, false))
            }
            // Results of calls made before the breaker opened change nothing.
            State::Open { .. } => None,
            State::HalfOpen { .. } if success => {
                breaker.state = State::Closed;
                breaker.failures.clear();
                breaker.opened_at = None;
                Some(BreakerChange::Closed {
                    tool_id: tool_id.to_owned(),
                })
            }
            State::HalfOpen { .. } => Some(open(breaker, tool_id, config, at, 1, true)),
        }
    }

    /// Drops the breakers that are closed with no failure left in their window (after a
    /// reload removed or changed entries, and from time to time).
    pub fn sweep(&mut self, now: Timestamp, config: impl Fn(&str) -> Option<Duration>) {
        self.breakers
            .retain(|tool_id, breaker| match config(tool_id) {
                None => false,
                Some(window) => {
                    breaker.state != State::Closed
                        || breaker
                            .failures
                            .back()
                            .is_some_and(|last| *last > sub(now, window))
                }
            });
    }

    /// Returns the breakers that are not closed, or have failures in their window, as JSON.
    pub fn view(&self, now: Timestamp, set: &BreakerSet) -> Vec<Value> {
        let mut tools: Vec<&String> = self.breakers.keys().collect();
        tools.sort();
        tools
            .into_iter()
            .filter_map(|tool_id| {
                let breaker = &self.breakers[tool_id];
                let config = set.config(tool_id)?;
                let recent = breaker
                    .failures
                    .iter()
                    .filter(|at| **at > sub(now, config.window))
                    .count();
                let mut entry = json!({
                    "tool_id": tool_id,
                    "failures": config.failures,
                    "window": config.window_text,
                    "cool_down": config.cool_down_text,
                });
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

    /// Returns the number of tool ids whose breaker is open or half-open.
    pub fn open_count(&self) -> usize {
        self.breakers
            .values()
            .filter(|breaker| breaker.state != State::Closed)
            .count()
    }
}

fn open(
    breaker: &mut Breaker,
    tool_id: &str,
    config: &BreakerConfig,
    at: Timestamp,
    failures: u32,
    probe: bool,
) -> BreakerChange {
    let until = add(at, config.cool_down);
    breaker.state = State::Open { until };
    breaker.failures.clear();
    breaker.opened_at = Some(at);
    BreakerChange::Opened {
        tool_id: tool_id.to_owned(),
        failures,
        until,
        probe,
    }
}

fn add(at: Timestamp, duration: Duration) -> Timestamp {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_add_signed(delta))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

fn sub(at: Timestamp, duration: Duration) -> Timestamp {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_sub_signed(delta))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
