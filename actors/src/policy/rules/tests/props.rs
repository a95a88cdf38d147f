//! Property tests: evaluation never panics on any input, and globs agree with a naive
//! backtracking matcher on the patterns where backtracking and Go's `path.Match` (which matches
//! each chunk at its first fit) must agree: classes that cannot match `/`. The Go-specific
//! cases where they differ are in the table of `go_match.rs`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{engine, input, rule, utc};
use crate::policy::engine::{Decision, PolicyEngine};
use crate::policy::rules::{ArgumentsDefinition, ConditionDefinition, Glob, PredicateDefinition};

/// Returns arbitrary JSON up to a small depth.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,3}|.*", inner, 0..8)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Returns a policy using every condition kind.
fn everything_policy() -> impl PolicyEngine {
    let predicate = |definition: PredicateDefinition| definition;
    let arguments = BTreeMap::from([
        (
            "a".to_owned(),
            predicate(PredicateDefinition {
                pattern: Some("^[a-z]+$".into()),
                max_length: Some(5),
                ..Default::default()
            }),
        ),
        (
            "b".to_owned(),
            predicate(PredicateDefinition {
                min: Some(-1.5),
                max: Some(1e9),
                ..Default::default()
            }),
        ),
        (
            "c".to_owned(),
            predicate(PredicateDefinition {
                one_of: Some(vec![json!(1), json!("x"), json!({"k": [1]})]),
                ..Default::default()
            }),
        ),
        (
            "d".to_owned(),
            predicate(PredicateDefinition {
                required: Some(true),
                ..Default::default()
            }),
        ),
    ]);
    let full = ConditionDefinition {
        action: Some("tool.invoke".into()),
        tool_id: Some("*.[a-z]?*".into()),
        tool_ids: Some(vec!["*".into(), "*/*".into(), "[!x]*".into()]),
        agent_ids: Some(vec!["a".into(), "b".into()]),
        labels: Some(BTreeMap::from([("env".to_owned(), "prod".to_owned())])),
        arguments: Some(ArgumentsDefinition::mapping(arguments)),
        min_step_count: Some(1),
        min_duration_ms: Some(1),
        schedule: Some("Fri-Tue 22:00-06:00 America/New_York".into()),
        ..Default::default()
    };
    engine(vec![
        rule("full", 1, full, Decision::Allow),
        rule(
            "agent",
            2,
            ConditionDefinition {
                agent_id: Some("a".into()),
                ..Default::default()
            },
            Decision::RequireApproval,
        ),
    ])
}

proptest! {
    #[test]
    fn evaluation_never_panics(
        tool in ".*",
        agent in prop_oneof![Just("a".to_owned()), ".*"],
        labels in prop::collection::btree_map(".*", ".*", 0..4),
        arguments in any_json(),
        step_count in any::<u64>(),
        duration_ms in any::<u64>(),
        seconds in -62_000_000_000_i64..250_000_000_000,
    ) {
        let policy = everything_policy();
        let mut case_input = input(&tool);
        case_input.agent_id = agent.into();
        case_input.labels = labels;
        case_input.arguments = arguments;
        case_input.step_count = step_count;
        case_input.duration_ms = duration_ms;
        case_input.now = chrono::DateTime::from_timestamp(seconds, 0).unwrap_or_else(|| utc("2025-01-01T00:00:00Z"));
        let decision = policy.evaluate(&case_input);
        prop_assert!(!decision.rule_id.is_empty());
    }

    #[test]
    fn globs_agree_with_a_naive_matcher(pattern in "[ab/*?]{0,8}|\\[[ab]{1,2}\\][ab*/]{0,3}|\\*\\[ab\\]\\*[ab]", text in "[ab/]{0,8}") {
        let glob = Glob::new(&pattern).unwrap();
        let pattern_chars: Vec<char> = pattern.chars().collect();
        let text_chars: Vec<char> = text.chars().collect();
        prop_assert_eq!(glob.is_match(&text), naive_match(&pattern_chars, &text_chars), "{} ~ {}", pattern, text);
    }

    #[test]
    fn glob_compilation_never_panics(pattern in ".*") {
        let _ = Glob::new(&pattern);
    }
}

/// Matches `*`, `?`, `[ab]`, `[^ab]` and literals by backtracking (test oracle only).
fn naive_match(pattern: &[char], text: &[char]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some('*') => (0..=text.len())
            .take_while(|&taken| !text[..taken].contains(&'/'))
            .any(|taken| naive_match(&pattern[1..], &text[taken..])),
        Some('?') => {
            text.first().is_some_and(|c| *c != '/') && naive_match(&pattern[1..], &text[1..])
        }
        Some('[') => {
            let close = pattern.iter().position(|c| *c == ']').unwrap();
            let negated = pattern[1] == '^';
            let members = &pattern[if negated { 2 } else { 1 }..close];
            let Some(first) = text.first() else {
                return false;
            };
            members.contains(first) != negated && naive_match(&pattern[close + 1..], &text[1..])
        }
        Some(literal) => text.first() == Some(literal) && naive_match(&pattern[1..], &text[1..]),
    }
}
