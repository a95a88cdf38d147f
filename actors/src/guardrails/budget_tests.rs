//! Pure tests of budgets: each limit's check, combining budgets, usage folded from events and
//! cost validation.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::events::EventBody;

fn created(tool: &str) -> EventBody {
    EventBody::StepCreated {
        tool_id: tool.into(),
        tool_version: 0,
        arguments: json!({}),
        max_attempts: 1,
        attempt: 1,
        deadline: crate::time::now(),
        remote: false,
        timeout_ms: None,
        retry_base_delay_ms: None,
        retry_max_delay_ms: None,
        max_retries: None,
        replay_of: None,
        key_of: None,
        repeats: None,
        proposed_arguments: None,
        at_most_once: false,
    }
}

fn cost(pairs: &[(&str, f64)]) -> Option<Cost> {
    Some(
        pairs
            .iter()
            .map(|(unit, amount)| ((*unit).to_owned(), *amount))
            .collect(),
    )
}

fn usage(events: &[EventBody]) -> BudgetUsage {
    let mut usage = BudgetUsage::default();
    for event in events {
        usage.apply(event);
    }
    usage
}

fn wall(seconds: u64) -> Option<WallTime> {
    Some(WallTime {
        limit: Duration::from_secs(seconds),
        text: format!("{seconds}s"),
    })
}

#[test]
fn usage_counts_steps_calls_retries_and_cost_from_events() {
    let used = usage(&[
        created("search"),
        created("search"),
        created("fetch"),
        EventBody::StepRetried {
            next_attempt: 2,
            not_before: None,
        },
        EventBody::StepCompleted {
            result: json!(1),
            cost: cost(&[("usd", 0.25), ("tokens", 100.0)]),
        },
        EventBody::StepFailed {
            error: "x".into(),
            retryable: true,
            cost: cost(&[("usd", 0.5)]),
        },
        EventBody::StepCompleted {
            result: json!(2),
            cost: None,
        },
        EventBody::StepTimedOut {},
    ]);
    assert_eq!(used.steps, 3);
    assert_eq!(used.calls(&"search".into()), 2);
    assert_eq!(used.calls(&"fetch".into()), 1);
    assert_eq!(used.calls(&"other".into()), 0);
    assert_eq!(used.retries, 1);
    assert_eq!(
        used.cost,
        cost(&[("usd", 0.75), ("tokens", 100.0)]).unwrap()
    );
}

#[test]
fn each_limit_denies_at_its_bound_and_names_itself() {
    let used = usage(&[
        created("search"),
        created("search"),
        EventBody::StepCompleted {
            result: json!(null),
            cost: cost(&[("usd", 1.0)]),
        },
    ]);
    let within = Duration::from_secs(5);
    let cases: Vec<(Budget, Option<(BudgetLimit, &str)>)> = vec![
        (Budget::default(), None),
        (
            Budget {
                max_steps: Some(3),
                ..Budget::default()
            },
            None,
        ),
        (
            Budget {
                max_steps: Some(2),
                ..Budget::default()
            },
            Some((
                BudgetLimit::MaxSteps,
                "budget exceeded: max_steps 2 reached (2 tool steps so far)",
            )),
        ),
        (
            Budget {
                max_calls_per_tool: Some(2),
                ..Budget::default()
            },
            Some((
                BudgetLimit::MaxCallsPerTool,
                "budget exceeded: max_calls_per_tool 2 reached for tool search (2 calls so far)",
            )),
        ),
        (
            Budget {
                max_wall_time: wall(5),
                ..Budget::default()
            },
            Some((
                BudgetLimit::MaxWallTime,
                "budget exceeded: max_wall_time 5s passed (5000 ms since creation)",
            )),
        ),
        (
            Budget {
                max_wall_time: wall(6),
                ..Budget::default()
            },
            None,
        ),
        (
            Budget {
                max_cost: BTreeMap::from([("usd".to_owned(), 1.0)]),
                ..Budget::default()
            },
            Some((
                BudgetLimit::MaxCost,
                "budget exceeded: max_cost.usd 1 reached (1 spent)",
            )),
        ),
        (
            Budget {
                max_cost: BTreeMap::from([("usd".to_owned(), 1.5), ("tokens".to_owned(), 0.0)]),
                ..Budget::default()
            },
            Some((
                BudgetLimit::MaxCost,
                "budget exceeded: max_cost.tokens 0 reached (0 spent)",
            )),
        ),
        (
            // Retries are not checked when a step is asked for (only when one would be retried).
            Budget {
                max_retries: Some(0),
                ..Budget::default()
            },
            None,
        ),
    ];
    for (budget, expected) in cases {
        assert_eq!(
            budget
                .check(&used, &"search".into(), within)
                .map(|exceeded| (exceeded.limit, exceeded.reason)),
            expected.map(|(limit, reason)| (limit, reason.to_owned())),
            "{budget:?}"
        );
    }
    let per_tool = Budget {
        max_calls_per_tool: Some(2),
        ..Budget::default()
    };
    assert_eq!(
        per_tool.check(&used, &"fetch".into(), within),
        None,
        "per tool id"
    );
}

