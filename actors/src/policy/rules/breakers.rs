//! Compiles `circuit_breakers:` into a [`BreakerSet`], reporting every bad value with the field
//! it is about.

use std::time::Duration;

use super::definition::{BreakerDefinition, CompileIssue, FieldPath, PathSegment};
use super::duration::parse_duration;
use super::glob::Glob;
use crate::guardrails::breaker::{BreakerConfig, BreakerSet};

/// Window of an entry that gives none.
const DEFAULT_WINDOW: &str = "1m";

/// Compiles the file's `circuit_breakers:`; returns `None` when an entry has problems.
pub(super) fn compile_breakers(
    definitions: &[BreakerDefinition],
    errors: &mut Vec<CompileIssue>,
) -> Option<BreakerSet> {
    let before = errors.len();
    let mut set = Vec::with_capacity(definitions.len());
    for (index, definition) in definitions.iter().enumerate() {
        let path = FieldPath(vec![
            PathSegment::Key("circuit_breakers".to_owned()),
            PathSegment::Index(index),
        ]);
        if let Some(config) = compile_one(definition, &path, index, errors) {
            set.push(config);
        }
    }
    (errors.len() == before).then_some(BreakerSet(set))
}

fn compile_one(
    definition: &BreakerDefinition,
    path: &FieldPath,
    index: usize,
    errors: &mut Vec<CompileIssue>,
) -> Option<BreakerConfig> {
    let before = errors.len();
    let name = format!("circuit_breakers[{index}]");
    let patterns: Vec<(&str, String)> = definition
        .tool_id
        .iter()
        .map(|pattern| ("tool_id", pattern.clone()))
        .chain(
            definition
                .tool_ids
                .iter()
                .flatten()
                .map(|pattern| ("tool_ids", pattern.clone())),
        )
        .collect();
    if patterns.is_empty() {
        errors.push(CompileIssue::new(
            path.clone(),
            format!("{name}: give the tools it applies to with `tool_id` or `tool_ids`"),
        ));
    }
    let mut tools = Vec::new();
    for (key, pattern) in &patterns {
        match Glob::new(pattern) {
            Ok(glob) => tools.push(glob),
            Err(message) => errors.push(CompileIssue::new(
                path.keys(&[key]),
                format!("{name}: {key}: {message}"),
            )),
        }
    }
    let failures = match u32::try_from(definition.failures) {
        Ok(failures) if failures > 0 => Some(failures),
        _ => {
            errors.push(CompileIssue::new(
                path.keys(&["failures"]),
                format!(
                    "{name}: failures must be between 1 and {}, got {}",
                    u32::MAX,
                    definition.failures
                ),
            ));
            None
        }
    };
    let window_text = definition
        .window
        .clone()
        .unwrap_or_else(|| DEFAULT_WINDOW.to_owned());
    let window = positive(&window_text, path, "window", &name, errors);
    let cool_down = positive(&definition.cool_down, path, "cool_down", &name, errors);
    if errors.len() > before {
        return None;
    }
    Some(BreakerConfig {
        tools,
        failures: failures?,
        window: window?,
        window_text,
        cool_down: cool_down?,
        cool_down_text: definition.cool_down.clone(),
    })
}

fn positive(
    text: &str,
    path: &FieldPath,
    key: &str,
    name: &str,
    errors: &mut Vec<CompileIssue>,
) -> Option<Duration> {
    match parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Some(duration),
        Ok(_) => {
            errors.push(CompileIssue::new(
                path.keys(&[key]),
                format!("{name}: {key} must be longer than 0"),
            ));
            None
        }
        Err(message) => {
            errors.push(CompileIssue::new(
                path.keys(&[key]),
                format!("{name}: {key}: {message}"),
            ));
            None
        }
    }
}
