//! Listing an MCP server's tools (following `tools/list` pages) and turning them into Keel
//! tools.

use rmcp::service::RoleClient;
use serde_json::{Value, json};

use super::{Live, MAX_LIST_PAGES, McpError, PublishedTool};

/// Lists every tool of the server as JSON (`name`, `description`, `inputSchema`, …).
pub(super) async fn list_tools(live: &Live) -> Result<Vec<Value>, McpError> {
    list_peer_tools(live.service.peer()).await
}

/// Lists every tool through a peer.
pub(super) async fn list_peer_tools(peer: &rmcp::Peer<RoleClient>) -> Result<Vec<Value>, McpError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_LIST_PAGES {
        let params = cursor.clone().map(|cursor| {
            let mut params = rmcp::model::PaginatedRequestParams::default();
            params.cursor = Some(cursor);
            params
        });
        let page = peer
            .list_tools(params)
            .await
            .map_err(|error| McpError::List(error.to_string()))?;
        for tool in &page.tools {
            tools.push(
                serde_json::to_value(tool).map_err(|error| McpError::List(error.to_string()))?,
            );
        }
        match page.next_cursor {
            None => return Ok(tools),
            Some(next) => {
                if !seen.insert(next.clone()) {
                    return Err(McpError::List(format!(
                        "the cursor {next:?} came back twice"
                    )));
                }
                cursor = Some(next);
            }
        }
    }
    Err(McpError::List(format!("more than {MAX_LIST_PAGES} pages")))
}

/// Turns listed MCP tools into Keel tools: unusable names (empty, with a comma or whitespace)
/// and duplicates are dropped with a warning.
pub fn publishable(listed: Vec<Value>, prefix: &str, only: &[String]) -> Vec<PublishedTool> {
    let mut seen = std::collections::HashSet::new();
    let mut tools = Vec::new();
    for tool in listed {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            tracing::warn!("ignoring an MCP tool without a name");
            continue;
        };
        if !only.is_empty() && !only.iter().any(|allowed| allowed == name) {
            continue;
        }
        if name.is_empty() || name.contains(',') || name.chars().any(char::is_whitespace) {
            tracing::warn!(name, "ignoring an MCP tool whose name cannot be a tool id");
            continue;
        }
        if !seen.insert(name.to_owned()) {
            tracing::warn!(name, "ignoring a second MCP tool of the same name");
            continue;
        }
        let input_schema = tool
            .get("inputSchema")
            .filter(|schema| schema.is_object())
            .cloned()
            .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
        tools.push(PublishedTool {
            id: format!("{prefix}{name}"),
            name: name.to_owned(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            input_schema,
            digest: super::pins::digest(&tool),
        });
    }
    tools
}

/// The body of `POST /v0/runners/{id}/tools` for the published tools.
pub fn tools_body(tools: &[PublishedTool]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({
                "id": tool.id,
                "description": tool.description,
                "input_schema": tool.input_schema,
            })
        })
        .collect();
    json!({ "tools": tools })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_prefixed_filtered_and_deduplicated() {
        let listed = vec![
            json!({ "name": "read", "description": "Reads.", "inputSchema": { "type": "object", "properties": { "p": {} } } }),
            json!({ "name": "read", "description": "again" }),
            json!({ "name": "bad name" }),
            json!({ "name": "a,b" }),
            json!({ "description": "no name" }),
            json!({ "name": "write" }),
        ];
        let tools = publishable(listed.clone(), "fs.", &[]);
        let ids: Vec<&str> = tools.iter().map(|tool| tool.id.as_str()).collect();
        assert_eq!(ids, ["fs.read", "fs.write"]);
        assert_eq!(tools[0].description, "Reads.");
        assert_eq!(
            tools[1].input_schema,
            json!({ "type": "object", "properties": {} })
        );
        let only = publishable(listed, "", &["write".to_owned()]);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].id, "write");
    }
}
