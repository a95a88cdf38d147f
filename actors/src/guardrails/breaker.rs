//! Circuit breakers per tool id (docs/guardrails.md, "Circuit breakers"): the pure state
//! machine the policy actor runs.
//!
//! A breaker is **closed** while fewer than `failures` results of its tool failed within the
//! last `window` (or, in failure-rate mode, while fewer than `min_calls` results came within
//! the window or less than `failure_rate` of them failed). The failure that reaches the
//! threshold **opens** it for `cool_down`: every
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

use crate::ids::{RunnerId, ToolId};
use crate::policy::rules::Glob;
use crate::time::{self, Timestamp};

/// What a breaker's results come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BreakerScope {
    /// A tool id: every step result of the tool (the policy actor's breakers).
    #[default]
    Tool,
    /// A runner id: the results its connections report (the dispatcher's breakers).
    Runner,
}

/// One `circuit_breakers:` entry of a policy.
#[derive(Clone, Debug)]
pub struct BreakerConfig {
    /// Tool ids (or runner ids) it applies to (each matching id has a breaker of its own).
    pub tools: Vec<Glob>,
    /// Whether `tools` names tool ids or runner ids.
    pub scope: BreakerScope,
    /// Failures within `window` that open it (unused in failure-rate mode).
    pub failures: u32,
    /// Failure-rate mode: the share of failed results within `window` that opens it.
    pub failure_rate: Option<FailureRate>,
    /// Window the failures are counted in.
    pub window: Duration,
    /// `window` as written, for messages.
    pub window_text: String,
    /// How long it stays open before a probe.
    pub cool_down: Duration,
    /// `cool_down` as written, for messages.
    pub cool_down_text: String,
}

/// The failure-rate mode of a breaker.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailureRate {
    /// Share of failed results (0 < rate <= 1) that opens the breaker.
    pub rate: f64,
    /// Fewest results within the window before the rate counts.
    pub min_calls: u32,
}

impl BreakerConfig {
    /// Returns what opens the breaker, for messages (`5 failures within 1m`).
    pub fn threshold(&self) -> String {
        match self.failure_rate {
            None => format!("{} failures within {}", self.failures, self.window_text),
            Some(rate) => format!(
                "failure rate of {}% or more over at least {} calls within {}",
                rate.rate * 100.0,
                rate.min_calls,
                self.window_text
            ),
        }
    }

    /// Returns whether `failures` out of `calls` results within the window open the breaker.
    fn trips(&self, failures: usize, calls: usize) -> bool {
        match self.failure_rate {
            None => failures >= self.failures as usize,
            Some(rate) => {
                calls >= rate.min_calls as usize && failures as f64 >= rate.rate * calls as f64
            }
        }
    }

    /// Returns whether the entry applies to `key` (a tool id, or a runner id for a runner
    /// breaker).
    pub fn matches(&self, key: &str) -> bool {
        self.tools.iter().any(|glob| glob.is_match(key))
    }
}

/// The breakers of a policy: the first entry that matches a tool id configures its breaker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BreakerSet(pub Vec<BreakerConfig>);

impl BreakerSet {
    /// Returns the entry for `tool_id`, if any.
    pub fn config(&self, tool_id: &ToolId) -> Option<&BreakerConfig> {
        self.0
            .iter()
            .find(|config| config.scope == BreakerScope::Tool && config.matches(tool_id.as_str()))
    }

    /// Returns the entry for runner `runner_id`, if any.
    pub fn runner_config(&self, runner_id: &RunnerId) -> Option<&BreakerConfig> {
        self.0.iter().find(|config| {
            config.scope == BreakerScope::Runner && config.matches(runner_id.as_str())
        })
    }

    /// Returns the runner entries only.
    pub fn runners(&self) -> Self {
        Self(
            self.0
                .iter()
                .filter(|config| config.scope == BreakerScope::Runner)
                .cloned()
                .collect(),
        )
    }

    /// Returns how far back tool results matter: the longest `window + cool_down`.
    pub fn horizon(&self) -> Option<Duration> {
        self.horizon_of(BreakerScope::Tool)
    }

    /// Returns how far back runner results matter: the longest `window + cool_down` of the
    /// runner entries.
    pub fn runner_horizon(&self) -> Option<Duration> {
        self.horizon_of(BreakerScope::Runner)
    }

    fn horizon_of(&self, scope: BreakerScope) -> Option<Duration> {
        self.0
            .iter()
            .filter(|config| config.scope == scope)
            .map(|config| config.window + config.cool_down)
            .max()
    }
}

impl PartialEq for BreakerConfig {
    fn eq(&self, other: &Self) -> bool {
        self.tools
            .iter()
            .map(Glob::as_str)
            .eq(other.tools.iter().map(Glob::as_str))
            && (
                self.scope,
                self.failures,
                self.failure_rate,
                self.window,
                self.cool_down,
            ) == (
                other.scope,
                other.failures,
                other.failure_rate,
                other.window,
                other.cool_down,
            )
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
    /// Successes within the window (kept in failure-rate mode only).
    successes: VecDeque<Timestamp>,
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
                "circuit open for tool {tool_id}: {}; next probe after {}",
                config.threshold(),
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
                successes: VecDeque::new(),
                opened_at: None,
            });
        match breaker.state {
            State::Closed => {
                let oldest = sub(at, config.window);
                for results in [&mut breaker.failures, &mut breaker.successes] {
                    while results.front().is_some_and(|first| *first <= oldest) {
                        results.pop_front();
                    }
                }
                if success {
                    if config.failure_rate.is_some() {
                        breaker.successes.push_back(at);
                    }
                    return None;
                }
                breaker.failures.push_back(at);
                let failures = breaker.failures.len();
                if !config.trips(failures, failures + breaker.successes.len()) {
                    return None;
                }
                let failures = u32::try_from(failures).unwrap_or(u32::MAX);
                Some(open(breaker, tool_id, config, at, failures, false))
            }
            // Results of calls made before the breaker opened change nothing.
            State::Open { .. } => None,
            State::HalfOpen { .. } if success => {
                breaker.state = State::Closed;
                breaker.failures.clear();
                breaker.successes.clear();
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
                        || [&breaker.failures, &breaker.successes]
                            .into_iter()
                            .any(|results| {
                                results.back().is_some_and(|last| *last > sub(now, window))
                            })
                }
            });
    }

    /// Returns whether `id`'s breaker would deny a call at `now` (open, or its probe running),
    /// without changing it.
    pub fn blocks(&self, id: &str, config: &BreakerConfig, now: Timestamp) -> bool {
        match self.breakers.get(id).map(|breaker| &breaker.state) {
            Some(State::Open { until }) => now < *until,
            Some(State::HalfOpen { since }) => now < add(*since, config.cool_down),
            Some(State::Closed) | None => false,
        }
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
    breaker.successes.clear();
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

#[path = "breaker_view.rs"]
mod view;

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
