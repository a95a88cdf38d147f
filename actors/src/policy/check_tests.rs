//! `check_without_actor` answers exactly as the policy actor would, and leaves to the actor the
//! calls whose answer depends on its state (a breaker, a rate limit).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::check::{Checked, check_without_actor};
use super::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput, RateLimit};
use super::{PolicyActor, PolicyArgs, PolicyMsg};
use crate::guardrails::breaker::{BreakerConfig, BreakerScope, BreakerSet};
use crate::guardrails::budget::{Budget, BudgetUsage};
use crate::kernel::context::call;
use crate::metrics::Metrics;
use crate::policy::rules::Glob;
use crate::testing::{LeakCheck, MemoryStore};
use crate::time::Clock;

/// Answers one fixed decision for every call; `shell` may have a breaker.
struct Fixed {
    decision: PolicyDecision,
    breakers: BreakerSet,
}

impl PolicyEngine for Fixed {
    fn evaluate(&self, _input: &PolicyInput) -> PolicyDecision {
        self.decision.clone()
    }

    fn digest(&self) -> String {
        "fixed".to_owned()
    }

    fn breakers(&self) -> &BreakerSet {
        &self.breakers
    }
}

fn decision(kind: Decision) -> PolicyDecision {
    PolicyDecision::plain(kind, "r1", "because")
}

fn with_budget(kind: Decision, max_steps: u64) -> PolicyDecision {
    PolicyDecision {
        budget: Some(Arc::new(Budget {
            max_steps: Some(max_steps),
            ..Budget::default()
        })),
        ..decision(kind)
    }
}

fn with_rate_limit(kind: Decision) -> PolicyDecision {
    PolicyDecision {
        rate_limit: Some(RateLimit {
            max: 5,
            window: Duration::from_secs(60),
            window_text: "1m".to_owned(),
        }),
        ..decision(kind)
    }
}

fn shell_breaker() -> BreakerSet {
    BreakerSet(vec![BreakerConfig {
        tools: vec![Glob::new("shell").expect("glob")],
        scope: BreakerScope::Tool,
        failures: 3,
        failure_rate: None,
        window: Duration::from_secs(60),
        window_text: "1m".to_owned(),
        cool_down: Duration::from_secs(30),
        cool_down_text: "30s".to_owned(),
    }])
}

fn input(tool: &str, steps: u64, clock: &Clock) -> PolicyInput {
    PolicyInput {
        created_by: None,
        on_behalf_of: None,
        action: "tool.invoke".to_owned(),
        agent_id: "a".into(),
        tool_id: tool.into(),
        execution_id: "e".into(),
        labels: Default::default(),
        arguments: json!({}),
        step_count: steps,
        duration_ms: 0,
        usage: BudgetUsage {
            steps,
            ..BudgetUsage::default()
        },
        now: clock.now(),
    }
}

/// What a fresh policy actor answers for `input` under `engine`: to `CheckIntent`, or to
/// `Admit` with the engine's verdict `evaluated`.
async fn actor_answer(
    engine: Arc<Fixed>,
    input: PolicyInput,
    evaluated: Option<PolicyDecision>,
) -> PolicyDecision {
    let clock = Clock::tokio();
    let mut actors = LeakCheck::new();
    let args = PolicyArgs {
        engine,
        hooks: Vec::new().into(),
        metrics: Arc::new(Metrics::new()),
        store: Arc::new(MemoryStore::default()),
        clock,
    };
    let policy = actors.spawn("policy", PolicyActor, args).await;
    let message = |reply| match evaluated {
        Some(decision) => PolicyMsg::Admit {
            input,
            decision: Box::new(decision),
            started: std::time::Instant::now(),
            reply,
        },
        None => PolicyMsg::CheckIntent(input, reply),
    };
    let answer = call(&policy, message, Duration::from_secs(5), "policy")
        .await
        .expect("the policy actor answers");
    actors.finish().await;
    answer
}

#[tokio::test]
async fn calls_without_a_breaker_or_a_rate_limit_are_decided_as_the_actor_would() {
    let clock = Clock::tokio();
    let cases = [
        ("allow", decision(Decision::Allow), 0),
        ("deny", decision(Decision::Deny), 0),
        ("approval", decision(Decision::RequireApproval), 0),
        ("within budget", with_budget(Decision::Allow, 3), 2),
        ("over budget", with_budget(Decision::Allow, 3), 3),
        (
            "approval over budget",
            with_budget(Decision::RequireApproval, 1),
            1,
        ),
        (
            "deny under a rate limit",
            with_rate_limit(Decision::Deny),
            0,
        ),
        (
            "approval under a rate limit",
            with_rate_limit(Decision::RequireApproval),
            0,
        ),
        (
            "another tool than the breaker's",
            decision(Decision::Allow),
            0,
        ),
    ];
    for (name, answer, steps) in cases {
        let engine = Arc::new(Fixed {
            decision: answer,
            breakers: shell_breaker(),
        });
        let metrics = Metrics::new();
        let here = match check_without_actor(&*engine, &input("web", steps, &clock), &metrics) {
            Checked::Decided(decision) => decision,
            other => panic!("{name}: decided without the actor, not {other:?}"),
        };
        let there = actor_answer(engine, input("web", steps, &clock), None).await;
        assert_eq!(here, there, "{name}");
    }
    let over = with_budget(Decision::Allow, 3);
    let engine = Fixed {
        decision: over,
        breakers: BreakerSet::default(),
    };
    let Checked::Decided(denied) =
        check_without_actor(&engine, &input("web", 3, &clock), &Metrics::new())
    else {
        panic!("an over-budget call is decided without the actor");
    };
    assert_eq!(denied.decision, Decision::Deny);
    assert!(denied.reason.contains("max_steps"), "{}", denied.reason);
}

#[tokio::test]
async fn a_tool_with_a_breaker_or_an_allow_under_a_rate_limit_is_finished_by_the_actor() {
    let clock = Clock::tokio();
    let cases = [
        (
            "a tool with a breaker",
            "shell",
            decision(Decision::Allow),
            0,
        ),
        (
            "a breaker, over budget",
            "shell",
            with_budget(Decision::Allow, 1),
            1,
        ),
        (
            "an allow under a rate limit",
            "web",
            with_rate_limit(Decision::Allow),
            0,
        ),
    ];
    for (name, tool, answer, steps) in cases {
        let engine = Arc::new(Fixed {
            decision: answer,
            breakers: shell_breaker(),
        });
        let here = check_without_actor(&*engine, &input(tool, steps, &clock), &Metrics::new());
        let Checked::NeedsActor(evaluated) = here else {
            panic!("{name}: goes to the actor, not {here:?}");
        };
        let finished =
            actor_answer(engine.clone(), input(tool, steps, &clock), Some(evaluated)).await;
        let checked = actor_answer(engine, input(tool, steps, &clock), None).await;
        assert_eq!(finished.decision, checked.decision, "{name}");
        assert_eq!(finished.reason, checked.reason, "{name}");
        assert_eq!(
            finished.rate_slot.is_some(),
            checked.rate_slot.is_some(),
            "{name}"
        );
    }
}
