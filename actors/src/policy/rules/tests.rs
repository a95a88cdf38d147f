//! Tests of the compiled rule language: every condition kind, evaluation order and defaults,
//! compile problems and warnings, directory merging. Lexical pieces are in `tests/lexical.rs`
//! (schedules, predicates), `tests/go_duration.rs`, `tests/go_match.rs` and `tests/go_regex.rs`
//! (the Go grammars), the reference kernel's meanings in `tests/reference.rs`, property tests in `tests/props.rs`.

mod concurrency;
mod go_duration;
mod go_match;
mod go_regex;
mod lexical;
mod props;
mod reference;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::policy::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use crate::time::Timestamp;

/// Returns a UTC instant from RFC 3339 text.
pub(super) fn utc(text: &str) -> Timestamp {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// Returns a rule with the given conditions and decision.
pub(super) fn rule(
    id: &str,
    priority: i64,
    when: ConditionDefinition,
    decision: Decision,
) -> RuleDefinition {
    RuleDefinition {
        id: id.to_owned(),
        priority,
        description: None,
        when,
        then: OutcomeDefinition {
            approval: None,
            decision,
            reason: None,
            timeout_ms: None,
            replay: None,
            at_most_once: false,
        },
        rate_limit: None,
        retry: None,
        budget: None,
    }
}

/// Compiles a definition that must be valid.
pub(super) fn compiled(definition: &PolicyDefinition) -> CompiledRules {
    let compilation = compile(definition);
    compilation
        .result
        .unwrap_or_else(|issues| panic!("unexpected issues: {issues:?}"))
}

/// Returns the engine of one file made of these rules.
pub(super) fn engine(rules: Vec<RuleDefinition>) -> CompiledPolicy {
    let definition = PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules,
        default: None,
    };
    CompiledPolicy::single(RuleSet::single(&compiled(&definition)), "test".to_owned())
}

/// Returns the compile problems of a definition that must be invalid.
pub(super) fn problems(definition: &PolicyDefinition) -> Vec<CompileIssue> {
    match compile(definition).result {
        Ok(_) => panic!("definition compiled but should not"),
        Err(issues) => issues,
    }
}

/// Returns an input for agent `a`, tool `tool` with empty arguments, on a Wednesday noon UTC.
pub(super) fn input(tool: &str) -> PolicyInput {
    PolicyInput {
        created_by: None,
        on_behalf_of: None,
        action: "tool.invoke".to_owned(),
        agent_id: "a".into(),
        tool_id: tool.into(),
        execution_id: "e".into(),
        labels: BTreeMap::new(),
        arguments: json!({}),
        step_count: 0,
        duration_ms: 0,
        usage: Default::default(),
        now: utc("2025-03-12T12:00:00Z"),
    }
}

/// Returns whether a single `allow` rule with these conditions matches the input.
fn matches(when: ConditionDefinition, input: &PolicyInput) -> bool {
    engine(vec![rule("r", 1, when, Decision::Allow)])
        .evaluate(input)
        .rule_id
        == "r"
}

