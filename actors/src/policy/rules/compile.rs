//! Turns one file's [`PolicyDefinition`] into [`CompiledRules`]: checks every field, compiles
//! globs, regexes and schedules once, and reports every problem with the field it is about.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::approval::compile_approval;
use super::breakers::compile_breakers;
use super::budget::compile_budget;
use super::compiled::{CompiledRule, CompiledRules};
use super::concurrency::compile_concurrency;
use super::conditions::Conditions;
use super::definition::{CompileIssue, FieldPath, PolicyDefinition, RuleDefinition};
use super::duration::parse_duration;
use crate::policy::engine::{PolicyDecision, RateLimit, RetrySettings};

/// What compiling one file produced: the rules or every problem, plus warnings either way.
#[derive(Debug)]
pub struct Compilation {
    /// The compiled rules, or every problem found.
    pub result: Result<CompiledRules, Vec<CompileIssue>>,
    /// Things that load but are probably mistakes (unanchored patterns).
    pub warnings: Vec<CompileIssue>,
}

/// Compiles one policy file's definition.
pub fn compile(definition: &PolicyDefinition) -> Compilation {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut first_id: HashMap<&str, usize> = HashMap::new();
    let mut first_priority: HashMap<i64, usize> = HashMap::new();
    let mut rules = Vec::with_capacity(definition.rules.len());
    for (index, rule) in definition.rules.iter().enumerate() {
        let rule_path = FieldPath::rule(index);
        if let Some(first) = first_id.get(rule.id.as_str()) {
            errors.push(CompileIssue {
                path: rule_path.keys(&["id"]),
                message: format!("duplicate rule id `{}`", rule.id),
                related: Some(FieldPath::rule(*first).keys(&["id"])),
            });
        } else {
            first_id.insert(&rule.id, index);
        }
        if let Some(first) = first_priority.get(&rule.priority) {
            errors.push(CompileIssue {
                path: rule_path.keys(&["priority"]),
                message: format!("rule `{}`: duplicate priority {}", rule.id, rule.priority),
                related: Some(FieldPath::rule(*first).keys(&["priority"])),
            });
        } else {
            first_priority.insert(rule.priority, index);
        }
        if let Some(compiled) = compile_rule(rule, index, &mut errors, &mut warnings) {
            rules.push(Arc::new(compiled));
        }
    }
    let default = definition.default.as_ref().map(|default| {
        let reason = default
            .reason
            .clone()
            .unwrap_or_else(|| default_reason(default.decision.as_str()));
        PolicyDecision::plain(default.decision, "default", &reason)
    });
    let budget = definition.budget.as_ref().and_then(|budget| {
        let path = FieldPath(vec![super::definition::PathSegment::Key(
            "budget".to_owned(),
        )]);
        compile_budget(budget, &path, "the file's budget", &mut errors)
    });
    let breakers = definition
        .circuit_breakers
        .as_ref()
        .and_then(|breakers| compile_breakers(breakers, &mut errors))
        .unwrap_or_default();
    let concurrency = definition
        .concurrency
        .as_ref()
        .and_then(|concurrency| compile_concurrency(concurrency, &mut errors))
        .unwrap_or_default();
    let result = if errors.is_empty() {
        Ok(CompiledRules::new(rules, default, budget, breakers).with_concurrency(concurrency))
    } else {
        Err(errors)
    };
    Compilation { result, warnings }
}

/// Returns the reason of a file default that gives none.
pub fn default_reason(decision: &str) -> String {
    if decision == "deny" {
        "No explicit allow rule matched".to_owned()
    } else {
        format!("no rule matched; the default is {decision}")
    }
}

