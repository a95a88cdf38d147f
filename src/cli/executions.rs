//! Helpers of the execution client commands: paging `keel executions` through the list and
//! rendering it, and waiting for an execution to end (`create --wait`, `execution --wait`).

use serde_json::{Value, json};

use super::{CliError, Client, LIST_PAGE_MAX, args, output, path_segment};
use crate::config::OutputFormat;

/// How often `create --wait` asks for the execution's status.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Polls an execution until it is terminal (or `timeout` passes: an error).
pub(super) async fn wait_for_end(
    client: &Client,
    id: &str,
    timeout: Option<std::time::Duration>,
) -> Result<Value, CliError> {
    let path = format!("/v0/executions/{}", path_segment(id));
    let started = std::time::Instant::now();
    loop {
        let execution = client.get(&path, &[]).await?;
        let status = execution
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("");
        if matches!(status, "completed" | "failed" | "cancelled") {
            return Ok(execution);
        }
        if timeout.is_some_and(|limit| started.elapsed() >= limit) {
            return Err(CliError::Failed(format!(
                "execution {id} is still {status} after the --wait-timeout"
            )));
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// Succeeds when a finished execution completed; otherwise fails with its status and error.
pub(super) fn finished(id: &str, execution: &Value) -> Result<(), CliError> {
    let status = execution
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("");
    if status == "completed" {
        return Ok(());
    }
    let error = execution.get("error").and_then(Value::as_str).unwrap_or("");
    Err(CliError::Failed(if error.is_empty() {
        format!("execution {id} {status}")
    } else {
        format!("execution {id} {status}: {error}")
    }))
}

/// Returns what a creation answer says about the agent's consumers, when nobody serves it.
pub(super) fn consumer_notice(execution: &Value) -> Option<String> {
    let notice = execution.get("notice")?.as_str()?;
    (!notice.is_empty()).then(|| notice.to_owned())
}

/// One listing of `keel executions`: the summaries and the cursor after the last one.
pub struct ExecutionsPage {
    /// Summaries, newest first.
    pub executions: Vec<Value>,
    /// Cursor of the next page (empty at the end).
    pub next_cursor: String,
}

/// `keel executions`: pages through the list until `--limit` summaries were collected.
pub(super) async fn list_executions(
    client: &Client,
    args: &args::ListArgs,
) -> Result<ExecutionsPage, CliError> {
    let mut collected: Vec<Value> = Vec::new();
    let mut cursor = String::new();
    while collected.len() < args.limit {
        let page_size = (args.limit - collected.len()).min(LIST_PAGE_MAX);
        let mut query: Vec<(&str, String)> = vec![("limit", page_size.to_string())];
        if let Some(status) = &args.status {
            query.push(("status", status.clone()));
        }
        if let Some(agent) = &args.agent {
            query.push(("agent_id", agent.clone()));
        }
        for (key, value) in &args.label {
            query.push(("label", format!("{key}={value}")));
        }
        if !cursor.is_empty() {
            query.push(("cursor", cursor.clone()));
        }
        let page = client.get("/v0/executions", &query).await?;
        let executions = page
            .get("executions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        collected.extend(executions);
        cursor = page
            .get("next_cursor")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if cursor.is_empty() {
            break;
        }
    }
    collected.truncate(args.limit);
    Ok(ExecutionsPage {
        executions: collected,
        next_cursor: cursor,
    })
}

/// Renders a listing as the table or as one JSON document.
pub(super) fn render_executions(page: &ExecutionsPage, format: OutputFormat) -> String {
    match format {
        OutputFormat::Text => output::executions_table(&page.executions),
        OutputFormat::Json => output::pretty(
            &json!({ "executions": page.executions, "next_cursor": page.next_cursor }),
        ),
    }
}
