//! Rate-limit windows of the policy actor: per `(agent_id, tool_id)`, the times of allowed calls,
//! on tokio's monotonic clock (so paused-time tests move them too). A call is admitted when fewer than `max` calls happened within the
//! last `window` (only admitted calls count, WIRE.md §14.3).
//!
//! Calls are kept for the engine's longest window (the *horizon*), not only the window of the
//! rule that matched, so two rules with different windows on the same pair see the same history.
//! History from before the actor started comes from the store ([`RateWindows::merge_history`]):
//! the windows remember since when they are complete, so a longer horizon after a reload loads
//! only the missing, older part and never counts a call twice.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::ids::{AgentId, ToolId};
use crate::policy::engine::RateLimit;
use crate::store::AllowedToolCall;
use crate::time::Timestamp;

/// Admissions between two sweeps of every pair (dropping calls older than the horizon).
const SWEEP_EVERY: u32 = 1024;

/// Microseconds on the actor's monotonic clock (negative before the actor started).
type Tick = i64;

/// Sliding windows of allowed calls per `(agent_id, tool_id)`.
pub struct RateWindows {
    epoch: Instant,
    calls: HashMap<(AgentId, ToolId), VecDeque<Tick>>,
    horizon: Option<Duration>,
    /// Every call at or after this tick is in `calls` (as far as the horizon keeps them).
    complete_since: Tick,
    admissions: u32,
}

/// What the windows need from the store after a horizon change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRequest {
    /// Load calls at or after this wall-clock time.
    pub since: Timestamp,
    /// Keep only loaded calls older than this tick (newer ones are already in memory).
    before: Tick,
    /// Tick corresponding to `since`.
    since_tick: Tick,
}

impl RateWindows {
    /// Returns empty windows with no horizon, complete from `now` on.
    pub fn new(now: Instant) -> Self {
        Self {
            epoch: now,
            calls: HashMap::new(),
            horizon: None,
            complete_since: 0,
            admissions: 0,
        }
    }

    fn tick(&self, at: Instant) -> Tick {
        micros(at.saturating_duration_since(self.epoch))
    }

    /// Returns the horizon in force.
    pub fn horizon(&self) -> Option<Duration> {
        self.horizon
    }

    /// Admits or refuses one call of `key` under `limit` at `now`; an admitted call is recorded.
    pub fn admit(&mut self, key: (AgentId, ToolId), limit: &RateLimit, now: Instant) -> bool {
        let now = self.tick(now);
        let keep = micros(
            self.horizon
                .map_or(limit.window, |horizon| horizon.max(limit.window)),
        );
        self.admissions = self.admissions.wrapping_add(1);
        if self.admissions.is_multiple_of(SWEEP_EVERY) {
            self.sweep(now - keep);
        }
        let calls = self.calls.entry(key).or_default();
        while calls.front().is_some_and(|at| *at < now - keep) {
            calls.pop_front();
        }
        let window = micros(limit.window);
        let in_window = calls.len() - calls.partition_point(|at| now - *at >= window);
        if in_window >= limit.max as usize {
            return false;
        }
        calls.push_back(now);
        true
    }

    /// Forgets the call of `key` admitted at `at` (a call that did not go ahead after all);
    /// nothing when it is no longer held (swept, or admitted before the actor restarted).
    pub fn release(&mut self, key: &(AgentId, ToolId), at: Instant) {
        let tick = self.tick(at);
        let Some(calls) = self.calls.get_mut(key) else {
            return;
        };
        if let Some(index) = calls.iter().rposition(|admitted| *admitted == tick) {
            calls.remove(index);
        }
    }

    /// Sets a new horizon at `now` (wall-clock `wall_now`). Returns the history to load from the
    /// store when the new horizon reaches further back than the windows are complete.
    pub fn set_horizon(
        &mut self,
        horizon: Option<Duration>,
        now: Instant,
        wall_now: Timestamp,
    ) -> Option<HistoryRequest> {
        let now_tick = self.tick(now);
        let covered = self.covered_from(now_tick);
        self.horizon = horizon;
        self.complete_since = covered;
        let wanted = micros(horizon?);
        if now_tick - wanted >= covered {
            return None;
        }
        let since = wall_now
            .checked_sub_signed(chrono::Duration::microseconds(wanted))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
        Some(HistoryRequest {
            since,
            before: covered,
            since_tick: now_tick - wanted,
        })
    }

    /// Returns the tick from which the windows hold every call, given the horizon in force.
    fn covered_from(&self, now: Tick) -> Tick {
        let kept_since = self.horizon.map_or(now, |horizon| now - micros(horizon));
        self.complete_since.max(kept_since)
    }

    /// Adds calls loaded from the store for `request` (`now` and `wall_now` as when they were
    /// read). Memory keeps what it holds from the boundary on; for a pair with calls there, only
    /// older stored calls are added (the newer ones are those same calls); a pair with none
    /// takes every stored call (a fresh actor, or calls allowed by rules without a limit).
    pub fn merge_history(
        &mut self,
        request: HistoryRequest,
        calls: &[AllowedToolCall],
        now: Instant,
        wall_now: Timestamp,
    ) {
        let now_tick = self.tick(now);
        let mut loaded: HashMap<(AgentId, ToolId), Vec<Tick>> = HashMap::new();
        for call in calls {
            let age = (wall_now - call.at)
                .num_microseconds()
                .unwrap_or(i64::MAX)
                .max(0);
            let at = now_tick.saturating_sub(age);
            if at >= request.since_tick {
                loaded
                    .entry((call.agent_id.clone(), call.tool_id.clone()))
                    .or_default()
                    .push(at);
            }
        }
        for calls in self.calls.values_mut() {
            while calls.front().is_some_and(|at| *at < request.before) {
                calls.pop_front();
            }
        }
        for (key, mut stored) in loaded {
            let calls = self.calls.entry(key).or_default();
            if !calls.is_empty() {
                stored.retain(|at| *at < request.before);
            }
            stored.sort_unstable();
            let mut merged: VecDeque<Tick> = stored.into();
            merged.extend(calls.drain(..));
            *calls = merged;
        }
        self.complete_since = request.since_tick;
    }

    /// Drops every call older than `oldest` and the pairs left empty.
    fn sweep(&mut self, oldest: Tick) {
        self.calls.retain(|_, calls| {
            while calls.front().is_some_and(|at| *at < oldest) {
                calls.pop_front();
            }
            !calls.is_empty()
        });
    }

    /// Returns the number of calls held for a pair (tests).
    #[cfg(test)]
    pub fn held(&self, agent_id: &AgentId, tool_id: &ToolId) -> usize {
        self.calls
            .get(&(agent_id.to_owned(), tool_id.to_owned()))
            .map_or(0, VecDeque::len)
    }
}

fn micros(duration: Duration) -> Tick {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX / 4)
}
