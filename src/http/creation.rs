//! Creation guardrails of `POST /v0/executions` (docs/guardrails.md): the optional `priority`
//! field and the `Idempotency-Key` header. A key names one execution kernel-wide for as long as
//! it is stored: the key is written as the idempotency key of its `execution.created` event and
//! a unique index refuses a second one, so parallel repeats cannot create twice; a repeat finds
//! the first execution and compares its recorded creation (less the labels `pre_create` hooks
//! added) with the new body. A repeat and a creation refused by the backlog call no hook: the
//! `pre_create` hooks run inside [`Kernel::create_execution_with`], after both checks.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::HeaderMap;
use keel_actors::error::StoreError;
use keel_actors::events::EventBody;
use keel_actors::guardrails::CreateOptions;
use keel_actors::ids::{AgentId, ExecutionId};
use keel_actors::kernel::{Kernel, KernelError};
use keel_actors::store::ExecutionRow;
use serde_json::Value;

use super::error::ApiError;

/// Name of the header.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 255;
/// Smallest and largest priority accepted.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1_000_000..=1_000_000;

/// Bounds of the pending backlog (`--max-pending-per-agent`, `--max-pending`): a creation
/// that finds as many `pending` executions as a bound (for its agent, or kernel-wide) is
/// answered 429 with `Retry-After` and creates nothing. `None` is unbounded (no count is read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backlog {
    /// Most pending executions of one agent id.
    pub per_agent: Option<u64>,
    /// Most pending executions kernel-wide.
    pub total: Option<u64>,
    /// `Retry-After` of the 429, in seconds.
    pub retry_after_secs: u64,
    /// Refuse agent ids nothing names (`--strict-agents`).
    pub strict_agents: bool,
}

impl Default for Backlog {
    fn default() -> Self {
        Self {
            per_agent: None,
            total: None,
            retry_after_secs: 1,
            strict_agents: false,
        }
    }
}

impl Backlog {
    /// Refuses a creation for `agent_id` when a bound is reached; reads the counts only for
    /// the bounds that are set.
    pub async fn admit(&self, kernel: &Kernel, agent_id: &AgentId) -> Result<(), ApiError> {
        if let Some(limit) = self.per_agent {
            let pending = kernel.pending_count(Some(agent_id)).await?;
            if pending >= limit {
                kernel.backlog_refused("agent");
                return Err(ApiError::RateLimited(
                    format!(
                        "backlog full: agent {agent_id} has {pending} pending executions (limit {limit})"
                    ),
                    self.retry_after_secs,
                ));
            }
        }
        if let Some(limit) = self.total {
            let pending = kernel.pending_count(None).await?;
            if pending >= limit {
                kernel.backlog_refused("kernel");
                return Err(ApiError::RateLimited(
                    format!("backlog full: {pending} pending executions (limit {limit})"),
                    self.retry_after_secs,
                ));
            }
        }
        Ok(())
    }
}

/// What a creation asks for, validated.
pub struct Request {
    /// Agent that will run it.
    pub agent_id: AgentId,
    /// Input (JSON null when absent).
    pub input: Value,
    /// Labels, if given.
    pub labels: Option<BTreeMap<String, String>>,
    /// Queue priority (0 when absent).
    pub priority: i64,
    /// Principal whose request creates it (`None` on a kernel without authentication).
    pub created_by: Option<String>,
    /// End user it is created for, as the request says.
    pub on_behalf_of: Option<String>,
    /// Cluster mode: the id to create it under (in a partition this kernel holds).
    pub id: Option<keel_actors::ids::ExecutionId>,
}

