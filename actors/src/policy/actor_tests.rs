//! The policy actor alone (docs/testing.md): spawned with a `LeakCheck` on a `MemoryStore` and
//! asked directly — its answers and rate-limit slots, an engine swap (with the hooks beside
//! it), and windows rebuilt from a store that cannot answer.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::json;

use super::InForce;
use super::actor::{PolicyActor, PolicyArgs};
use super::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput, RateLimit};
use super::messages::PolicyMsg;
use crate::events::{EventBody, NewEvent, seal};
use crate::execution::state::ExecutionState;
use crate::hooks::{FailureMode, HookPoint, HookSpec};
use crate::ids::{AgentId, ExecutionId, StepId};
use crate::kernel::context::call;
use crate::metrics::Metrics;
use crate::store::{Commit, Store};
use crate::testing::{LeakCheck, MemoryStore};
use crate::time::Clock;

const WAIT: Duration = Duration::from_secs(5);

/// Allows `limited` twice a minute, denies `shell`, allows the rest without a limit.
struct Limited;

impl PolicyEngine for Limited {
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        match input.tool_id.as_str() {
            "shell" => PolicyDecision::plain(Decision::Deny, "no-shell", "no shell"),
            "limited" => PolicyDecision {
                rate_limit: Some(RateLimit {
                    max: 2,
                    window: Duration::from_secs(60),
                    window_text: "1m".to_owned(),
                }),
                ..PolicyDecision::plain(Decision::Allow, "twice-a-minute", "allowed")
            },
            _ => PolicyDecision::plain(Decision::Allow, "rest", "allowed"),
        }
    }

    fn digest(&self) -> String {
        "limited".to_owned()
    }

    fn longest_rate_window(&self) -> Option<Duration> {
        Some(Duration::from_secs(60))
    }
}

/// Denies everything.
struct Closed;

impl PolicyEngine for Closed {
    fn evaluate(&self, _input: &PolicyInput) -> PolicyDecision {
        PolicyDecision::plain(Decision::Deny, "closed", "closed for maintenance")
    }

    fn digest(&self) -> String {
        "closed".to_owned()
    }
}

fn input(agent: &str, tool: &str, clock: &Clock) -> PolicyInput {
    PolicyInput {
        created_by: None,
        on_behalf_of: None,
        action: "tool.invoke".to_owned(),
        agent_id: agent.into(),
        tool_id: tool.into(),
        execution_id: "e".into(),
        labels: Default::default(),
        arguments: json!({}),
        step_count: 0,
        duration_ms: 0,
        usage: Default::default(),
        now: clock.now(),
    }
}

fn hook(id: &str, agents: &[&str]) -> HookSpec {
    HookSpec {
        id: id.to_owned(),
        point: HookPoint::PreTool,
        url: "http://127.0.0.1:1/".to_owned(),
        timeout: Duration::from_secs(1),
        failure: FailureMode::FailClosed,
        agent_ids: agents.iter().map(|agent| AgentId::from(*agent)).collect(),
        rule_ids: Vec::new(),
        local_modify: Default::default(),
    }
}

async fn spawn(
    actors: &mut LeakCheck,
    engine: Arc<dyn PolicyEngine>,
    hooks: Vec<HookSpec>,
    store: Arc<MemoryStore>,
    clock: &Clock,
) -> ActorRef<PolicyMsg> {
    let args = PolicyArgs {
        engine,
        hooks: hooks.into(),
        metrics: Arc::new(Metrics::new()),
        store,
        clock: clock.clone(),
    };
    actors.spawn("policy", PolicyActor, args).await
}

async fn check(policy: &ActorRef<PolicyMsg>, input: PolicyInput) -> PolicyDecision {
    call(
        policy,
        |reply| PolicyMsg::CheckIntent(input, reply),
        WAIT,
        "policy",
    )
    .await
    .expect("the policy actor answers")
}

async fn hooks_for(policy: &ActorRef<PolicyMsg>, input: PolicyInput) -> Vec<String> {
    let hooks = call(
        policy,
        |reply| PolicyMsg::Hooks {
            point: HookPoint::PreTool,
            input,
            rule_id: None,
            reply,
        },
        WAIT,
        "policy",
    )
    .await
    .expect("the policy actor answers");
    hooks.into_iter().map(|hook| hook.id).collect()
}

