//! OpenAPI paths and schemas of the guardrail additions (docs/guardrails.md): the circuit
//! breaker list and the budget view of an execution.

#![allow(dead_code)] // The items only carry the attributes.

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::ToSchema;

use super::answers::Unauthorized;

#[utoipa::path(get, path = "/v0/breakers", tag = "guardrails",
    responses(
        (status = 200, description = "Circuit breakers that are open, half-open or counting \
            recent failures: by tool id, then by runner id", body = BreakerList),
        Unauthorized,
    ))]
pub(super) fn breakers() {}

/// Body of `GET /v0/breakers`.
#[derive(ToSchema)]
pub struct BreakerList {
    breakers: Vec<Breaker>,
}

/// One tool id's (or runner id's) circuit breaker.
#[derive(ToSchema)]
pub struct Breaker {
    /// Tool id of a tool breaker.
    #[schema(required = false)]
    tool_id: Option<String>,
    /// Runner id of a runner breaker (instead of `tool_id`).
    #[schema(required = false)]
    runner_id: Option<String>,
    /// `open`, `half_open` or `closed` (closed ones are listed while they have recent failures).
    state: String,
    /// Failures within `window` that open it (count mode).
    #[schema(required = false)]
    failures: Option<u32>,
    /// Share of failed results within `window` that opens it (failure-rate mode).
    #[schema(required = false)]
    failure_rate: Option<f64>,
    /// Fewest results within `window` before the rate counts (failure-rate mode).
    #[schema(required = false)]
    min_calls: Option<u32>,
    /// Results within the window (failure-rate mode).
    #[schema(required = false)]
    recent_calls: Option<u32>,
    /// Window of the failures, as the policy wrote it.
    window: String,
    /// How long it stays open, as the policy wrote it.
    cool_down: String,
    /// Failures within the window (closed only).
    #[schema(required = false)]
    recent_failures: Option<u32>,
    /// When it opened.
    #[schema(format = DateTime, required = false)]
    opened_at: Option<String>,
    /// When the next probe may pass (open).
    #[schema(format = DateTime, required = false)]
    until: Option<String>,
    /// Since when the probe runs (half-open).
    #[schema(format = DateTime, required = false)]
    probe_since: Option<String>,
}

/// An execution's budget: present on `GET /v0/executions/{id}` when the policy gives its agent
/// one. `limits` are the policy's keys (`max_steps`, `max_calls_per_tool`, `max_wall_time`,
/// `max_retries`, `max_cost`); `remaining` has an entry per limit that is set.
#[derive(ToSchema)]
pub struct BudgetView {
    limits: BTreeMap<String, Value>,
    used: BudgetUsed,
    remaining: BTreeMap<String, Value>,
}

/// What an execution used, folded from its events.
#[derive(ToSchema)]
pub struct BudgetUsed {
    steps: u64,
    calls_per_tool: BTreeMap<String, u64>,
    retries: u64,
    wall_time_ms: u64,
    cost: BTreeMap<String, f64>,
}
