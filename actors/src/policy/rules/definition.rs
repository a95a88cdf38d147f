//! The rule language as plain data: what a policy file says, already split into typed fields by
//! the loader (the `keel` crate parses YAML into these), but not yet checked for meaning. The
//! compiler in `compile.rs` turns a [`PolicyDefinition`] into a `CompiledRules` or into a list of
//! [`CompileIssue`]s, each pointing at the field it is about.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::policy::engine::Decision;

/// One policy file: its rules in file order and its optional default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyDefinition {
    /// Rules in the order the file lists them.
    pub rules: Vec<RuleDefinition>,
    /// What applies when no rule matches; absent means deny.
    pub default: Option<DefaultDefinition>,
    /// Budget of every execution this file applies to (Keel addition).
    pub budget: Option<BudgetDefinition>,
    /// Circuit breakers per tool id (Keel addition; a single file or `_global` only).
    pub circuit_breakers: Option<Vec<BreakerDefinition>>,
    /// Concurrency limits (Keel addition; `tools` in a single file or `_global` only).
    pub concurrency: Option<ConcurrencyDefinition>,
}

/// The `concurrency:` section of a file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConcurrencyDefinition {
    /// Most running executions per agent id.
    pub max_running: Option<i64>,
    /// Limits per tool id.
    pub tools: Option<Vec<ToolLimitDefinition>>,
    /// Limits per label value (per agent id).
    pub labels: Option<Vec<LabelLimitDefinition>>,
}

/// One entry of `concurrency.labels:`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelLimitDefinition {
    /// Label key whose values are limited.
    pub label: String,
    /// Most running executions of the agent per value of the label.
    pub max_running: i64,
}

/// One entry of `concurrency.tools:`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolLimitDefinition {
    /// Glob of the tool ids it applies to.
    pub tool_id: Option<String>,
    /// Globs of the tool ids it applies to.
    pub tool_ids: Option<Vec<String>>,
    /// Most steps of one tool id in runners' hands at once.
    pub max_concurrent_steps: i64,
}

/// One entry of `circuit_breakers:`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BreakerDefinition {
    /// Glob of the tool ids it applies to.
    pub tool_id: Option<String>,
    /// Globs of the tool ids it applies to.
    pub tool_ids: Option<Vec<String>>,
    /// Glob of the runner ids it applies to (a runner breaker, instead of tool ids).
    pub runner_id: Option<String>,
    /// Globs of the runner ids it applies to.
    pub runner_ids: Option<Vec<String>>,
    /// Failures within the window that open the breaker (count mode).
    pub failures: Option<i64>,
    /// Share of failed results within the window that opens it (failure-rate mode).
    pub failure_rate: Option<f64>,
    /// Fewest results within the window before the failure rate counts (default 10).
    pub min_calls: Option<i64>,
    /// Window the failures are counted in, as written (default `1m`).
    pub window: Option<String>,
    /// How long the breaker stays open before a probe, as written.
    pub cool_down: String,
}

/// A `budget:` section (top level of a file, or in a rule); every field is optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetDefinition {
    /// Tool steps per execution.
    pub max_steps: Option<i64>,
    /// Steps per tool id per execution.
    pub max_calls_per_tool: Option<i64>,
    /// Wall time after which no tool step is created, as written (`10m`).
    pub max_wall_time: Option<String>,
    /// Retries per execution.
    pub max_retries: Option<i64>,
    /// Cost limits per unit.
    pub max_cost: Option<BTreeMap<String, f64>>,
    /// Model tokens per execution.
    pub max_tokens: Option<i64>,
    /// `deny` or `require_approval`: what a model call finds when the budget is spent.
    pub on_exceed: Option<String>,
    /// How long a model call waits for a budget raise, as written (`2m`).
    pub approval_wait: Option<String>,
}

/// The `default:` section of a file.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultDefinition {
    /// Decision when no rule matches.
    pub decision: Decision,
    /// Reason reported with it.
    pub reason: Option<String>,
}