#[test]
fn every_condition_kind_matches_and_misses() {
    let base = input("shell.exec");
    let with = |change: fn(&mut PolicyInput)| {
        let mut changed = base.clone();
        change(&mut changed);
        changed
    };
    let labels = BTreeMap::from([("env".to_owned(), "prod".to_owned())]);
    let arguments = ArgumentsDefinition::sequence(vec![PredicateDefinition {
        field: Some("cmd".to_owned()),
        pattern: Some("^ls$".to_owned()),
        ..Default::default()
    }]);
    let cases: Vec<(&str, ConditionDefinition, PolicyInput, bool)> = vec![
        (
            "empty when matches",
            ConditionDefinition::default(),
            base.clone(),
            true,
        ),
        (
            "action",
            ConditionDefinition {
                action: Some("tool.invoke".into()),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "tool_id hit",
            ConditionDefinition {
                tool_id: Some("shell.*".into()),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "tool_id miss",
            ConditionDefinition {
                tool_id: Some("web.*".into()),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
        (
            "tool_ids any",
            ConditionDefinition {
                tool_ids: Some(vec!["web.*".into(), "shell.e?ec".into()]),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "tool_ids none",
            ConditionDefinition {
                tool_ids: Some(vec!["web.*".into()]),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
        (
            "agent_id hit",
            ConditionDefinition {
                agent_id: Some("a".into()),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "agent_id is exact",
            ConditionDefinition {
                agent_id: Some("*".into()),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
        (
            "agent_ids hit",
            ConditionDefinition {
                agent_ids: Some(vec!["b".into(), "a".into()]),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "agent_ids miss",
            ConditionDefinition {
                agent_ids: Some(vec!["b".into()]),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
        (
            "labels missing",
            ConditionDefinition {
                labels: Some(labels.clone()),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
        (
            "labels equal",
            ConditionDefinition {
                labels: Some(labels.clone()),
                ..Default::default()
            },
            with(|input| {
                input.labels.insert("env".into(), "prod".into());
                input.labels.insert("team".into(), "x".into());
            }),
            true,
        ),
        (
            "labels differ",
            ConditionDefinition {
                labels: Some(labels),
                ..Default::default()
            },
            with(|input| {
                input.labels.insert("env".into(), "dev".into());
            }),
            false,
        ),
        (
            "arguments hit",
            ConditionDefinition {
                arguments: Some(arguments.clone()),
                ..Default::default()
            },
            with(|input| input.arguments = json!({"cmd": "ls"})),
            true,
        ),
        (
            "arguments miss",
            ConditionDefinition {
                arguments: Some(arguments.clone()),
                ..Default::default()
            },
            with(|input| input.arguments = json!({"cmd": "rm"})),
            false,
        ),
        (
            "arguments not an object",
            ConditionDefinition {
                arguments: Some(arguments),
                ..Default::default()
            },
            with(|input| input.arguments = Value::Null),
            false,
        ),
        (
            "min_step_count below",
            ConditionDefinition {
                min_step_count: Some(3),
                ..Default::default()
            },
            with(|i| i.step_count = 2),
            false,
        ),
        (
            "min_step_count equal",
            ConditionDefinition {
                min_step_count: Some(3),
                ..Default::default()
            },
            with(|i| i.step_count = 3),
            true,
        ),
        (
            "min_step_count zero",
            ConditionDefinition {
                min_step_count: Some(0),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "min_duration_ms below",
            ConditionDefinition {
                min_duration_ms: Some(10),
                ..Default::default()
            },
            with(|i| i.duration_ms = 9),
            false,
        ),
        (
            "min_duration_ms equal",
            ConditionDefinition {
                min_duration_ms: Some(10),
                ..Default::default()
            },
            with(|i| i.duration_ms = 10),
            true,
        ),
        (
            "schedule inside",
            ConditionDefinition {
                schedule: Some("Wed 11:00-13:00 UTC".into()),
                ..Default::default()
            },
            base.clone(),
            true,
        ),
        (
            "schedule outside",
            ConditionDefinition {
                schedule: Some("Thu 11:00-13:00 UTC".into()),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
        (
            "all conditions must hold",
            ConditionDefinition {
                tool_id: Some("shell.*".into()),
                agent_id: Some("b".into()),
                ..Default::default()
            },
            base.clone(),
            false,
        ),
    ];
    for (name, when, case_input, expected) in cases {
        assert_eq!(matches(when, &case_input), expected, "case: {name}");
    }
}

#[test]
fn rules_are_tried_by_ascending_priority_and_first_match_wins() {
    let when = || ConditionDefinition {
        tool_id: Some("shell.*".into()),
        ..Default::default()
    };
    let policy = engine(vec![
        rule("late-allow", 20, when(), Decision::Allow),
        rule("early-deny", 10, when(), Decision::Deny),
        rule(
            "other",
            5,
            ConditionDefinition {
                tool_id: Some("web.*".into()),
                ..Default::default()
            },
            Decision::Allow,
        ),
    ]);
    let decision = policy.evaluate(&input("shell.exec"));
    assert_eq!(
        (decision.decision, decision.rule_id.as_str()),
        (Decision::Deny, "early-deny")
    );
}

#[test]
fn no_match_falls_back_to_the_file_default_or_deny() {
    let deny = engine(vec![]).evaluate(&input("x"));
    assert_eq!(
        deny,
        PolicyDecision::plain(Decision::Deny, "default", "No explicit allow rule matched")
    );
    let definition = PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![],
        default: Some(DefaultDefinition {
            decision: Decision::RequireApproval,
            reason: Some("ask".into()),
        }),
    };
    let policy = CompiledPolicy::single(RuleSet::single(&compiled(&definition)), "d".into());
    let decision = policy.evaluate(&input("x"));
    assert_eq!(
        decision,
        PolicyDecision::plain(Decision::RequireApproval, "default", "ask")
    );
}

#[test]
fn a_match_carries_reason_timeout_rate_limit_and_retry() {
    let mut full = rule("full", 1, ConditionDefinition::default(), Decision::Allow);
    full.then.reason = Some("fine".into());
    full.then.timeout_ms = Some(1500);
    full.rate_limit = Some(RateLimitDefinition {
        max: 10,
        window: "1m".into(),
    });
    full.retry = Some(RetryDefinition {
        max_attempts: 3,
        base_delay: "500ms".into(),
        max_delay: "1h30m".into(),
    });
    let decision = engine(vec![full]).evaluate(&input("x"));
    assert_eq!(decision.reason, "fine");
    assert_eq!(decision.timeout_ms, Some(1500));
    let limit = decision.rate_limit.unwrap();
    assert_eq!(
        (limit.max, limit.window, limit.window_text.as_str()),
        (10, Duration::from_secs(60), "1m")
    );
    let retry = decision.retry.unwrap();
    assert_eq!(retry.max_attempts, 3);
    assert_eq!(
        (retry.base_delay, retry.max_delay),
        (Duration::from_millis(500), Duration::from_secs(5400))
    );
}

#[test]
fn the_reason_falls_back_to_the_description_then_the_rule_id() {
    let mut described = rule(
        "described",
        1,
        ConditionDefinition {
            tool_id: Some("a".into()),
            ..Default::default()
        },
        Decision::Deny,
    );
    described.description = Some("no a".into());
    let bare = rule("bare", 2, ConditionDefinition::default(), Decision::Deny);
    let policy = engine(vec![described, bare]);
    assert_eq!(policy.evaluate(&input("a")).reason, "no a");
    assert_eq!(policy.evaluate(&input("b")).reason, "matched rule bare");
}

#[test]
fn compile_reports_every_problem_with_its_path() {
    let bad_predicate = PredicateDefinition {
        required: Some(false),
        ..Default::default()
    };
    let mut first = rule(
        "dup",
        1,
        ConditionDefinition {
            action: Some("tool.call".into()),
            tool_id: Some("[".into()),
            tool_ids: Some(vec![]),
            agent_ids: Some(vec![]),
            labels: Some(BTreeMap::new()),
            min_step_count: Some(-1),
            min_duration_ms: Some(0),
            schedule: Some("Mon 9-5".into()),
            arguments: Some(ArgumentsDefinition::mapping([
                ("a".to_owned(), bad_predicate),
                (
                    "b".to_owned(),
                    PredicateDefinition {
                        pattern: Some("(".into()),
                        ..Default::default()
                    },
                ),
                (
                    "c".to_owned(),
                    PredicateDefinition {
                        min: Some(2.0),
                        max: Some(1.0),
                        ..Default::default()
                    },
                ),
                (
                    "d".to_owned(),
                    PredicateDefinition {
                        one_of: Some(vec![]),
                        max_length: Some(-2),
                        ..Default::default()
                    },
                ),
            ])),
            ..Default::default()
        },
        Decision::Allow,
    );
    first.then.timeout_ms = Some(-1);
    first.rate_limit = Some(RateLimitDefinition {
        max: 0,
        window: "1x".into(),
    });
    first.retry = Some(RetryDefinition {
        max_attempts: 0,
        base_delay: "2s".into(),
        max_delay: "1s".into(),
    });
    let second = rule("dup", 1, ConditionDefinition::default(), Decision::Deny);
    let third = rule(" ", 2, ConditionDefinition::default(), Decision::Deny);
    let issues = problems(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![first, second, third],
        default: None,
    });
    let expected = [
        ("rules[0].when.action", "unknown action `tool.call`"),
        ("rules[0].when.tool_id", "unclosed `[`"),
        ("rules[0].when.tool_ids", "list is empty"),
        ("rules[0].when.agent_ids", "list is empty"),
        ("rules[0].when.labels", "map is empty"),
        ("rules[0].when.min_step_count", "must be 0 or more, got -1"),
        (
            "rules[0].when.min_duration_ms",
            "must be greater than 0, got 0",
        ),
        ("rules[0].when.schedule", "bad schedule `Mon 9-5`"),
        ("rules[0].when.arguments.a", "predicate has no constraint"),
        ("rules[0].when.arguments.b.pattern", "bad regex"),
        (
            "rules[0].when.arguments.c.min",
            "min 2 is greater than max 1",
        ),
        ("rules[0].when.arguments.d.one_of", "one_of is empty"),
        (
            "rules[0].when.arguments.d.max_length",
            "must be 0 or more, got -2",
        ),
        (
            "rules[0].then.timeout_ms",
            "must be 0 (the step timeout) or more, got -1",
        ),
        ("rules[0].rate_limit.window", "unknown unit `x`"),
        (
            "rules[0].rate_limit.max",
            "rate_limit.max must be between 1",
        ),
        (
            "rules[0].retry.max_attempts",
            "retry.max_attempts must be between 1",
        ),
        ("rules[0].retry.base_delay", "longer than retry.max_delay"),
        ("rules[1].id", "duplicate rule id `dup`"),
        ("rules[1].priority", "duplicate priority 1"),
        ("rules[2].id", "id must not be empty"),
    ];
    for (path, fragment) in expected {
        assert!(
            issues
                .iter()
                .any(|issue| issue.path.to_string() == path && issue.message.contains(fragment)),
            "missing `{fragment}` at {path} in {issues:#?}"
        );
    }
    assert_eq!(issues.len(), expected.len(), "{issues:#?}");
    let duplicate = issues
        .iter()
        .find(|issue| issue.path.to_string() == "rules[1].id")
        .unwrap();
    assert_eq!(
        duplicate
            .related
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("rules[0].id")
    );
}

#[test]
fn an_unanchored_pattern_compiles_with_a_warning_naming_rule_and_field() {
    let arguments = |pattern: &str| {
        Some(ArgumentsDefinition::mapping([(
            "cmd".to_owned(),
            PredicateDefinition {
                pattern: Some(pattern.to_owned()),
                ..Default::default()
            },
        )]))
    };
    let rules = vec![
        rule(
            "loose",
            1,
            ConditionDefinition {
                arguments: arguments("ls"),
                ..Default::default()
            },
            Decision::Allow,
        ),
        rule(
            "prefix",
            4,
            ConditionDefinition {
                arguments: arguments("^https://"),
                ..Default::default()
            },
            Decision::Allow,
        ),
        rule(
            "tight",
            2,
            ConditionDefinition {
                arguments: arguments(r"\Als( -la)?\z"),
                ..Default::default()
            },
            Decision::Allow,
        ),
        rule(
            "dollar",
            3,
            ConditionDefinition {
                arguments: arguments("^ls$"),
                ..Default::default()
            },
            Decision::Allow,
        ),
    ];
    let compilation = compile(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules,
        default: None,
    });
    assert!(compilation.result.is_ok());
    assert_eq!(compilation.warnings.len(), 1, "{:?}", compilation.warnings);
    let warning = &compilation.warnings[0];
    assert_eq!(
        warning.path.to_string(),
        "rules[0].when.arguments.cmd.pattern"
    );
    assert!(
        warning.message.contains("rule `loose`") && warning.message.contains("not anchored"),
        "{warning}"
    );
}

#[test]
fn merging_concatenates_rules_and_prefers_the_agent_default() {
    let agent = compiled(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![rule(
            "agent-shell",
            20,
            ConditionDefinition {
                tool_id: Some("shell.*".into()),
                ..Default::default()
            },
            Decision::Allow,
        )],
        default: None,
    });
    let global = compiled(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![rule(
            "global-deny-rm",
            10,
            ConditionDefinition {
                tool_id: Some("shell.rm".into()),
                ..Default::default()
            },
            Decision::Deny,
        )],
        default: Some(DefaultDefinition {
            decision: Decision::Allow,
            reason: None,
        }),
    });
    let merged = RuleSet::merged(&agent, &global).unwrap();
    assert_eq!(merged.len(), 2);
    let policy = CompiledPolicy::per_agent(
        HashMap::from([("a".to_owned(), merged)]),
        Some(RuleSet::single(&global)),
        "x".into(),
    );
    assert_eq!(
        policy.evaluate(&input("shell.rm")).rule_id,
        "global-deny-rm"
    );
    assert_eq!(policy.evaluate(&input("shell.ls")).rule_id, "agent-shell");
    let fallback = policy.evaluate(&input("web.get"));
    assert_eq!(
        (fallback.decision, fallback.rule_id.as_str()),
        (Decision::Allow, "default")
    );
    let mut other = input("shell.ls");
    other.agent_id = "b".into();
    assert_eq!(
        policy.evaluate(&other).rule_id,
        "default",
        "agents without a file use the global set"
    );

    let strict_agent = compiled(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![],
        default: Some(DefaultDefinition {
            decision: Decision::Deny,
            reason: Some("agent says no".into()),
        }),
    });
    let strict = RuleSet::merged(&strict_agent, &global).unwrap();
    assert_eq!(strict.evaluate(&input("web.get")).reason, "agent says no");
}

#[test]
fn merging_rejects_ids_and_priorities_shared_with_the_global_file() {
    let agent = compiled(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![
            rule("fine", 1, ConditionDefinition::default(), Decision::Allow),
            rule("same", 2, ConditionDefinition::default(), Decision::Allow),
            rule("other", 30, ConditionDefinition::default(), Decision::Allow),
        ],
        default: None,
    });
    let global = compiled(&PolicyDefinition {
        budget: None,
        circuit_breakers: None,
        concurrency: None,
        rules: vec![
            rule("same", 10, ConditionDefinition::default(), Decision::Deny),
            rule(
                "global-30",
                30,
                ConditionDefinition::default(),
                Decision::Deny,
            ),
        ],
        default: None,
    });
    let conflicts = RuleSet::merged(&agent, &global).unwrap_err();
    let described: Vec<(usize, usize, bool, String)> = conflicts
        .iter()
        .map(|c| (c.agent_rule, c.global_rule, c.same_id, c.shared.clone()))
        .collect();
    assert_eq!(
        described,
        vec![
            (1, 0, true, "rule id `same`".to_owned()),
            (2, 1, false, "priority 30".to_owned())
        ]
    );
}

#[test]
fn a_directory_without_agent_or_global_file_denies_with_agent_default() {
    let policy = CompiledPolicy::per_agent(HashMap::new(), None, "digest".into());
    let decision = policy.evaluate(&input("x"));
    assert_eq!(
        (decision.decision, decision.rule_id.as_str()),
        (Decision::Deny, AGENT_DEFAULT_RULE_ID)
    );
    assert_eq!(policy.digest(), "digest");
}

#[test]
fn deny_and_approval_rules_fail_closed_when_a_predicate_cannot_be_evaluated() {
    let arguments = ArgumentsDefinition::sequence(vec![
        PredicateDefinition {
            field: Some("command".to_owned()),
            pattern: Some("^rm( .*)?$".to_owned()),
            ..Default::default()
        },
        PredicateDefinition {
            field: Some("count".to_owned()),
            max: Some(3.0),
            ..Default::default()
        },
    ]);
    let when = ConditionDefinition {
        arguments: Some(arguments),
        ..Default::default()
    };
    let with = |value: Value| {
        let mut call = input("shell.exec");
        call.arguments = value;
        call
    };
    for decision in [Decision::Deny, Decision::RequireApproval, Decision::Allow] {
        let policy = engine(vec![
            rule("guard", 1, when.clone(), decision),
            rule("rest", 2, ConditionDefinition::default(), Decision::Allow),
        ]);
        let decided = |value: Value| policy.evaluate(&with(value)).rule_id;
        let closed = decision != Decision::Allow;
        let undecidable = [
            json!({"command": ["rm", "-rf", "/"]}),
            json!({"command": "rm -rf /", "count": "many"}),
            json!({"command": {"program": "rm"}}),
            json!("rm -rf /"),
            json!(["rm"]),
        ];
        for value in undecidable {
            let expected = if closed { "guard" } else { "rest" };
            assert_eq!(decided(value.clone()), expected, "{decision:?} {value}");
        }
        // Evaluated predicates decide as before, for every decision.
        assert_eq!(
            decided(json!({"command": "rm -rf /"})),
            "guard",
            "{decision:?}"
        );
        assert_eq!(decided(json!({"command": "ls"})), "rest", "{decision:?}");
        assert_eq!(
            decided(json!({"command": ["rm"], "count": 9})),
            "rest",
            "{decision:?}"
        );
        assert_eq!(
            decided(json!({"command": "rm x", "count": 9})),
            "rest",
            "{decision:?}"
        );
    }
}

#[test]
fn a_tool_is_denied_whatever_its_arguments_only_by_a_rule_that_ignores_them() {
    let guarded = ConditionDefinition {
        tool_id: Some("fs.read".to_owned()),
        arguments: Some(ArgumentsDefinition::sequence(vec![PredicateDefinition {
            field: Some("path".to_owned()),
            pattern: Some("^.*secret.*$".to_owned()),
            ..Default::default()
        }])),
        ..Default::default()
    };
    let outright = ConditionDefinition {
        tool_id: Some("fs.write".to_owned()),
        ..Default::default()
    };
    let policy = engine(vec![
        rule("no-secrets", 1, guarded, Decision::Deny),
        rule("no-writes", 2, outright, Decision::Deny),
        rule("rest", 3, ConditionDefinition::default(), Decision::Allow),
    ]);
    let any = |tool: &str| policy.evaluate_any_arguments(&input(tool));
    assert_eq!(any("fs.read").decision, Decision::Allow);
    assert_eq!(any("fs.write").decision, Decision::Deny);
    assert_eq!(any("fs.write").rule_id, "no-writes");
    // A call is still decided on its arguments (with none, the deny rule holds: absent passes).
    let mut call = input("fs.read");
    call.arguments = json!({"path": "/srv/secret.txt"});
    assert_eq!(policy.evaluate(&call).decision, Decision::Deny);
}