/// Returns the request's `Idempotency-Key`, if it has one: at most one header of 1 to
/// [`MAX_KEY_BYTES`] visible ASCII characters.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::validation(
            "Idempotency-Key must be given at most once",
        ));
    }
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY_BYTES {
        return Err(ApiError::validation(format_args!(
            "Idempotency-Key must be 1 to {MAX_KEY_BYTES} bytes"
        )));
    }
    if !bytes.iter().all(|byte| byte.is_ascii_graphic()) {
        return Err(ApiError::validation(
            "Idempotency-Key must be visible ASCII characters without spaces",
        ));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// Validates the optional `priority` field: an integer in [`PRIORITY_RANGE`], null meaning 0.
pub fn parse_priority(priority: Option<Value>) -> Result<i64, ApiError> {
    match priority {
        None | Some(Value::Null) => Ok(0),
        Some(value) => value
            .as_i64()
            .filter(|priority| PRIORITY_RANGE.contains(priority))
            .ok_or_else(|| {
                ApiError::validation(format_args!(
                    "priority must be an integer from {} to {}",
                    PRIORITY_RANGE.start(),
                    PRIORITY_RANGE.end()
                ))
            }),
    }
}

/// Creates an execution.
pub async fn create(
    kernel: &Kernel,
    request: Request,
    key: Option<String>,
) -> Result<ExecutionRow, KernelError> {
    let options = CreateOptions {
        priority: request.priority,
        idempotency_key: key,
        created_by: request.created_by,
        on_behalf_of: request.on_behalf_of,
        id: request.id,
    };
    kernel
        .create_execution_with(request.agent_id, request.input, request.labels, options)
        .await
}

/// Creates an execution under `key` unless one exists; returns it and whether it is new.
/// A repeat is answered before the backlog is checked: it creates nothing.
pub async fn create_once(
    kernel: &Kernel,
    backlog: &Backlog,
    request: Request,
    key: String,
) -> Result<(ExecutionRow, bool), ApiError> {
    if let Some(id) = kernel.execution_by_creation_key(&key).await? {
        return existing(kernel, &id, &request).await;
    }
    backlog.admit(kernel, &request.agent_id).await?;
    let recorded = Recorded::of(&request);
    match create(kernel, request, Some(key.clone())).await {
        Ok(row) => Ok((row, true)),
        // A parallel request with the same key committed first.
        Err(KernelError::Store(StoreError::Conflict(_))) => {
            match kernel.execution_by_creation_key(&key).await? {
                Some(id) => existing_recorded(kernel, &id, &recorded).await,
                None => Err(ApiError::Unavailable("service unavailable".to_owned())),
            }
        }
        Err(error) => Err(error.into()),
    }
}

/// The parts of a creation a repeat must match: what `execution.created` records.
#[derive(PartialEq)]
struct Recorded {
    agent_id: AgentId,
    input: Value,
    labels: Value,
    priority: i64,
}

impl Recorded {
    fn of(request: &Request) -> Self {
        Self {
            agent_id: request.agent_id.clone(),
            input: request.input.clone(),
            labels: request
                .labels
                .as_ref()
                .map_or(Value::Null, |labels| serde_json::json!(labels)),
            priority: request.priority,
        }
    }
}

async fn existing(
    kernel: &Kernel,
    id: &ExecutionId,
    request: &Request,
) -> Result<(ExecutionRow, bool), ApiError> {
    existing_recorded(kernel, id, &Recorded::of(request)).await
}

/// Returns the execution created under the key when its recorded creation matches the
/// request, 409 when it does not. Labels a `pre_create` hook added are not part of what the
/// client sent: they are taken out of the recorded labels before comparing.
async fn existing_recorded(
    kernel: &Kernel,
    id: &ExecutionId,
    request: &Recorded,
) -> Result<(ExecutionRow, bool), ApiError> {
    let same = match recorded_creation(kernel, id).await? {
        Some((mut stored, added)) => {
            if added.is_empty() {
                stored == *request
            } else {
                if let Value::Object(labels) = &mut stored.labels {
                    labels.retain(|key, _| !added.contains(key));
                }
                // Hooks added labels, so "no labels" was recorded as an object.
                let requested = match &request.labels {
                    Value::Null => serde_json::json!({}),
                    labels => labels.clone(),
                };
                stored.labels == requested
                    && stored.agent_id == request.agent_id
                    && stored.input == request.input
                    && stored.priority == request.priority
            }
        }
        None => false,
    };
    if !same {
        return Err(ApiError::Conflict(format!(
            "Idempotency-Key was already used for execution {id} with a different request"
        )));
    }
    Ok((kernel.execution(id).await?, false))
}

/// Returns what `execution.created` of `id` recorded, and the keys of the labels its
/// `pre_create` hooks added (their `hook.decided` events follow it in the same commit).
async fn recorded_creation(
    kernel: &Kernel,
    id: &ExecutionId,
) -> Result<Option<(Recorded, BTreeSet<String>)>, ApiError> {
    const PAGE: i64 = 32;
    let mut page = kernel.events(id, 0, PAGE).await?;
    let Some(EventBody::ExecutionCreated {
        agent_id,
        input,
        labels,
        priority,
        // The trace a creation joined, and who asked, are not part of what it asked for.
        traceparent: _,
        created_by: _,
        on_behalf_of: _,
    }) = page.first().map(|event| event.body.clone())
    else {
        return Ok(None);
    };
    let recorded = Recorded {
        agent_id,
        input,
        labels,
        priority,
    };
    let mut added = BTreeSet::new();
    let mut next = 1;
    loop {
        for event in page.iter().skip(next) {
            match &event.body {
                EventBody::HookDecided {
                    point,
                    labels: Some(labels),
                    ..
                } if point == "pre_create" => added.extend(labels.keys().cloned()),
                EventBody::HookDecided { point, .. } if point == "pre_create" => {}
                _ => return Ok(Some((recorded, added))),
            }
        }
        let Some(last) = page.last().map(|event| event.sequence) else {
            return Ok(Some((recorded, added)));
        };
        if (page.len() as i64) < PAGE {
            return Ok(Some((recorded, added)));
        }
        page = kernel.events(id, last, PAGE).await?;
        next = 0;
    }
}