/// One entry of `rules:`.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleDefinition {
    /// Unique id, reported as `rule_id`.
    pub id: String,
    /// Evaluation order, ascending; unique.
    pub priority: i64,
    /// Free text for humans.
    pub description: Option<String>,
    /// Conditions that must all hold.
    pub when: ConditionDefinition,
    /// Outcome when the conditions hold.
    pub then: OutcomeDefinition,
    /// Sliding-window limit checked after an allow.
    pub rate_limit: Option<RateLimitDefinition>,
    /// Retry settings for the tools this rule matches.
    pub retry: Option<RetryDefinition>,
    /// Budget limits for the calls this rule allows, on top of the file's (Keel addition).
    pub budget: Option<BudgetDefinition>,
}

/// The `when:` section of a rule; every present field must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConditionDefinition {
    /// Exact action name (`tool.invoke`).
    pub action: Option<String>,
    /// Glob the tool id must match.
    pub tool_id: Option<String>,
    /// Globs of which the tool id must match at least one.
    pub tool_ids: Option<Vec<String>>,
    /// Exact agent id.
    pub agent_id: Option<String>,
    /// Agent ids of which one must equal the agent's.
    pub agent_ids: Option<Vec<String>>,
    /// Labels the execution must carry with these exact values.
    pub labels: Option<BTreeMap<String, String>>,
    /// Predicates on top-level fields of the arguments object.
    pub arguments: Option<ArgumentsDefinition>,
    /// Holds when `step_count >= n`.
    pub min_step_count: Option<i64>,
    /// Holds when `duration_ms >= n`.
    pub min_duration_ms: Option<i64>,
    /// Weekly time window, e.g. `Mon-Fri 09:00-17:00 America/New_York`.
    pub schedule: Option<String>,
    /// Glob the name of the key that created the execution must match.
    pub created_by: Option<String>,
    /// Glob the execution's `on_behalf_of` must match.
    pub on_behalf_of: Option<String>,
}

/// The `arguments:` of a `when`, in either of the two ways a file can write it.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgumentsDefinition {
    /// How the file wrote it (decides the paths in messages).
    pub form: ArgumentsForm,
    /// The predicates, in file order; all must hold.
    pub predicates: Vec<PredicateDefinition>,
}

/// The two spellings of `arguments:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgumentsForm {
    /// The reference form: a sequence of predicates, each naming its `field`.
    Sequence,
    /// Keel's shorthand: a mapping from field name to predicate.
    Mapping,
}

impl ArgumentsDefinition {
    /// Returns the reference (sequence) form of these predicates.
    pub fn sequence(predicates: Vec<PredicateDefinition>) -> Self {
        Self {
            form: ArgumentsForm::Sequence,
            predicates,
        }
    }

    /// Returns the mapping form of these `(field, predicate)` pairs.
    pub fn mapping<I: IntoIterator<Item = (String, PredicateDefinition)>>(fields: I) -> Self {
        Self {
            form: ArgumentsForm::Mapping,
            predicates: fields
                .into_iter()
                .map(|(field, predicate)| PredicateDefinition {
                    field: Some(field),
                    ..predicate
                })
                .collect(),
        }
    }
}

/// Constraints on one argument field; every present constraint must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PredicateDefinition {
    /// The top-level key of the arguments object this predicate checks (required).
    pub field: Option<String>,
    /// Regular expression a string value must match.
    pub pattern: Option<String>,
    /// Values of which the field must equal one (numbers compare by value). The sequence form
    /// only has strings here, as the reference kernel reads `one_of` as a list of strings.
    pub one_of: Option<Vec<Value>>,
    /// Lower bound of a numeric value (inclusive).
    pub min: Option<f64>,
    /// Upper bound of a numeric value (inclusive).
    pub max: Option<f64>,
    /// Upper bound of a string value's length in Unicode scalar values.
    pub max_length: Option<i64>,
    /// Whether the field must be present and not the empty string.
    pub required: Option<bool>,
}

