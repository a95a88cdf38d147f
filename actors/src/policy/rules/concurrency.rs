//! Compiles `concurrency:` (a Keel addition) into the agent's `max_running` and the tool
//! limits, reporting every bad value with the field it is about.

use super::definition::{CompileIssue, ConcurrencyDefinition, FieldPath, PathSegment};
use super::glob::Glob;
use crate::guardrails::concurrency::{ToolLimit, ToolLimits};

/// What a file's `concurrency:` declares.
#[derive(Clone, Debug, Default)]
pub struct Concurrency {
    /// Most running executions per agent id.
    pub max_running: Option<u32>,
    /// Most unfinished steps per tool id (remote ones in runners' hands; local ones, counted apart).
    pub tools: ToolLimits,
}

/// Compiles the file's `concurrency:`; returns `None` when it has problems.
pub(super) fn compile_concurrency(
    definition: &ConcurrencyDefinition,
    errors: &mut Vec<CompileIssue>,
) -> Option<Concurrency> {
    let before = errors.len();
    let path = FieldPath(vec![PathSegment::Key("concurrency".to_owned())]);
    let max_running = definition.max_running.and_then(|value| {
        positive(
            value,
            &path.keys(&["max_running"]),
            "concurrency.max_running",
            errors,
        )
    });
    let mut tools = Vec::new();
    for (index, entry) in definition.tools.iter().flatten().enumerate() {
        let entry_path = FieldPath(vec![
            PathSegment::Key("concurrency".to_owned()),
            PathSegment::Key("tools".to_owned()),
            PathSegment::Index(index),
        ]);
        let name = format!("concurrency.tools[{index}]");
        let patterns: Vec<(&str, &String)> = entry
            .tool_id
            .iter()
            .map(|pattern| ("tool_id", pattern))
            .chain(entry.tool_ids.iter().flatten().map(|p| ("tool_ids", p)))
            .collect();
        if patterns.is_empty() {
            errors.push(CompileIssue::new(
                entry_path.clone(),
                format!("{name}: give the tools it applies to with `tool_id` or `tool_ids`"),
            ));
        }
        let mut globs = Vec::new();
        for (key, pattern) in patterns {
            match Glob::new(pattern) {
                Ok(glob) => globs.push(glob),
                Err(message) => errors.push(CompileIssue::new(
                    entry_path.keys(&[key]),
                    format!("{name}: {key}: {message}"),
                )),
            }
        }
        let limit = positive(
            entry.max_concurrent_steps,
            &entry_path.keys(&["max_concurrent_steps"]),
            &format!("{name}.max_concurrent_steps"),
            errors,
        );
        if let Some(limit) = limit {
            tools.push(ToolLimit {
                tools: globs,
                max_concurrent_steps: limit,
            });
        }
    }
    (errors.len() == before).then_some(Concurrency {
        max_running,
        tools: ToolLimits(tools),
    })
}

/// Returns `value` as a limit of at least 1, or reports it.
fn positive(
    value: i64,
    path: &FieldPath,
    name: &str,
    errors: &mut Vec<CompileIssue>,
) -> Option<u32> {
    match u32::try_from(value) {
        Ok(limit) if limit > 0 => Some(limit),
        _ => {
            errors.push(CompileIssue::new(
                path.clone(),
                format!("{name} must be between 1 and {}, got {value}", u32::MAX),
            ));
            None
        }
    }
}
