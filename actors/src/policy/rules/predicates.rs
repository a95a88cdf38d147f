//! Argument predicates: constraints on one top-level field of a tool call's arguments object.
//! An absent field passes unless `required` (which also refuses the empty string); a present
//! field must satisfy every constraint. A value of the wrong type (`pattern` and `max_length`
//! need a string, `min`/`max` a number) cannot be evaluated: [`Check::Undecidable`], which an
//! allow rule reads as not matching (as the reference kernel does) and a deny or approval rule
//! as matching (fail closed; docs/compatibility.md).

use regex::Regex;
use serde_json::Value;

use super::definition::{CompileIssue, FieldPath, PredicateDefinition};
use super::go_regex;

/// Compiled size limit of one `pattern` regex (the regex crate matches in linear time).
pub const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The outcome of a predicate on one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Every constraint is satisfied.
    Holds,
    /// A constraint is evaluated and not satisfied.
    Fails,
    /// A constraint cannot be evaluated on a value of this type, and no other one fails.
    Undecidable,
}

/// A compiled predicate on one argument field.
#[derive(Clone, Debug)]
pub struct Predicate {
    pattern: Option<Regex>,
    one_of: Option<Vec<Value>>,
    min: Option<f64>,
    max: Option<f64>,
    max_length: Option<usize>,
    required: bool,
}

impl Predicate {
    /// Compiles a predicate, appending problems to `errors` and warnings to `warnings`.
    pub fn compile(
        definition: &PredicateDefinition,
        path: &FieldPath,
        context: &str,
        errors: &mut Vec<CompileIssue>,
        warnings: &mut Vec<CompileIssue>,
    ) -> Option<Self> {
        let error_count = errors.len();
        let required = definition.required.unwrap_or(false);
        let has_constraint = definition.pattern.is_some()
            || definition.one_of.is_some()
            || definition.min.is_some()
            || definition.max.is_some()
            || definition.max_length.is_some()
            || required;
        if !has_constraint {
            errors.push(CompileIssue::new(
                path.clone(),
                format!(
                    "{context}: predicate has no constraint \
                     (give pattern, one_of, min, max, max_length or required: true)"
                ),
            ));
        }
        let pattern = definition.pattern.as_deref().and_then(|source| {
            let pattern_path = path.keys(&["pattern"]);
            if source.is_empty() {
                errors.push(CompileIssue::new(
                    pattern_path,
                    format!("{context}.pattern is empty (it would constrain nothing)"),
                ));
                return None;
            }
            if !is_anchored_at_start(source) {
                warnings.push(CompileIssue::new(
                    pattern_path.clone(),
                    format!(
                        "{context}.pattern `{source}` is not anchored (^...), \
                         so it matches anywhere inside the value"
                    ),
                ));
            }
            match go_regex::compile(source, PATTERN_SIZE_LIMIT) {
                Ok(regex) => Some(regex),
                Err(error) => {
                    errors.push(CompileIssue::new(
                        pattern_path,
                        format!(
                            "{context}.pattern: bad regex: {}",
                            one_line(&error.to_string())
                        ),
                    ));
                    None
                }
            }
        });
        if let Some(values) = &definition.one_of
            && values.is_empty()
        {
            errors.push(CompileIssue::new(
                path.keys(&["one_of"]),
                format!("{context}.one_of is empty"),
            ));
        }
        for (name, bound) in [("min", definition.min), ("max", definition.max)] {
            if let Some(bound) = bound
                && !bound.is_finite()
            {
                errors.push(CompileIssue::new(
                    path.keys(&[name]),
                    format!("{context}.{name} must be a finite number"),
                ));
            }
        }
        if let (Some(min), Some(max)) = (definition.min, definition.max)
            && min > max
        {
            errors.push(CompileIssue::new(
                path.keys(&["min"]),
                format!("{context}: min {min} is greater than max {max}"),
            ));
        }
        let max_length = definition
            .max_length
            .and_then(|length| match usize::try_from(length) {
                Ok(length) => Some(length),
                Err(_) => {
                    errors.push(CompileIssue::new(
                        path.keys(&["max_length"]),
                        format!("{context}.max_length must be 0 or more, got {length}"),
                    ));
                    None
                }
            });
        if errors.len() > error_count {
            return None;
        }
        Some(Self {
            pattern,
            one_of: definition.one_of.clone(),
            min: definition.min,
            max: definition.max,
            max_length,
            required,
        })
    }

    /// Evaluates the predicate on the field's value (`None` when absent).
    pub fn check(&self, value: Option<&Value>) -> Check {
        let Some(value) = value else {
            return if self.required {
                Check::Fails
            } else {
                Check::Holds
            };
        };
        if self.required && value.as_str() == Some("") {
            return Check::Fails;
        }
        let mut undecidable = false;
        if let Some(regex) = &self.pattern {
            match value.as_str() {
                None => undecidable = true,
                Some(text) if !regex.is_match(text) => return Check::Fails,
                Some(_) => {}
            }
        }
        if let Some(limit) = self.max_length {
            match value.as_str() {
                None => undecidable = true,
                // Counting stops one past the limit, so huge strings cost no more than it.
                Some(text) if text.chars().take(limit.saturating_add(1)).count() > limit => {
                    return Check::Fails;
                }
                Some(_) => {}
            }
        }
        if self.min.is_some() || self.max.is_some() {
            match value.as_f64() {
                None => undecidable = true,
                Some(number)
                    if self.min.is_some_and(|min| number < min)
                        || self.max.is_some_and(|max| number > max) =>
                {
                    return Check::Fails;
                }
                Some(_) => {}
            }
        }
        if let Some(allowed) = &self.one_of
            && !allowed.iter().any(|candidate| json_equal(candidate, value))
        {
            return Check::Fails;
        }
        if undecidable {
            Check::Undecidable
        } else {
            Check::Holds
        }
    }
}

/// Returns whether a pattern is anchored at the start (`^` or `\A`): unanchored, it matches
/// anywhere inside the value. A pattern anchored only at the start is a prefix check, an
/// ordinary use (`^https://`).
fn is_anchored_at_start(source: &str) -> bool {
    source.starts_with('^') || source.starts_with(r"\A")
}

/// Joins a multi-line regex error into one line for `FILE:LINE: message` reports.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Compares JSON values structurally, numbers by value (`1` equals `1.0`).
pub fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(left), Value::Number(right)) => {
            if let (Some(left), Some(right)) = (left.as_i64(), right.as_i64()) {
                return left == right;
            }
            if let (Some(left), Some(right)) = (left.as_u64(), right.as_u64()) {
                return left == right;
            }
            match (left.as_f64(), right.as_f64()) {
                (Some(left), Some(right)) => left == right,
                _ => false,
            }
        }
        (Value::Array(left), Value::Array(right)) => {
            left.len() == right.len()
                && left
                    .iter()
                    .zip(right)
                    .all(|(left, right)| json_equal(left, right))
        }
        (Value::Object(left), Value::Object(right)) => {
            left.len() == right.len()
                && left.iter().all(|(key, value)| {
                    right.get(key).is_some_and(|other| json_equal(value, other))
                })
        }
        _ => left == right,
    }
}
