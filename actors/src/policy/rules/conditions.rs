//! The compiled `when:` section of a rule: every present condition must hold for the rule to
//! match. Compiling checks each condition and reports every problem, not just the first.

use std::collections::BTreeMap;

use super::definition::{
    ArgumentsDefinition, ArgumentsForm, CompileIssue, ConditionDefinition, FieldPath,
};
use super::glob::Glob;
use super::predicates::{Check, Predicate};
use super::schedule::Schedule;
use crate::policy::engine::PolicyInput;

/// Actions a policy can be asked about today.
pub const KNOWN_ACTIONS: [&str; 1] = ["tool.invoke"];

/// The compiled conditions of one rule.
#[derive(Clone, Debug, Default)]
pub struct Conditions {
    action: Option<String>,
    tool_id: Option<Glob>,
    tool_ids: Option<Vec<Glob>>,
    agent_id: Option<String>,
    agent_ids: Option<Vec<String>>,
    labels: Vec<(String, String)>,
    arguments: Option<Vec<(String, Predicate)>>,
    min_step_count: Option<u64>,
    min_duration_ms: Option<u64>,
    schedule: Option<Schedule>,
    created_by: Option<Glob>,
    on_behalf_of: Option<Glob>,
}

impl Conditions {
    /// Compiles a `when:` section found at `path`; `rule` names the rule in messages.
    pub fn compile(
        definition: &ConditionDefinition,
        path: &FieldPath,
        rule: &str,
        errors: &mut Vec<CompileIssue>,
        warnings: &mut Vec<CompileIssue>,
    ) -> Self {
        let mut issue = |keys: &[&str], message: String| {
            errors.push(CompileIssue::new(
                path.keys(keys),
                format!("rule `{rule}`: when.{}: {message}", keys.join(".")),
            ));
        };
        if let Some(action) = &definition.action
            && !KNOWN_ACTIONS.contains(&action.as_str())
        {
            issue(
                &["action"],
                format!(
                    "unknown action `{action}` (known: {})",
                    KNOWN_ACTIONS.join(", ")
                ),
            );
        }
        let mut glob_notes = Vec::new();
        let mut glob = |pattern: &str, key: &'static str| match Glob::new(pattern) {
            Ok(glob) => {
                glob_notes.extend(glob.oddities().into_iter().map(|note| (key, note)));
                Some(glob)
            }
            Err(message) => {
                issue(&[key], message);
                None
            }
        };
        let tool_id = definition
            .tool_id
            .as_deref()
            .and_then(|pattern| glob(pattern, "tool_id"));
        let tool_ids = definition.tool_ids.as_ref().map(|patterns| {
            patterns
                .iter()
                .filter_map(|pattern| glob(pattern, "tool_ids"))
                .collect::<Vec<_>>()
        });
        let created_by = definition
            .created_by
            .as_deref()
            .and_then(|pattern| glob(pattern, "created_by"));
        let on_behalf_of = definition
            .on_behalf_of
            .as_deref()
            .and_then(|pattern| glob(pattern, "on_behalf_of"));
        if definition.tool_ids.as_ref().is_some_and(Vec::is_empty) {
            issue(&["tool_ids"], "list is empty".to_owned());
        }
        for (key, note) in glob_notes {
            warnings.push(CompileIssue::new(
                path.keys(&[key]),
                format!("rule `{rule}`: when.{key}: {note}"),
            ));
        }
        if definition.agent_ids.as_ref().is_some_and(Vec::is_empty) {
            issue(&["agent_ids"], "list is empty".to_owned());
        }
        if definition.labels.as_ref().is_some_and(BTreeMap::is_empty) {
            issue(
                &["labels"],
                "map is empty (list at least one label)".to_owned(),
            );
        }
        if definition
            .arguments
            .as_ref()
            .is_some_and(|arguments| arguments.predicates.is_empty())
        {
            issue(
                &["arguments"],
                "is empty (list at least one predicate)".to_owned(),
            );
        }
        let min_step_count = definition.min_step_count.and_then(|count| {
            u64::try_from(count)
                .map_err(|_| {
                    issue(
                        &["min_step_count"],
                        format!("must be 0 or more, got {count}"),
                    )
                })
                .ok()
        });
        let min_duration_ms =
            definition
                .min_duration_ms
                .and_then(|duration| match u64::try_from(duration) {
                    Ok(duration) if duration > 0 => Some(duration),
                    _ => {
                        issue(
                            &["min_duration_ms"],
                            format!("must be greater than 0, got {duration}"),
                        );
                        None
                    }
                });
        let schedule = definition.schedule.as_deref().and_then(|text| {
            Schedule::parse(text)
                .map_err(|message| issue(&["schedule"], message))
                .ok()
        });
        let arguments = definition
            .arguments
            .as_ref()
            .map(|arguments| compile_arguments(arguments, path, rule, errors, warnings));
        Self {
            action: definition.action.clone(),
            tool_id,
            tool_ids,
            agent_id: definition.agent_id.clone(),
            agent_ids: definition.agent_ids.clone(),
            labels: definition
                .labels
                .iter()
                .flatten()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            arguments,
            min_step_count,
            min_duration_ms,
            schedule,
            created_by,
            on_behalf_of,
        }
    }

    /// Whether these conditions look at the call's arguments (`when.arguments`).
    pub fn look_at_arguments(&self) -> bool {
        self.arguments.is_some()
    }

    /// Returns whether every present condition holds for the input. An argument predicate
    /// that cannot be evaluated (a `pattern` on an array, arguments that are not an object)
    /// counts as holding when `fail_closed` (deny and approval rules, so that a type mismatch
    /// cannot slip a call past them; docs/compatibility.md) and as failing otherwise.
    pub fn hold(&self, input: &PolicyInput, fail_closed: bool) -> bool {
        if self
            .action
            .as_ref()
            .is_some_and(|action| *action != input.action)
        {
            return false;
        }
        if self
            .tool_id
            .as_ref()
            .is_some_and(|glob| !glob.is_match(input.tool_id.as_str()))
        {
            return false;
        }
        if self.tool_ids.as_ref().is_some_and(|globs| {
            !globs
                .iter()
                .any(|glob| glob.is_match(input.tool_id.as_str()))
        }) {
            return false;
        }
        if self
            .agent_id
            .as_ref()
            .is_some_and(|agent| input.agent_id != *agent)
        {
            return false;
        }
        if self
            .agent_ids
            .as_ref()
            .is_some_and(|agents| !agents.iter().any(|agent| input.agent_id == *agent))
        {
            return false;
        }
        if !self
            .labels
            .iter()
            .all(|(key, value)| input.labels.get(key) == Some(value))
        {
            return false;
        }
        if self
            .min_step_count
            .is_some_and(|count| input.step_count < count)
        {
            return false;
        }
        if self
            .min_duration_ms
            .is_some_and(|duration| input.duration_ms < duration)
        {
            return false;
        }
        if self
            .schedule
            .as_ref()
            .is_some_and(|schedule| !schedule.contains(&input.now))
        {
            return false;
        }
        // A principal condition never holds for an execution without that principal.
        let principal = |glob: &Option<Glob>, value: &Option<String>| match glob {
            None => true,
            Some(glob) => value.as_deref().is_some_and(|value| glob.is_match(value)),
        };
        if !principal(&self.created_by, &input.created_by)
            || !principal(&self.on_behalf_of, &input.on_behalf_of)
        {
            return false;
        }
        if let Some(predicates) = &self.arguments {
            let Some(arguments) = input.arguments.as_object() else {
                return fail_closed;
            };
            return predicates.iter().all(|(field, predicate)| {
                match predicate.check(arguments.get(field)) {
                    Check::Holds => true,
                    Check::Fails => false,
                    Check::Undecidable => fail_closed,
                }
            });
        }
        true
    }
}