#[tokio::test(start_paused = true)]
async fn checks_answer_the_engines_decision_and_count_only_admitted_calls() {
    let clock = Clock::tokio();
    let store = Arc::new(MemoryStore::default());
    let mut actors = LeakCheck::new();
    let policy = spawn(&mut actors, Arc::new(Limited), Vec::new(), store, &clock).await;

    let denied = check(&policy, input("a", "shell", &clock)).await;
    assert_eq!(
        (denied.decision, denied.rule_id.as_str()),
        (Decision::Deny, "no-shell")
    );
    assert_eq!(denied.rate_slot, None);
    let first = check(&policy, input("a", "limited", &clock)).await;
    assert_eq!(first.decision, Decision::Allow);
    let slot = first.rate_slot.expect("an admitted call holds a slot");
    assert_eq!(
        (slot.agent_id.as_str(), slot.tool_id.as_str()),
        ("a", "limited")
    );
    // Evaluate (a re-check of modified arguments) takes no slot.
    let evaluated = call(
        &policy,
        |reply| PolicyMsg::Evaluate(input("a", "limited", &clock), reply),
        WAIT,
        "policy",
    )
    .await
    .expect("answers");
    assert_eq!(evaluated.decision, Decision::Allow);
    assert_eq!(
        check(&policy, input("a", "limited", &clock)).await.decision,
        Decision::Allow
    );
    let over = check(&policy, input("a", "limited", &clock)).await;
    assert_eq!(over.decision, Decision::Deny);
    assert_eq!(over.reason, "rate limit exceeded: max 2 per 1m");
    assert_eq!(over.rate_slot, None);
    // Another agent has its own window; a slot given back is free again.
    assert_eq!(
        check(&policy, input("b", "limited", &clock)).await.decision,
        Decision::Allow
    );
    policy
        .send_message(PolicyMsg::ReleaseRateSlot(slot))
        .expect("send");
    assert_eq!(
        check(&policy, input("a", "limited", &clock)).await.decision,
        Decision::Allow
    );
    assert_eq!(
        check(&policy, input("a", "limited", &clock)).await.decision,
        Decision::Deny
    );
    // A minute later the window has moved on.
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(
        check(&policy, input("a", "limited", &clock)).await.decision,
        Decision::Allow
    );
    actors.finish().await;
}

#[tokio::test(start_paused = true)]
async fn an_engine_swap_answers_with_the_new_engine_and_hooks_and_keeps_the_windows() {
    let clock = Clock::tokio();
    let store = Arc::new(MemoryStore::default());
    let mut actors = LeakCheck::new();
    let policy = spawn(
        &mut actors,
        Arc::new(Limited),
        vec![hook("everyone", &[])],
        store,
        &clock,
    )
    .await;
    assert_eq!(
        hooks_for(&policy, input("x", "web", &clock)).await,
        ["everyone"]
    );
    for _ in 0..2 {
        assert_eq!(
            check(&policy, input("a", "limited", &clock)).await.decision,
            Decision::Allow
        );
    }

    let closed = InForce {
        engine: Arc::new(Closed),
        hooks: vec![hook("only-x", &["x"])].into(),
    };
    policy
        .send_message(PolicyMsg::ReplacePolicy(closed))
        .expect("send");
    let denied = check(&policy, input("a", "web", &clock)).await;
    assert_eq!(
        (denied.decision, denied.rule_id.as_str()),
        (Decision::Deny, "closed")
    );
    assert_eq!(
        hooks_for(&policy, input("x", "web", &clock)).await,
        ["only-x"]
    );
    assert!(
        hooks_for(&policy, input("y", "web", &clock))
            .await
            .is_empty()
    );

    // Back to the limited engine: the two calls admitted before the swaps still count.
    let limited = InForce {
        engine: Arc::new(Limited),
        hooks: Vec::new().into(),
    };
    policy
        .send_message(PolicyMsg::ReplacePolicy(limited))
        .expect("send");
    let over = check(&policy, input("a", "limited", &clock)).await;
    assert_eq!(over.decision, Decision::Deny, "{over:?}");
    assert!(
        hooks_for(&policy, input("x", "web", &clock))
            .await
            .is_empty()
    );
    actors.finish().await;
}

/// Stores one execution of `agent` with `calls` allowed `limited` calls, made now.
async fn seed_calls(store: &MemoryStore, agent: &str, calls: usize, clock: &Clock) {
    let id = ExecutionId::generate();
    let mut new_events = vec![NewEvent::execution(EventBody::ExecutionCreated {
        traceparent: None,
        created_by: None,
        on_behalf_of: None,
        agent_id: agent.into(),
        input: json!(null),
        labels: json!(null),
        priority: 0,
    })];
    for _ in 0..calls {
        let step = StepId::generate();
        new_events.push(NewEvent::step(
            &step,
            EventBody::StepCreated {
                tool_id: "limited".into(),
                tool_version: 0,
                arguments: json!({}),
                max_attempts: 1,
                attempt: 1,
                deadline: clock.now(),
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
            },
        ));
    }
    let events = seal(&id, 0, clock.now(), None, new_events);
    let state = ExecutionState::from_events(&events).expect("folds");
    let commit = Commit {
        execution: state.row(),
        events,
        steps: Vec::new(),
        previous_status: None,
    };
    store.commit(&[commit]).await.expect("seeded");
}

#[tokio::test(start_paused = true)]
async fn windows_rebuilt_from_a_store_that_fails_count_from_now_and_the_actor_still_answers() {
    let clock = Clock::tokio();
    let store = Arc::new(MemoryStore::default());
    seed_calls(&store, "a", 2, &clock).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut actors = LeakCheck::new();

    // A store that answers: the two stored calls fill the window.
    let rebuilt = spawn(
        &mut actors,
        Arc::new(Limited),
        Vec::new(),
        store.clone(),
        &clock,
    )
    .await;
    let over = check(&rebuilt, input("a", "limited", &clock)).await;
    assert_eq!(over.decision, Decision::Deny, "{over:?}");

    // A store that fails: the actor starts all the same, answers, and counts from now on.
    store.fail_reads(true);
    let blind = spawn(
        &mut actors,
        Arc::new(Limited),
        Vec::new(),
        store.clone(),
        &clock,
    )
    .await;
    for _ in 0..2 {
        assert_eq!(
            check(&blind, input("a", "limited", &clock)).await.decision,
            Decision::Allow
        );
    }
    assert_eq!(
        check(&blind, input("a", "limited", &clock)).await.decision,
        Decision::Deny
    );

    actors.finish().await;
}