/// Compiles one rule; returns `None` when it has problems (already appended to `errors`).
fn compile_rule(
    rule: &RuleDefinition,
    index: usize,
    errors: &mut Vec<CompileIssue>,
    warnings: &mut Vec<CompileIssue>,
) -> Option<CompiledRule> {
    let error_count = errors.len();
    let path = FieldPath::rule(index);
    let name = rule.id.as_str();
    if rule.id.trim().is_empty() {
        errors.push(CompileIssue::new(
            path.keys(&["id"]),
            format!("rule #{}: id must not be empty", index + 1),
        ));
    }
    let conditions = Conditions::compile(&rule.when, &path.keys(&["when"]), name, errors, warnings);
    // As in the reference kernel, 0 means "the kernel's step timeout", like no value at all.
    let timeout_ms = rule
        .then
        .timeout_ms
        .and_then(|timeout| match u64::try_from(timeout) {
            Ok(0) => None,
            Ok(timeout) => Some(timeout),
            Err(_) => {
                errors.push(CompileIssue::new(
                    path.keys(&["then", "timeout_ms"]),
                    format!(
                        "rule `{name}`: then.timeout_ms must be 0 (the step timeout) or more, \
                         got {timeout}"
                    ),
                ));
                None
            }
        });
    let rate_limit = rule.rate_limit.as_ref().and_then(|limit| {
        let window = duration_field(
            &limit.window,
            &path,
            &["rate_limit", "window"],
            name,
            errors,
        );
        let max = positive_u32(
            limit.max,
            &path.keys(&["rate_limit", "max"]),
            name,
            "rate_limit.max",
            errors,
        );
        Some(RateLimit {
            max: max?,
            window: window?,
            window_text: limit.window.clone(),
        })
    });
    let retry = rule.retry.as_ref().and_then(|retry| {
        let base_delay = duration_field(
            &retry.base_delay,
            &path,
            &["retry", "base_delay"],
            name,
            errors,
        );
        let max_delay = duration_field(
            &retry.max_delay,
            &path,
            &["retry", "max_delay"],
            name,
            errors,
        );
        let attempts_path = path.keys(&["retry", "max_attempts"]);
        let max_attempts = positive_u32(
            retry.max_attempts,
            &attempts_path,
            name,
            "retry.max_attempts",
            errors,
        );
        let (base_delay, max_delay) = (base_delay?, max_delay?);
        if base_delay > max_delay {
            errors.push(CompileIssue::new(
                path.keys(&["retry", "base_delay"]),
                format!(
                    "rule `{name}`: retry.base_delay `{}` is longer than retry.max_delay `{}`",
                    retry.base_delay, retry.max_delay
                ),
            ));
            return None;
        }
        Some(RetrySettings {
            max_attempts: max_attempts?,
            base_delay,
            max_delay,
        })
    });
    let budget = rule.budget.as_ref().and_then(|budget| {
        compile_budget(
            budget,
            &path.keys(&["budget"]),
            &format!("rule `{name}`"),
            errors,
        )
    });
    let approval = rule
        .then
        .approval
        .as_ref()
        .and_then(|approval| compile_approval(approval, rule, &path, errors));
    if errors.len() > error_count {
        return None;
    }
    let reason = rule
        .then
        .reason
        .clone()
        .or_else(|| rule.description.clone())
        .unwrap_or_else(|| format!("matched rule {name}"));
    let outcome = PolicyDecision {
        denied_by: crate::policy::DenialKind::Rule,
        decision: rule.then.decision,
        rule_id: rule.id.clone(),
        reason,
        timeout_ms,
        rate_limit,
        retry,
        budget: budget.map(Arc::new),
        rate_slot: None,
        max_concurrent_steps: None,
        replay: rule.then.replay.unwrap_or(true),
        at_most_once: rule.then.at_most_once,
        approval,
    };
    Some(CompiledRule {
        index,
        priority: rule.priority,
        conditions,
        outcome,
    })
}

/// Parses the duration at `rule_path.keys`, reporting a problem when it is bad.
pub(super) fn duration_field(
    text: &str,
    rule_path: &FieldPath,
    keys: &[&str],
    rule: &str,
    errors: &mut Vec<CompileIssue>,
) -> Option<Duration> {
    match parse_duration(text) {
        Ok(duration) => Some(duration),
        Err(message) => {
            let field = keys.join(".");
            errors.push(CompileIssue::new(
                rule_path.keys(keys),
                format!("rule `{rule}`: {field}: {message}"),
            ));
            None
        }
    }
}

/// Checks that a count is at least 1 and fits in a `u32`.
fn positive_u32(
    value: i64,
    path: &FieldPath,
    rule: &str,
    field: &str,
    errors: &mut Vec<CompileIssue>,
) -> Option<u32> {
    match u32::try_from(value) {
        Ok(value) if value > 0 => Some(value),
        _ => {
            errors.push(CompileIssue::new(
                path.clone(),
                format!(
                    "rule `{rule}`: {field} must be between 1 and {}, got {value}",
                    u32::MAX
                ),
            ));
            None
        }
    }
}
