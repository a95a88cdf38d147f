use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::hooks::HookPoint;

/// Answers each hook from a script and records what it was sent.
struct Scripted {
    answers: Vec<(&'static str, Result<HookVerdict, String>)>,
    seen: Mutex<Vec<Value>>,
}

#[async_trait]
impl HookCaller for Scripted {
    async fn call(&self, hook: &HookSpec, request: &Value) -> Result<HookVerdict, String> {
        self.seen.lock().expect("lock").push(request.clone());
        self.answers
            .iter()
            .find(|(id, _)| *id == hook.id)
            .map_or(Ok(HookVerdict::Pass), |(_, answer)| answer.clone())
    }
}

fn hook(id: &str, failure: FailureMode) -> HookSpec {
    HookSpec {
        id: id.to_owned(),
        point: HookPoint::PreCreate,
        url: "http://127.0.0.1:1/".to_owned(),
        timeout: Duration::from_millis(100),
        failure,
        agent_ids: Vec::new(),
        rule_ids: Vec::new(),
        local_modify: Default::default(),
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

fn payloads(run: &CreationRun) -> Vec<Value> {
    run.events
        .iter()
        .map(|event| event.body.payload())
        .collect()
}

#[test]
fn hook_labels_are_validated_like_creation_labels_and_only_added() {
    let current = labels(&[("team", "ops")]);
    assert_eq!(
        labels_to_add(&current, &json!({"tier": "gold", "team": "ops"})),
        Ok(labels(&[("tier", "gold")])),
        "a label already set to the same value is not an addition"
    );
    assert!(labels_to_add(&current, &json!(["tier"])).is_err());
    let error = labels_to_add(&current, &json!({"tier": 3})).expect_err("number");
    assert!(error.contains("\"tier\" must be a string"), "{error}");
    let error = labels_to_add(&current, &json!({"team": "dev"})).expect_err("collision");
    assert!(error.contains("already set to \"ops\""), "{error}");
}

#[tokio::test]
async fn hooks_add_labels_in_order_and_each_sees_the_labels_so_far() {
    let caller = Scripted {
        answers: vec![
            ("a", Ok(HookVerdict::Modify(json!({"tier": "gold"})))),
            ("b", Ok(HookVerdict::Pass)),
        ],
        seen: Mutex::new(Vec::new()),
    };
    let given = labels(&[("team", "ops")]);
    let input = json!({"q": 1});
    let creation = CreationRequest {
        agent_id: "writer",
        input: &input,
        labels: Some(&given),
        priority: 5,
        idempotency_key: Some("k1"),
        created_by: Some("ci-bot"),
        on_behalf_of: Some("user-9"),
    };
    let hooks = [
        hook("a", FailureMode::FailClosed),
        hook("b", FailureMode::FailClosed),
    ];
    let run = run_creation_chain(&caller, &hooks, creation).await;
    assert_eq!(
        run.outcome,
        CreationOutcome::Create(Some(labels(&[("team", "ops"), ("tier", "gold")])))
    );
    let seen = caller.seen.lock().expect("lock").clone();
    assert_eq!(seen[0]["point"], "pre_create");
    assert_eq!(seen[0]["hook_id"], "a");
    assert_eq!(seen[0]["agent_id"], "writer");
    assert_eq!(seen[0]["input"], input);
    assert_eq!(seen[0]["priority"], 5);
    assert_eq!(seen[0]["created_by"], "ci-bot");
    assert_eq!(seen[0]["on_behalf_of"], "user-9");
    assert_eq!(seen[0]["idempotency_key"], "k1");
    assert_eq!(seen[0]["labels"], json!({"team": "ops"}));
    assert_eq!(seen[1]["labels"], json!({"team": "ops", "tier": "gold"}));
    let recorded = payloads(&run);
    assert_eq!(recorded[0]["decision"], "modify");
    assert_eq!(recorded[0]["point"], "pre_create");
    assert_eq!(recorded[0]["labels"], json!({"tier": "gold"}));
    assert!(recorded[0].get("tool_id").is_none());
    assert_eq!(recorded[1]["decision"], "pass");
    assert!(recorded[1].get("labels").is_none());
}

#[tokio::test]
async fn a_creation_without_labels_keeps_none_unless_a_hook_adds_some() {
    let caller = Scripted {
        answers: vec![("a", Ok(HookVerdict::Modify(json!({}))))],
        seen: Mutex::new(Vec::new()),
    };
    let input = Value::Null;
    let creation = CreationRequest {
        agent_id: "writer",
        input: &input,
        labels: None,
        priority: 0,
        idempotency_key: None,
        created_by: None,
        on_behalf_of: None,
    };
    let run = run_creation_chain(&caller, &[hook("a", FailureMode::FailClosed)], creation).await;
    assert_eq!(run.outcome, CreationOutcome::Create(None));
    let seen = caller.seen.lock().expect("lock").clone();
    assert!(seen[0].get("priority").is_none());
    assert!(seen[0].get("idempotency_key").is_none());
    assert_eq!(seen[0]["labels"], json!({}));
}

#[tokio::test]
async fn a_refusal_or_a_failed_call_stops_the_chain_by_failure_mode() {
    let input = Value::Null;
    let creation = CreationRequest {
        agent_id: "writer",
        input: &input,
        labels: None,
        priority: 0,
        idempotency_key: None,
        created_by: None,
        on_behalf_of: None,
    };
    let refusing = Scripted {
        answers: vec![("a", Ok(HookVerdict::Abort("no budget".to_owned())))],
        seen: Mutex::new(Vec::new()),
    };
    let hooks = [
        hook("a", FailureMode::FailClosed),
        hook("b", FailureMode::FailClosed),
    ];
    let run = run_creation_chain(&refusing, &hooks, creation).await;
    assert_eq!(
        run.outcome,
        CreationOutcome::Refuse {
            hook_id: "a".to_owned(),
            reason: "no budget".to_owned()
        }
    );
    assert_eq!(
        refusing.seen.lock().expect("lock").len(),
        1,
        "b is not called"
    );
    assert_eq!(payloads(&run)[0]["reason"], "no budget");

    // An invalid answer is a failed call: fail_open goes on, fail_closed refuses.
    let colliding = || Scripted {
        answers: vec![
            ("open", Ok(HookVerdict::Modify(json!({"team": 1})))),
            ("closed", Err("no answer within 100 ms".to_owned())),
        ],
        seen: Mutex::new(Vec::new()),
    };
    let open = [hook("open", FailureMode::FailOpen)];
    let run = run_creation_chain(&colliding(), &open, creation).await;
    assert_eq!(run.outcome, CreationOutcome::Create(None));
    let recorded = payloads(&run);
    assert_eq!(recorded[0]["decision"], "error");
    assert_eq!(recorded[0]["failure_mode"], "fail_open");
    let closed = [hook("closed", FailureMode::FailClosed)];
    let run = run_creation_chain(&colliding(), &closed, creation).await;
    assert_eq!(
        run.outcome,
        CreationOutcome::Refuse {
            hook_id: "closed".to_owned(),
            reason: "hook closed failed: no answer within 100 ms".to_owned()
        }
    );
    assert_eq!(payloads(&run)[0]["failure_mode"], "fail_closed");
}
