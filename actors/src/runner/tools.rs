//! The tool directory: schemas published by runners (WIRE.md §13.6–13.7). Kept in memory;
//! runners publish again before every connect. A runner's schemas stay after it disconnects
//! (they are replaced by its next publish, or dropped by `DELETE /v0/runners/{id}`), which
//! avoids the reference kernel's reconnect race (§13.1).

use std::collections::HashMap;
use std::sync::RwLock;

use crate::ids::{RunnerId, ToolId};
use crate::kernel::context::{read, write};
use crate::kernel::{ToolEntry, ToolSchema};

/// Published tool schemas, by tool id.
#[derive(Default)]
pub struct ToolDirectory {
    entries: RwLock<HashMap<ToolId, ToolEntry>>,
}

impl ToolDirectory {
    /// Replaces everything a runner published before with `tools`.
    pub fn publish(&self, runner_id: &RunnerId, tools: Vec<ToolSchema>) {
        let now = crate::time::now();
        let mut entries = write(&self.entries);
        entries.retain(|_, entry| entry.runner_id != runner_id);
        for tool in tools {
            let entry = ToolEntry {
                id: tool.id.clone(),
                description: tool.description,
                input_schema: tool.input_schema,
                runner_id: runner_id.clone(),
                registered_at: now,
            };
            entries.insert(tool.id, entry);
        }
    }

    /// Drops a runner's schemas.
    pub fn remove_runner(&self, runner_id: &RunnerId) {
        write(&self.entries).retain(|_, entry| entry.runner_id != runner_id);
    }

    /// Returns entries whose id equals `prefix` or starts with `prefix_` or `prefix.`.
    pub fn list(&self, prefix: &str) -> Vec<ToolEntry> {
        let entries = read(&self.entries);
        let mut listed: Vec<ToolEntry> = entries
            .values()
            .filter(|entry| matches_prefix(entry.id.as_str(), prefix))
            .cloned()
            .collect();
        listed.sort_by(|left, right| left.id.cmp(&right.id));
        listed
    }
}

/// Returns whether a tool id belongs to a namespace prefix.
pub fn matches_prefix(id: &str, prefix: &str) -> bool {
    if prefix.is_empty() || id == prefix {
        return true;
    }
    id.strip_prefix(prefix)
        .is_some_and(|rest| rest.starts_with('_') || rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_matches_exact_underscore_and_dot_namespaces_only() {
        assert!(matches_prefix("github_create_pr", "github"));
        assert!(matches_prefix("github.create_pr", "github"));
        assert!(matches_prefix("github", "github"));
        assert!(!matches_prefix("githubactions_x", "github"));
        assert!(matches_prefix("anything", ""));
    }
}