#[test]
fn tighter_takes_the_smaller_limit_of_each_key_and_or_fills_missing_keys() {
    let file = Budget {
        max_steps: Some(10),
        max_wall_time: wall(60),
        max_cost: BTreeMap::from([("usd".to_owned(), 2.0)]),
        ..Budget::default()
    };
    let rule = Budget {
        max_steps: Some(20),
        max_calls_per_tool: Some(3),
        max_wall_time: wall(30),
        max_cost: BTreeMap::from([("usd".to_owned(), 1.0), ("tokens".to_owned(), 50.0)]),
        ..Budget::default()
    };
    let both = file.tighter(&rule);
    assert_eq!(both.max_steps, Some(10));
    assert_eq!(both.max_calls_per_tool, Some(3));
    assert_eq!(both.max_wall_time, wall(30));
    assert_eq!(
        both.max_cost,
        BTreeMap::from([("usd".to_owned(), 1.0), ("tokens".to_owned(), 50.0)])
    );
    let agent = Budget {
        max_steps: Some(50),
        ..Budget::default()
    };
    let merged = agent.or(&file);
    assert_eq!(merged.max_steps, Some(50), "the agent file's key wins");
    assert_eq!(
        merged.max_wall_time,
        wall(60),
        "missing keys come from global"
    );
    assert!(Budget::default().is_empty() && !merged.is_empty());
}

#[test]
fn remaining_never_goes_below_zero() {
    let budget = Budget {
        max_steps: Some(1),
        max_calls_per_tool: Some(1),
        max_wall_time: wall(1),
        max_retries: Some(0),
        max_cost: BTreeMap::from([("usd".to_owned(), 0.5)]),
        ..Budget::default()
    };
    let used = usage(&[
        created("a"),
        created("a"),
        EventBody::StepRetried {
            next_attempt: 2,
            not_before: None,
        },
        EventBody::StepCompleted {
            result: json!(null),
            cost: cost(&[("usd", 2.0)]),
        },
    ]);
    assert_eq!(
        budget.remaining_json(&used, Duration::from_secs(9)),
        json!({"steps": 0, "calls_per_tool": {"a": 0}, "wall_time_ms": 0, "retries": 0,
               "cost": {"usd": 0.0}})
    );
    assert_eq!(
        budget.limits_json(),
        json!({"max_steps": 1, "max_calls_per_tool": 1, "max_wall_time": "1s",
               "max_retries": 0, "max_cost": {"usd": 0.5}})
    );
}