/// Compiles the predicates of `when.arguments`, pointing each problem at its predicate.
fn compile_arguments(
    arguments: &ArgumentsDefinition,
    path: &FieldPath,
    rule: &str,
    errors: &mut Vec<CompileIssue>,
    warnings: &mut Vec<CompileIssue>,
) -> Vec<(String, Predicate)> {
    let mut compiled = Vec::with_capacity(arguments.predicates.len());
    for (index, predicate) in arguments.predicates.iter().enumerate() {
        let field = predicate.field.as_deref().unwrap_or_default();
        let (predicate_path, context) = match arguments.form {
            ArgumentsForm::Sequence => (
                path.keys(&["arguments"]).index(index),
                format!("rule `{rule}`: when.arguments[{index}]"),
            ),
            ArgumentsForm::Mapping => (
                path.keys(&["arguments", field]),
                format!("rule `{rule}`: when.arguments.{field}"),
            ),
        };
        if field.is_empty() {
            errors.push(CompileIssue::new(
                predicate_path.clone(),
                format!(
                    "{context}: predicate has no `field` \
                     (name the top-level argument it checks, e.g. `field: command`)"
                ),
            ));
        }
        if let Some(compiled_predicate) =
            Predicate::compile(predicate, &predicate_path, &context, errors, warnings)
            && !field.is_empty()
        {
            compiled.push((field.to_owned(), compiled_predicate));
        }
    }
    compiled
}
