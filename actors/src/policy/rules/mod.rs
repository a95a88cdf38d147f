//! Keel's YAML policy language, compiled: rule definitions as plain data, the compiler that
//! checks them and builds globs, regexes and schedules once, and the engine that evaluates them
//! (first matching rule by ascending priority wins). No YAML and no I/O here: the `keel` crate
//! parses files into [`PolicyDefinition`]s and maps [`CompileIssue`] paths to file lines.

mod approval;
mod breakers;
mod budget;
mod compile;
mod compiled;
mod compiled_policy;
mod concurrency;
mod conditions;
mod definition;
mod duration;
mod glob;
mod go_regex;
mod models;
mod predicates;
mod schedule;
#[cfg(test)]
mod tests;

pub use compile::{Compilation, compile};
pub use compiled::{CompiledRules, MergeConflict, RuleSet};
pub use compiled_policy::{AGENT_DEFAULT_RULE_ID, CompiledPolicy};
pub use concurrency::Concurrency;
pub use conditions::KNOWN_ACTIONS;
pub use definition::{
    ApprovalDefinition, ArgumentsDefinition, ArgumentsForm, BreakerDefinition, BudgetDefinition,
    CompileIssue, ConcurrencyDefinition, ConditionDefinition, DefaultDefinition,
    EscalationDefinition, FieldPath, LabelLimitDefinition, OutcomeDefinition, PathSegment,
    PolicyDefinition, PredicateDefinition, RateLimitDefinition, RetryDefinition, RuleDefinition,
    ToolLimitDefinition,
};
pub use duration::{parse_duration, parse_go_duration, parse_non_negative_duration};
pub use glob::Glob;
pub use models::ModelAllowList;
pub use predicates::{PATTERN_SIZE_LIMIT, json_equal};
pub use schedule::Schedule;
