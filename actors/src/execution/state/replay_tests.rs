//! A log written before the block/resume reasons and the denial kinds were typed replays into
//! the same state: every reason string the kernel has written is folded from raw JSON, and each
//! event serializes back to the payload it was read from.

use serde_json::{Value, json};

use super::{ExecutionState, RecordedIntent};
use crate::events::{EventBody, NewEvent, seal};
use crate::ids::{ExecutionId, StepId};
use crate::status::ExecutionStatus;

/// What the fold must show after one event: status, tool block, signal wait, approval and
/// the signal types received but not yet consumed.
struct Expect {
    status: ExecutionStatus,
    tool_blocked: bool,
    signal_wait: Option<&'static str>,
    approval: Option<&'static str>,
    pending: &'static [&'static str],
}

const fn state(
    status: ExecutionStatus,
    tool_blocked: bool,
    signal_wait: Option<&'static str>,
    approval: Option<&'static str>,
    pending: &'static [&'static str],
) -> Expect {
    Expect {
        status,
        tool_blocked,
        signal_wait,
        approval,
        pending,
    }
}

fn denied(key: &str, reason: &str, rule_id: &str) -> (&'static str, Value) {
    (
        "intent.denied",
        json!({"intent_type": "invoke_tool", "tool_id": "web", "idempotency_key": key,
               "reason": reason, "rule_id": rule_id}),
    )
}

#[test]
fn an_old_log_with_every_reason_string_replays_to_the_same_state() {
    use ExecutionStatus::{Blocked, Pending, Running};
    let blocked = |reason: &str, reference: &str| {
        (
            "execution.blocked",
            json!({"reason": reason, "ref": reference}),
        )
    };
    let resumed = |reason: &str| ("execution.resumed", json!({ "reason": reason }));
    let log: Vec<((&str, Value), Expect)> = vec![
        (
            (
                "execution.created",
                json!({"agent_id": "a", "input": null, "labels": null}),
            ),
            state(Pending, false, None, None, &[]),
        ),
        (
            (
                "execution.started",
                json!({"session_id": "s1", "consumer_id": "c1"}),
            ),
            state(Running, false, None, None, &[]),
        ),
        (
            blocked("tool", "st-1"),
            state(Blocked, true, None, None, &[]),
        ),
        (
            resumed("step completed"),
            state(Running, false, None, None, &[]),
        ),
        (
            blocked("signal", "go"),
            state(Blocked, false, Some("go"), None, &[]),
        ),
        (
            (
                "signal.received",
                json!({"signal_type": "go", "payload": 1}),
            ),
            state(Blocked, false, Some("go"), None, &["go"]),
        ),
        (
            resumed("signal received: go"),
            state(Running, false, None, None, &[]),
        ),
        (
            (
                "signal.received",
                json!({"signal_type": "early", "payload": 2}),
            ),
            state(Running, false, None, None, &["early"]),
        ),
        (
            blocked("signal", "later"),
            state(Blocked, false, Some("later"), None, &["early"]),
        ),
        (
            resumed("wait abandoned"),
            state(Running, false, None, None, &["early"]),
        ),
        (
            resumed("signal received: early"),
            state(Running, false, None, None, &[]),
        ),
        (
            blocked("approval", "st-2"),
            state(Blocked, false, None, Some("st-2"), &[]),
        ),
        (
            resumed("approval granted"),
            state(Running, false, None, None, &[]),
        ),
        (
            blocked("approval", "st-3"),
            state(Blocked, false, None, Some("st-3"), &[]),
        ),
        (
            resumed("approval denied"),
            state(Running, false, None, None, &[]),
        ),
        (
            denied("k1", "rate limit exceeded: max 1 per 1m", "lim"),
            state(Running, false, None, None, &[]),
        ),
        (
            denied("k2", "budget exceeded: max_steps 3 reached", "b"),
            state(Running, false, None, None, &[]),
        ),
        (
            denied(
                "k3",
                "circuit half-open for tool web: a probe call is running",
                "c",
            ),
            state(Running, false, None, None, &[]),
        ),
        (
            denied("k4", "no shell", "no-shell"),
            state(Running, false, None, None, &[]),
        ),
        (
            denied(
                "k5",
                "concurrency limit: max_concurrent_steps 1 reached",
                "x",
            ),
            state(Running, false, None, None, &[]),
        ),
        (
            denied("k6", "not today", "hook:audit"),
            state(Running, false, None, None, &[]),
        ),
    ];
    let id = ExecutionId::new("e-old");
    let mut exec: Option<ExecutionState> = None;
    for (index, ((type_name, payload), expect)) in log.into_iter().enumerate() {
        let body = EventBody::from_parts(type_name, payload.clone()).unwrap();
        assert_eq!(
            body.payload(),
            payload,
            "{type_name} writes back what it read"
        );
        let event = seal(
            &id,
            index as i64,
            crate::time::now(),
            None,
            vec![NewEvent::execution(body)],
        )
        .remove(0);
        let exec = match exec.as_mut() {
            Some(exec) => {
                exec.apply(&event);
                exec
            }
            None => exec.insert(ExecutionState::from_events(&[event]).unwrap()),
        };
        let pending: Vec<&str> = exec
            .pending_signals
            .iter()
            .map(|(kind, _)| kind.as_str())
            .collect();
        assert_eq!(exec.status, expect.status, "after event {}", index + 1);
        assert_eq!(
            exec.tool_blocked,
            expect.tool_blocked,
            "after event {}",
            index + 1
        );
        assert_eq!(
            exec.signal_wait.as_deref(),
            expect.signal_wait,
            "after event {}",
            index + 1
        );
        assert_eq!(
            exec.approval,
            expect.approval.map(StepId::new),
            "after event {}",
            index + 1
        );
        assert_eq!(pending, expect.pending, "after event {}", index + 1);
    }
    let exec = exec.unwrap();
    let error = |key: &str| match &exec.intents[key] {
        RecordedIntent::Denied { error, .. } => error.clone(),
        other => panic!("{key}: {other:?}"),
    };
    // The texts the agent got when the denials were made, rebuilt from the stored reasons.
    assert_eq!(error("k1"), "rate limit exceeded: max 1 per 1m (rule: lim)");
    assert_eq!(
        error("k2"),
        "budget exceeded: max_steps 3 reached (rule: b)"
    );
    assert_eq!(
        error("k3"),
        "circuit half-open for tool web: a probe call is running (rule: c)"
    );
    assert_eq!(error("k4"), "policy denied: no shell (rule: no-shell)");
    assert_eq!(
        error("k5"),
        "policy denied: concurrency limit: max_concurrent_steps 1 reached (rule: x)"
    );
    assert_eq!(error("k6"), "policy denied: not today (rule: hook:audit)");
}
