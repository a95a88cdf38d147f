//! Listing executions (WIRE.md §7.2): `GET /v0/executions`, and the page reader and filter
//! parsing the console shares with it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};
use keel_actors::ids::{AgentId, ExecutionId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{ExecutionRow, ListFilter};
use keel_actors::time;
use serde::Serialize;

use super::AppState;
use super::cursor;
use super::error::ApiError;
use super::executions::closing_reason;
use super::query::QueryParams;

const DEFAULT_LIST_LIMIT: i64 = 50;
const MAX_LIST_LIMIT: i64 = 200;

/// One entry of the list response: labels are always an object.
#[derive(Serialize)]
pub struct ExecutionSummary {
    id: String,
    status: ExecutionStatus,
    agent_id: String,
    labels: BTreeMap<String, String>,
    /// Why it failed or was cancelled (Keel addition, only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    created_at: String,
    updated_at: String,
}

/// Body of `GET /v0/executions`.
#[derive(Serialize)]
pub struct ListBody {
    executions: Vec<ExecutionSummary>,
    next_cursor: String,
}

/// `GET /v0/executions`.
pub async fn list(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<ListBody>, ApiError> {
    let query = QueryParams::parse(raw.as_deref(), &["label"])?;
    let (rows, next_cursor) = list_page(&state, &query).await?;
    let mut executions = Vec::with_capacity(rows.len());
    for row in rows {
        let error = closing_reason(&state, &row).await?;
        executions.push(ExecutionSummary {
            id: row.id.into_string(),
            status: row.status,
            agent_id: row.agent_id.into_string(),
            labels: row.labels.map(Arc::unwrap_or_clone).unwrap_or_default(),
            error,
            created_at: time::format(&row.created_at),
            updated_at: time::format(&row.updated_at),
        });
    }
    Ok(Json(ListBody {
        executions,
        next_cursor,
    }))
}

/// Reads one page of the list (WIRE.md §7.2) and its `next_cursor` (`""` on the last page).
/// Keel addition: `created_before` / `created_after` (RFC 3339) bound the creation time
/// (before: exclusive, where the page starts unless a cursor is given; after: inclusive, where
/// paging stops).
pub(crate) async fn list_page(
    state: &AppState,
    query: &QueryParams,
) -> Result<(Vec<ExecutionRow>, String), ApiError> {
    let mut filter = list_filter(query)?;
    let created_after = time_param(query, "created_after")?;
    if filter.after.is_none() {
        filter.after =
            time_param(query, "created_before")?.map(|before| (before, ExecutionId::default()));
    }
    let limit = filter.limit;
    filter.limit = limit + 1;
    let mut rows = state.kernel.list_executions(&filter).await?;
    if let Some(since) = created_after
        && let Some(older) = rows.iter().position(|row| row.created_at < since)
    {
        rows.truncate(older);
    }
    let mut next_cursor = String::new();
    if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        if let Some(last) = rows.last() {
            next_cursor = cursor::encode(&last.created_at, last.id.as_str());
        }
    }
    Ok((rows, next_cursor))
}

/// Parses an optional RFC 3339 time parameter.
pub(crate) fn time_param(
    query: &QueryParams,
    key: &str,
) -> Result<Option<time::Timestamp>, ApiError> {
    let Some(text) = query.get(key) else {
        return Ok(None);
    };
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|parsed| Some(parsed.with_timezone(&chrono::Utc)))
        .map_err(|_| {
            ApiError::validation(format_args!(
                "invalid {key} {text:?}, expected an RFC 3339 time"
            ))
        })
}

/// Builds the list filter from the query (WIRE.md §7.2), with the page's own limit.
pub(crate) fn list_filter(query: &QueryParams) -> Result<ListFilter, ApiError> {
    let status = match query.get("status") {
        None => None,
        Some(text) => Some(
            text.parse::<ExecutionStatus>()
                .map_err(|_| ApiError::validation(format_args!("invalid status {text:?}")))?,
        ),
    };
    let mut labels = Vec::new();
    for label in query.all("label") {
        labels.push(super::query::label_filter(label)?);
    }
    let after = match query.get("cursor") {
        None => None,
        Some(text) => {
            let (at, id) =
                cursor::decode(text).ok_or_else(|| ApiError::validation("invalid cursor"))?;
            Some((at, ExecutionId::new(id)))
        }
    };
    let limit = match query.non_negative("limit", DEFAULT_LIST_LIMIT) {
        0 => DEFAULT_LIST_LIMIT,
        limit => limit.min(MAX_LIST_LIMIT),
    };
    Ok(ListFilter {
        status,
        agent_id: query.get("agent_id").map(AgentId::from),
        labels,
        after,
        limit,
    })
}
