//! What the reference kernel's rule shapes mean here: the sequence form of `arguments`, its
//! string-only `one_of`, `required`, `timeout_ms: 0`, and the predicates the reference refuses.

use serde_json::{Value, json};

use super::{compile, engine, input, problems, rule};
use crate::policy::engine::{Decision, PolicyEngine};
use crate::policy::rules::{
    ArgumentsDefinition, ConditionDefinition, PolicyDefinition, PredicateDefinition,
};

/// Returns a predicate on `field` built by `build`.
fn on(field: &str, build: impl FnOnce(&mut PredicateDefinition)) -> PredicateDefinition {
    let mut predicate = PredicateDefinition {
        field: Some(field.to_owned()),
        ..Default::default()
    };
    build(&mut predicate);
    predicate
}

/// Returns whether a one-rule policy with these sequence-form predicates matches `arguments`.
fn sequence_matches(predicates: &[PredicateDefinition], arguments: Value) -> bool {
    let when = ConditionDefinition {
        arguments: Some(ArgumentsDefinition::sequence(predicates.to_vec())),
        ..Default::default()
    };
    let mut call = input("shell_exec");
    call.arguments = arguments;
    engine(vec![rule("r", 1, when, Decision::Allow)])
        .evaluate(&call)
        .rule_id
        == "r"
}

#[test]
fn the_sequence_form_applies_every_predicate_even_on_the_same_field() {
    let predicates = [
        on("command", |p| p.pattern = Some("^(ls|cat|echo|pwd)".into())),
        on("command", |p| p.max_length = Some(10)),
        on("timeout", |p| p.max = Some(30.0)),
    ];
    let cases = [
        (json!({"command": "ls -la"}), true),
        (json!({"command": "ls -la /very/long/path"}), false),
        (json!({"command": "rm -rf /"}), false),
        (json!({"command": "pwd", "timeout": 30}), true),
        (json!({"command": "pwd", "timeout": 30.5}), false),
        (json!({"command": "pwd", "timeout": "30"}), false),
        (json!({"timeout": 1}), true),
        (json!({}), true),
        (json!(null), false),
        (json!(["ls"]), false),
    ];
    for (arguments, expected) in cases {
        assert_eq!(
            sequence_matches(&predicates, arguments.clone()),
            expected,
            "{arguments}"
        );
    }
}

#[test]
fn one_of_in_the_sequence_form_holds_strings_that_match_strings_only() {
    // The loader turns every entry of a sequence-form `one_of` into a string, as the
    // reference kernel does (`one_of: [1]` is the string "1").
    let predicates = [on("level", |p| {
        p.one_of = Some(vec![json!("1"), json!("debug")]);
    })];
    assert!(sequence_matches(&predicates, json!({"level": "1"})));
    assert!(sequence_matches(&predicates, json!({"level": "debug"})));
    assert!(!sequence_matches(&predicates, json!({"level": 1})));
    assert!(!sequence_matches(&predicates, json!({"level": "DEBUG"})));
}

#[test]
fn required_means_present_and_not_the_empty_string() {
    let predicates = [on("path", |p| p.required = Some(true))];
    assert!(!sequence_matches(&predicates, json!({})));
    assert!(!sequence_matches(&predicates, json!({"path": ""})));
    assert!(sequence_matches(&predicates, json!({"path": "/tmp"})));
    assert!(sequence_matches(&predicates, json!({"path": 0})));
    assert!(sequence_matches(&predicates, json!({"path": false})));
}

#[test]
fn timeout_ms_zero_means_the_step_timeout() {
    let mut zero = rule("zero", 1, ConditionDefinition::default(), Decision::Allow);
    zero.then.timeout_ms = Some(0);
    let decision = engine(vec![zero]).evaluate(&input("t"));
    assert_eq!(
        (decision.rule_id.as_str(), decision.timeout_ms),
        ("zero", None)
    );
}

#[test]
fn predicates_the_reference_refuses_are_refused_with_their_path() {
    let cases: Vec<(PredicateDefinition, &str, &str)> = vec![
        (
            PredicateDefinition {
                pattern: Some("^ls".into()),
                ..Default::default()
            },
            "rules[0].when.arguments[0]",
            "rule `r`: when.arguments[0]: predicate has no `field`",
        ),
        (
            on("", |p| p.max = Some(1.0)),
            "rules[0].when.arguments[0]",
            "predicate has no `field`",
        ),
        (
            on("command", |_| {}),
            "rules[0].when.arguments[0]",
            "rule `r`: when.arguments[0]: predicate has no constraint",
        ),
        (
            on("command", |p| p.required = Some(false)),
            "rules[0].when.arguments[0]",
            "predicate has no constraint",
        ),
        (
            on("command", |p| p.pattern = Some(String::new())),
            "rules[0].when.arguments[0].pattern",
            "rule `r`: when.arguments[0].pattern is empty",
        ),
    ];
    for (predicate, path, fragment) in cases {
        let when = ConditionDefinition {
            arguments: Some(ArgumentsDefinition::sequence(vec![predicate.clone()])),
            ..Default::default()
        };
        let issues = problems(&PolicyDefinition {
            budget: None,
            circuit_breakers: None,
            concurrency: None,
            rules: vec![rule("r", 1, when, Decision::Allow)],
            default: None,
        });
        assert!(
            issues
                .iter()
                .any(|issue| issue.path.to_string() == path && issue.message.contains(fragment)),
            "{predicate:?}: expected `{fragment}` at {path} in {issues:#?}"
        );
    }
}

#[test]
fn glob_oddities_load_with_a_warning() {
    let when = ConditionDefinition {
        tool_ids: Some(vec!["[!x]*".into(), "t[z-a]".into()]),
        ..Default::default()
    };
    let compilation = compile(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![rule("odd", 1, when, Decision::Deny)],
        default: None,
    });
    assert!(compilation.result.is_ok());
    let paths: Vec<String> = compilation
        .warnings
        .iter()
        .map(|warning| format!("{}: {}", warning.path, warning.message))
        .collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths[0].starts_with("rules[0].when.tool_ids: rule `odd`: when.tool_ids: glob `[!x]*`"),
        "{paths:?}"
    );
}
