//! Compiles `circuit_breakers:` into a [`BreakerSet`], reporting every bad value with the field
//! it is about.

use std::time::Duration;

use super::definition::{BreakerDefinition, CompileIssue, FieldPath, PathSegment};
use super::duration::parse_duration;
use super::glob::Glob;
use crate::guardrails::breaker::{BreakerConfig, BreakerScope, BreakerSet, FailureRate};

/// Window of an entry that gives none.
const DEFAULT_WINDOW: &str = "1m";
/// `min_calls` of a failure-rate entry that gives none.
const DEFAULT_MIN_CALLS: u32 = 10;

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
    let named = |one: &Option<String>, many: &Option<Vec<String>>, key: &'static str| {
        let many_key = if key == "tool_id" {
            "tool_ids"
        } else {
            "runner_ids"
        };
        one.iter()
            .map(|pattern| (key, pattern.clone()))
            .chain(
                many.iter()
                    .flatten()
                    .map(|pattern| (many_key, pattern.clone())),
            )
            .collect::<Vec<_>>()
    };
    let tool_patterns = named(&definition.tool_id, &definition.tool_ids, "tool_id");
    let runner_patterns = named(&definition.runner_id, &definition.runner_ids, "runner_id");
    let scope = if runner_patterns.is_empty() {
        BreakerScope::Tool
    } else {
        BreakerScope::Runner
    };
    if tool_patterns.is_empty() == runner_patterns.is_empty() {
        errors.push(CompileIssue::new(
            path.clone(),
            format!(
                "{name}: give the tools it applies to with `tool_id` or `tool_ids`, or the runners with `runner_id` or `runner_ids` (not both)"
            ),
        ));
    }
    let patterns: Vec<(&str, String)> = tool_patterns.into_iter().chain(runner_patterns).collect();
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
    let (failures, failure_rate) = trip(definition, path, &name, errors);
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
        scope,
        failures,
        failure_rate,
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

/// Reads what opens the breaker: `failures` (count mode) or `failure_rate` with `min_calls`,
/// exactly one of the two. Problems are appended to `errors` (the values returned then do
/// not matter).
fn trip(
    definition: &BreakerDefinition,
    path: &FieldPath,
    name: &str,
    errors: &mut Vec<CompileIssue>,
) -> (u32, Option<FailureRate>) {
    let mut problem = |key: &str, message: String| {
        errors.push(CompileIssue::new(
            path.keys(&[key]),
            format!("{name}: {message}"),
        ));
    };
    match (definition.failures, definition.failure_rate) {
        (Some(failures), None) => {
            if definition.min_calls.is_some() {
                problem(
                    "min_calls",
                    "min_calls goes with failure_rate, not failures".into(),
                );
            }
            match u32::try_from(failures) {
                Ok(failures) if failures > 0 => (failures, None),
                _ => {
                    let limit = u32::MAX;
                    problem(
                        "failures",
                        format!("failures must be between 1 and {limit}, got {failures}"),
                    );
                    (1, None)
                }
            }
        }
        (None, Some(rate)) => {
            if !(rate > 0.0 && rate <= 1.0) {
                problem(
                    "failure_rate",
                    format!("failure_rate must be above 0 and at most 1, got {rate}"),
                );
            }
            let min_calls = match definition.min_calls {
                None => DEFAULT_MIN_CALLS,
                Some(calls) => u32::try_from(calls)
                    .ok()
                    .filter(|calls| *calls > 0)
                    .unwrap_or_else(|| {
                        problem(
                            "min_calls",
                            format!("min_calls must be between 1 and {}, got {calls}", u32::MAX),
                        );
                        1
                    }),
            };
            (0, Some(FailureRate { rate, min_calls }))
        }
        (Some(_), Some(_)) => {
            problem(
                "failure_rate",
                "give `failures` or `failure_rate`, not both".into(),
            );
            (1, None)
        }
        (None, None) => {
            errors.push(CompileIssue::new(
                path.clone(),
                format!("{name}: give `failures` (a count) or `failure_rate` (a share of calls)"),
            ));
            (1, None)
        }
    }
}
