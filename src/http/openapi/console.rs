//! The operator read endpoints the web console uses (src/console/api.rs; docs/console.md),
//! documented like every other route: paths and their schemas.

#![allow(dead_code)] // The functions and types only carry the attributes.

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::ToSchema;

use super::answers::Unauthorized;
use super::schemas::Error;

/// One tool call waiting for a human decision.
#[derive(ToSchema)]
pub struct Approval {
    /// `<execution id>.<step id>`: what `POST /v0/approvals/{id}` takes.
    id: String,
    execution_id: String,
    agent_id: String,
    /// The `step_id` a `step.approve` signal names.
    step_id: String,
    tool_id: String,
    arguments: Value,
    remote: bool,
    /// Reason given by the policy rule.
    reason: String,
    /// Rule that asked for the approval.
    rule_id: Option<String>,
    /// `sha256:<hex>` of the arguments' canonical JSON: the approval is for exactly these.
    arguments_digest: Option<String>,
    /// Who may answer now (`{"roles": [...], "keys": [...]}`; after an escalation, the
    /// escalation's approvers); absent: any key that answers approvals.
    approvers: Option<Value>,
    /// When the approval expires (the rule's `approval.expires_in`, or the escalation's).
    expires_at: Option<String>,
    /// What expiry does: `deny` or `escalate`.
    on_expiry: Option<String>,
    /// Whether the key that created the execution may answer.
    self_approval: Option<bool>,
    /// Whether the first approvers let it expire and it was escalated.
    escalated: Option<bool>,
    /// After an escalation, the first round's `approvers`, `expires_at` and `on_expiry`
    /// (history: they may no longer answer).
    escalated_from: Option<Value>,
    /// Time of the `step.approval_required` event.
    requested_at: String,
}

/// Answer of `GET /v0/approvals`.
#[derive(ToSchema)]
pub struct ApprovalList {
    /// Oldest request first.
    approvals: Vec<Approval>,
}

/// Answer of `GET /v0/executions/counts`.
#[derive(ToSchema)]
pub struct ExecutionCounts {
    /// Every status, with 0 for those without executions.
    counts: BTreeMap<String, u64>,
    total: u64,
}

/// One connected consumer of an agent or a runner.
#[derive(ToSchema)]
pub struct Connection {
    consumer_id: String,
    /// When its oldest open stream was opened.
    connected_at: String,
    /// Announced by runners; empty for agents.
    capabilities: Vec<String>,
    /// Open streams (more than one only while a reconnect replaces one).
    streams: u32,
}

/// A connected agent.
#[derive(ToSchema)]
pub struct Agent {
    agent_id: String,
    consumers: Vec<Connection>,
    /// Its executions waiting for a consumer.
    pending: u64,
}

/// Answer of `GET /v0/agents`.
#[derive(ToSchema)]
pub struct AgentList {
    agents: Vec<Agent>,
}

/// A connected runner.
#[derive(ToSchema)]
pub struct Runner {
    runner_id: String,
    consumers: Vec<Connection>,
    /// Ids of the tools it published.
    tools: Vec<String>,
}

/// Answer of `GET /v0/runners`.
#[derive(ToSchema)]
pub struct RunnerList {
    runners: Vec<Runner>,
}

/// Outcome of a policy reload attempt.
#[derive(ToSchema)]
pub struct ReloadOutcome {
    at: String,
    /// `ok`, `unchanged` or `error` (the previous policy stays in force).
    result: String,
    /// Problems of a failed reload, `FILE:LINE: message`.
    problems: Vec<String>,
}

/// Answer of `GET /v0/policy`.
#[derive(ToSchema)]
pub struct Policy {
    /// `--policy` as given; null for the built-in default.
    source: Option<String>,
    digest: String,
    /// Ids of the rules in force.
    rules: Vec<String>,
    loaded_at: String,
    last_reload: Option<ReloadOutcome>,
}

#[utoipa::path(get, path = "/v0/approvals", tag = "operators",
    params(("limit" = Option<i64>, Query, description = "At most this many, 1-1000 (default 100)")),
    responses(
        (status = 200, description = "Approvals nobody answered yet, oldest first", body = ApprovalList),
        (status = 400, description = "Invalid query", body = Error),
        Unauthorized,
    ))]
fn approvals() {}

#[utoipa::path(get, path = "/v0/executions/counts", tag = "operators",
    params(
        ("agent_id" = Option<String>, Query, description = "Only this agent's executions"),
        ("label" = Option<Vec<String>>, Query, description = "`key=value` (or rebuno's `key:value`), repeatable, all must match"),
    ),
    responses(
        (status = 200, description = "Executions by status", body = ExecutionCounts),
        (status = 400, description = "Invalid label filter", body = Error),
        Unauthorized,
    ))]
fn execution_counts() {}

#[utoipa::path(get, path = "/v0/agents", tag = "operators",
    responses(
        (status = 200, description = "Agents with an open stream", body = AgentList),
        Unauthorized,
    ))]
fn agents() {}

#[utoipa::path(get, path = "/v0/runners", tag = "operators",
    responses(
        (status = 200, description = "Runners with an open stream", body = RunnerList),
        Unauthorized,
    ))]
fn runners() {}

#[utoipa::path(get, path = "/v0/policy", tag = "operators",
    responses(
        (status = 200, description = "The policy in force and the last reload attempt", body = Policy),
        Unauthorized,
    ))]
fn policy() {}