#[test]
fn cost_must_be_an_object_of_non_negative_numbers() {
    assert_eq!(parse_cost(&json!(null)), Ok(None));
    assert_eq!(
        parse_cost(&json!({"usd": 0.012, "tokens": 5400})),
        Ok(cost(&[("usd", 0.012), ("tokens", 5400.0)]))
    );
    for bad in [
        json!(3),
        json!("0.1"),
        json!([1]),
        json!({"usd": -1}),
        json!({"usd": "1"}),
        json!({"": 1}),
        json!({"usd": null}),
    ] {
        assert!(parse_cost(&bad).is_err(), "{bad}");
    }
    let many: serde_json::Map<String, serde_json::Value> = (0..=MAX_COST_UNITS)
        .map(|i| (format!("u{i}"), json!(1)))
        .collect();
    assert!(parse_cost(&serde_json::Value::Object(many)).is_err());
}

#[test]
fn a_budget_denial_is_counted_under_the_limit_that_refused() {
    let mut registry = prometheus_client::registry::Registry::with_prefix("keel");
    let metrics = super::super::metrics::GuardrailMetrics::register(&mut registry);
    let used = usage(&[created("search")]);
    let budget = Budget {
        max_cost: BTreeMap::from([("usd".to_owned(), 0.0)]),
        ..Budget::default()
    };
    let exceeded = budget
        .check(&used, &"search".into(), Duration::ZERO)
        .expect("a zero cost budget refuses");
    metrics.budget_denied(exceeded.limit);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("keel_budget_denials_total{budget=\"max_cost\"} 1"),
        "{text}"
    );
}

fn model_call(input: u64, output: u64, usd: f64) -> EventBody {
    EventBody::LlmCalled(Box::new(crate::events::LlmCall {
        provider: "openai".into(),
        model: "m".into(),
        stream: false,
        outcome: "ok".into(),
        status: Some(200),
        latency_ms: 1,
        request_digest: String::new(),
        input_tokens: Some(input),
        output_tokens: Some(output),
        cached_tokens: None,
        cost: cost(&[("tokens", (input + output) as f64), ("usd", usd)]),
        error: None,
        request: None,
        response: None,
        replay_of: None,
        fallback: None,
    }))
}

#[test]
fn model_tokens_count_against_max_tokens_and_a_raise_replaces_the_policys_limits() {
    let budget = Budget {
        max_tokens: Some(100),
        max_cost: BTreeMap::from([("usd".to_owned(), 1.0)]),
        on_exceed: Some(OnExceed::RequireApproval),
        ..Budget::default()
    };
    let mut used = usage(&[model_call(60, 30, 0.2)]);
    assert_eq!(used.llm_tokens, 90);
    assert_eq!(budget.check_cost(&used), None);
    used.apply(&model_call(8, 2, 0.2));
    let exceeded = budget.check_cost(&used).expect("100 tokens reached");
    assert_eq!(exceeded.limit, BudgetLimit::MaxTokens);
    assert_eq!(exceeded.key, "max_tokens");
    assert_eq!(
        exceeded.reason,
        "budget exceeded: max_tokens 100 reached (100 model tokens used)"
    );
    // An operator's raise replaces the limit for this execution; other keys stay.
    used.apply(&EventBody::BudgetRaised {
        max_cost: BTreeMap::new(),
        max_tokens: Some(150),
    });
    assert_eq!(budget.check_cost(&used), None);
    assert_eq!(
        budget.remaining_json(&used, Duration::ZERO),
        json!({"cost": {"usd": 0.6}, "tokens": 50})
    );
    used.apply(&model_call(0, 0, 0.7));
    let exceeded = budget.check_cost(&used).expect("usd reached");
    assert_eq!(exceeded.key, "max_cost.usd");
    used.apply(&EventBody::BudgetRaised {
        max_cost: BTreeMap::from([("usd".to_owned(), 2.0)]),
        max_tokens: None,
    });
    assert_eq!(budget.check_cost(&used), None, "{used:?}");
    assert_eq!(
        used.raised_tokens,
        Some(150),
        "a later raise keeps earlier keys"
    );
    // Tool steps meet the same spending limits.
    used.apply(&model_call(40, 10, 0.0));
    assert_eq!(
        budget
            .check(&used, &"t".into(), Duration::ZERO)
            .map(|exceeded| exceeded.limit),
        Some(BudgetLimit::MaxTokens)
    );
}