/// The `then:` section of a rule.
#[derive(Clone, Debug, PartialEq)]
pub struct OutcomeDefinition {
    /// What to do.
    pub decision: Decision,
    /// Reason reported with the decision.
    pub reason: Option<String>,
    /// Step deadline in milliseconds; 0 means the kernel's step timeout, as when absent.
    pub timeout_ms: Option<i64>,
    /// Whether a re-run replays a matching call from the journal (absent: yes).
    pub replay: Option<bool>,
    /// `idempotency: at_most_once`: a remote step that lost its runner is not retried.
    pub at_most_once: bool,
    /// `approval:` terms of a `require_approval` rule (Keel addition).
    pub approval: Option<ApprovalDefinition>,
}

/// `then.approval:` — who may answer the approval a rule asks for, and when it expires.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApprovalDefinition {
    /// Roles that may answer (`admin`, `operator`, `approver`).
    pub roles: Vec<String>,
    /// Key names that may answer.
    pub keys: Vec<String>,
    /// How long the approval waits, a Go duration (`30m`).
    pub expires_in: Option<String>,
    /// What expiry does: `deny` (the default) or `escalate`.
    pub on_expiry: Option<String>,
    /// Whether the key that created the execution may answer.
    pub self_approval: bool,
    /// `escalate_to:` — whom `on_expiry: escalate` asks next, and for how long.
    pub escalate_to: Option<EscalationDefinition>,
}

/// `then.approval.escalate_to:` — the approvers of an escalated approval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EscalationDefinition {
    /// Roles that may answer the escalated approval.
    pub roles: Vec<String>,
    /// Key names that may answer it.
    pub keys: Vec<String>,
    /// How long the escalated approval waits before the call is denied (a Go duration).
    pub expires_in: Option<String>,
}

/// The `rate_limit:` section of a rule.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimitDefinition {
    /// Allowed calls per window.
    pub max: i64,
    /// Window length as written, in Go's duration grammar (`1m`, `1m30s`, `1.5h`).
    pub window: String,
}

/// The `retry:` section of a rule.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryDefinition {
    /// Attempts in total, including the first.
    pub max_attempts: i64,
    /// Delay before the second attempt, as written.
    pub base_delay: String,
    /// Upper bound of any delay, as written.
    pub max_delay: String,
}

/// One step of a [`FieldPath`]: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A mapping key.
    Key(String),
    /// A sequence index, from 0.
    Index(usize),
}

/// Where in a policy file something is, from the document root (`rules[2].when.schedule`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(pub Vec<PathSegment>);

impl FieldPath {
    /// Returns the path of rule `index`.
    pub fn rule(index: usize) -> Self {
        Self(vec![
            PathSegment::Key("rules".to_owned()),
            PathSegment::Index(index),
        ])
    }

    /// Returns this path extended by the keys given.
    pub fn keys(&self, keys: &[&str]) -> Self {
        let mut segments = self.0.clone();
        segments.extend(keys.iter().map(|key| PathSegment::Key((*key).to_owned())));
        Self(segments)
    }

    /// Returns this path extended by one sequence index.
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(PathSegment::Index(index));
        Self(segments)
    }

    /// Returns the rule index when the path lies inside `rules[i]`.
    pub fn rule_index(&self) -> Option<usize> {
        match self.0.as_slice() {
            [PathSegment::Key(key), PathSegment::Index(index), ..] if key == "rules" => {
                Some(*index)
            }
            _ => None,
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Key(key) if position == 0 => write!(f, "{key}")?,
                PathSegment::Key(key) => write!(f, ".{key}")?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A problem (or a warning) the compiler found, tied to the field it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileIssue {
    /// Field the issue is about.
    pub path: FieldPath,
    /// What is wrong, lowercase, naming the rule when there is one.
    pub message: String,
    /// Another field involved (the first definition of a duplicate id or priority).
    pub related: Option<FieldPath>,
}

impl CompileIssue {
    /// Returns an issue without a related field.
    pub fn new(path: FieldPath, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
            related: None,
        }
    }
}

impl fmt::Display for CompileIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}
