//! Compiles `concurrency:` (a Keel addition) into the agent's `max_running`, its limits per
//! label value and the tool limits, reporting every bad value with the field it is about.

use super::definition::{
    CompileIssue, ConcurrencyDefinition, FieldPath, LabelLimitDefinition, PathSegment,
};
use super::glob::Glob;
use crate::guardrails::concurrency::{LabelLimit, RunningLimits, ToolLimit, ToolLimits};

/// What a file's `concurrency:` declares.
#[derive(Clone, Debug, Default)]
pub struct Concurrency {
    /// Most running executions per agent id.
    pub max_running: Option<u32>,
    /// Most running executions per value of a label, per agent id (`None`: not given, so a
    /// directory's global entries apply; an empty list lifts them).
    pub labels: Option<Vec<LabelLimit>>,
    /// Most unfinished steps per tool id (remote ones in runners' hands; local ones, counted apart).
    pub tools: ToolLimits,
}

impl Concurrency {
    /// Returns the running limits of an agent this file applies to, with `global`'s keys for
    /// those it does not give (an agent file over `_global.yaml`, as budget keys).
    pub fn running(&self, global: Option<&Self>) -> RunningLimits {
        RunningLimits {
            max_running: self
                .max_running
                .or_else(|| global.and_then(|global| global.max_running)),
            labels: self
                .labels
                .clone()
                .or_else(|| global.and_then(|global| global.labels.clone()))
                .unwrap_or_default(),
        }
    }
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
    let labels = definition
        .labels
        .as_ref()
        .map(|entries| compile_labels(entries, errors));
    (errors.len() == before).then_some(Concurrency {
        max_running,
        labels,
        tools: ToolLimits(tools),
    })
}

/// Longest label key a limit may name (a longer one is taken for a mistake).
const LABEL_KEY_LIMIT: usize = 256;

/// Compiles `concurrency.labels`: one entry per label key, each with a limit of at least 1.
fn compile_labels(
    entries: &[LabelLimitDefinition],
    errors: &mut Vec<CompileIssue>,
) -> Vec<LabelLimit> {
    let mut limits: Vec<LabelLimit> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let entry_path = FieldPath(vec![
            PathSegment::Key("concurrency".to_owned()),
            PathSegment::Key("labels".to_owned()),
            PathSegment::Index(index),
        ]);
        let name = format!("concurrency.labels[{index}]");
        let label = entry.label.as_str();
        let mut good = true;
        if label.is_empty() || label.len() > LABEL_KEY_LIMIT {
            good = false;
            errors.push(CompileIssue::new(
                entry_path.keys(&["label"]),
                format!(
                    "{name}.label must be a label key of 1 to {LABEL_KEY_LIMIT} bytes, got {label:?}"
                ),
            ));
        } else if let Some(first) = entries[..index].iter().position(|e| e.label == label) {
            good = false;
            errors.push(CompileIssue::new(
                entry_path.keys(&["label"]),
                format!(
                    "{name}.label: label {label:?} is already limited by concurrency.labels[{first}]"
                ),
            ));
        }
        let max_running = positive(
            entry.max_running,
            &entry_path.keys(&["max_running"]),
            &format!("{name}.max_running"),
            errors,
        );
        if let (true, Some(max_running)) = (good, max_running) {
            limits.push(LabelLimit {
                label: label.to_owned(),
                max_running,
            });
        }
    }
    limits
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
