//! Compiles `budget:` sections (a file's top level, or a rule's) into [`Budget`]s, reporting
//! every bad value with the field it is about.

use std::collections::BTreeMap;

use super::definition::{BudgetDefinition, CompileIssue, FieldPath};
use super::duration::parse_duration;
use crate::guardrails::budget::{Budget, MAX_COST_UNIT_BYTES, OnExceed, WallTime};

/// Compiles one `budget:` at `path`; `owner` names it in messages (`rule `x``, `the file`).
/// Returns `None` when it has problems (appended to `errors`).
pub(super) fn compile_budget(
    definition: &BudgetDefinition,
    path: &FieldPath,
    owner: &str,
    errors: &mut Vec<CompileIssue>,
) -> Option<Budget> {
    let before = errors.len();
    let mut count = |value: Option<i64>, key: &str| -> Option<u64> {
        let value = value?;
        match u64::try_from(value) {
            Ok(value) => Some(value),
            Err(_) => {
                errors.push(CompileIssue::new(
                    path.keys(&[key]),
                    format!("{owner}: budget.{key} must be 0 or more, got {value}"),
                ));
                None
            }
        }
    };
    let max_steps = count(definition.max_steps, "max_steps");
    let max_calls_per_tool = count(definition.max_calls_per_tool, "max_calls_per_tool");
    let max_retries = count(definition.max_retries, "max_retries");
    let max_tokens = count(definition.max_tokens, "max_tokens");
    let max_wall_time =
        definition
            .max_wall_time
            .as_ref()
            .and_then(|text| match parse_duration(text) {
                Ok(limit) if !limit.is_zero() => Some(WallTime {
                    limit,
                    text: text.clone(),
                }),
                Ok(_) => {
                    errors.push(CompileIssue::new(
                        path.keys(&["max_wall_time"]),
                        format!("{owner}: budget.max_wall_time must be longer than 0"),
                    ));
                    None
                }
                Err(message) => {
                    errors.push(CompileIssue::new(
                        path.keys(&["max_wall_time"]),
                        format!("{owner}: budget.max_wall_time: {message}"),
                    ));
                    None
                }
            });
    let mut max_cost = BTreeMap::new();
    for (unit, limit) in definition.max_cost.iter().flatten() {
        if unit.is_empty() || unit.len() > MAX_COST_UNIT_BYTES {
            errors.push(CompileIssue::new(
                path.keys(&["max_cost"]),
                format!(
                    "{owner}: budget.max_cost unit names must be 1 to {MAX_COST_UNIT_BYTES} bytes"
                ),
            ));
        } else if !limit.is_finite() || *limit < 0.0 {
            errors.push(CompileIssue::new(
                path.keys(&["max_cost", unit]),
                format!(
                    "{owner}: budget.max_cost.{unit} must be a number of at least 0, got {limit}"
                ),
            ));
        } else {
            max_cost.insert(unit.clone(), *limit);
        }
    }
    let on_exceed = match definition.on_exceed.as_deref() {
        None => None,
        Some("deny") => Some(OnExceed::Deny),
        Some("require_approval") => Some(OnExceed::RequireApproval),
        Some(other) => {
            errors.push(CompileIssue::new(
                path.keys(&["on_exceed"]),
                format!(
                    "{owner}: budget.on_exceed must be deny or require_approval, got {other:?}"
                ),
            ));
            None
        }
    };
    let approval_wait =
        definition
            .approval_wait
            .as_ref()
            .and_then(|text| match parse_duration(text) {
                Ok(wait) if !wait.is_zero() => Some(wait),
                Ok(_) => {
                    errors.push(CompileIssue::new(
                        path.keys(&["approval_wait"]),
                        format!("{owner}: budget.approval_wait must be longer than 0"),
                    ));
                    None
                }
                Err(message) => {
                    errors.push(CompileIssue::new(
                        path.keys(&["approval_wait"]),
                        format!("{owner}: budget.approval_wait: {message}"),
                    ));
                    None
                }
            });
    if errors.len() > before {
        return None;
    }
    Some(Budget {
        max_steps,
        max_calls_per_tool,
        max_wall_time,
        max_retries,
        max_cost,
        max_tokens,
        on_exceed,
        approval_wait,
    })
}
