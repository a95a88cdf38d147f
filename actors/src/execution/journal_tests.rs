//! The journal's call identity (canonical arguments, occurrences) and what it replays.

use serde_json::{Value, json};

use super::{Journal, call_key, canonical};
use crate::events::{EventBody, NewEvent, seal};
use crate::execution::machine::{self, ReplayedCall};
use crate::execution::state::ExecutionState;
use crate::ids::{ExecutionId, StepId, ToolId};
use crate::status::StepStatus;

fn text(value: &Value) -> String {
    let mut out = String::new();
    canonical(value, &mut out);
    out
}

#[test]
fn key_order_white_space_and_number_spelling_do_not_matter() {
    let a: Value = serde_json::from_str(r#"{"b": [1, 2.50, {"y": 1e2, "x": -0}], "a": "é\""}"#)
        .unwrap_or_default();
    let b: Value =
        serde_json::from_str(r#"{"a":"é\"","b":[1.0,25e-1,{"x":0,"y":100}]}"#).unwrap_or_default();
    assert_eq!(text(&a), text(&b));
    assert_eq!(text(&a), r#"{"a":"é\"","b":[1,2.5e0,{"x":0,"y":100}]}"#);
    let tool = ToolId::from("pay");
    assert_eq!(call_key(&tool, &a), call_key(&tool, &b));
}

#[test]
fn different_values_types_or_tools_are_different_calls() {
    let tool = ToolId::from("pay");
    let other = ToolId::from("refund");
    let distinct = [
        json!({"n": 1}),
        json!({"n": 2}),
        json!({"n": "1"}),
        json!({"n": 1.5}),
        json!({"n": [1]}),
        json!({"n": null}),
        json!({"m": 1}),
        json!([1]),
        json!(null),
        json!(9_007_199_254_740_993_u64),
    ];
    for (i, x) in distinct.iter().enumerate() {
        for (j, y) in distinct.iter().enumerate() {
            assert_eq!(
                i == j,
                call_key(&tool, x) == call_key(&tool, y),
                "{x} vs {y}"
            );
        }
        assert_ne!(call_key(&tool, x), call_key(&other, x));
    }
}

/// An execution log built one event at a time.
struct Log {
    events: Vec<crate::events::Event>,
}

impl Log {
    fn new() -> Self {
        let mut log = Self { events: Vec::new() };
        log.push(NewEvent::execution(EventBody::ExecutionCreated {
            agent_id: "a".into(),
            input: Value::Null,
            labels: Value::Null,
            priority: 0,
            traceparent: None,
            created_by: None,
            on_behalf_of: None,
        }));
        log
    }

    fn push(&mut self, event: NewEvent) {
        let id = ExecutionId::new("e");
        let last = i64::try_from(self.events.len()).unwrap_or(0);
        self.events
            .extend(seal(&id, last, crate::time::now(), None, vec![event]));
    }

    fn state(&self) -> ExecutionState {
        ExecutionState::from_events(&self.events).expect("log starts with execution.created")
    }

    fn start(&mut self) {
        self.push(NewEvent::execution(EventBody::ExecutionStarted {
            session_id: crate::ids::SessionId::generate(),
            consumer_id: "c".into(),
        }));
    }

    fn reset(&mut self) {
        self.push(NewEvent::execution(EventBody::ExecutionReset {
            reason: "agent_disconnect".to_owned(),
            from_status: "running".to_owned(),
        }));
    }

    /// A live call that ends with `end` (`Some(Ok)` completed, `Some(Err)` failed, `None`
    /// cancelled).
    fn call(&mut self, tool: &str, arguments: Value, end: Option<Result<Value, &str>>) -> StepId {
        let step = StepId::generate();
        self.push(NewEvent::step(&step, created(tool, arguments, None)));
        let body = match end {
            Some(Ok(result)) => EventBody::StepCompleted { result, cost: None },
            Some(Err(error)) => EventBody::StepFailed {
                error: error.to_owned(),
                retryable: false,
                cost: None,
            },
            None => EventBody::StepCancelled {
                reason: "agent disconnected".to_owned(),
            },
        };
        self.push(NewEvent::step(&step, body));
        step
    }

    /// The call as a re-run makes it: replayed when the journal has it (the recorded events
    /// appended), live otherwise with `live` as its result. Returns the replayed step.
    fn rerun(&mut self, tool: &str, arguments: Value, live: Value) -> Option<StepId> {
        let state = self.state();
        let tool_id = ToolId::from(tool);
        match machine::replayable(&state, &tool_id, &arguments) {
            Some(entry) => {
                let of = entry.step_id.clone();
                let call = ReplayedCall {
                    tool_id: &tool_id,
                    arguments: &arguments,
                    key: None,
                    remote: true,
                };
                let (transition, _) =
                    machine::replay_call(&state, &call, entry, crate::time::now());
                for event in transition.events {
                    self.push(event);
                }
                Some(of)
            }
            None => {
                self.call(tool, arguments, Some(Ok(live)));
                None
            }
        }
    }
}

fn created(tool: &str, arguments: Value, replay_of: Option<StepId>) -> EventBody {
    EventBody::StepCreated {
        tool_id: tool.into(),
        tool_version: 0,
        arguments,
        max_attempts: 1,
        attempt: 1,
        deadline: crate::time::now(),
        remote: true,
        timeout_ms: None,
        retry_base_delay_ms: None,
        retry_max_delay_ms: None,
        max_retries: None,
        replay_of,
        key_of: None,
        repeats: None,
        proposed_arguments: None,
        at_most_once: false,
    }
}

#[test]
fn a_first_run_has_no_journal() {
    let mut log = Log::new();
    log.start();
    log.call("pay", json!({"n": 1}), Some(Ok(json!("paid"))));
    assert_eq!(log.state().journal, None);
    assert!(machine::replayable(&log.state(), &"pay".into(), &json!({"n": 1})).is_none());
}

#[test]
fn the_nth_identical_call_replays_the_nth_recorded_one() {
    let mut log = Log::new();
    log.start();
    let first = log.call("pay", json!({"n": 1}), Some(Ok(json!("r1"))));
    let second = log.call("pay", json!({"n": 1}), Some(Ok(json!("r2"))));
    log.reset();
    log.start();
    assert_eq!(
        log.rerun("pay", json!({"n": 1.0}), json!("live")),
        Some(first)
    );
    assert_eq!(
        log.rerun("pay", json!({"n": 1}), json!("live")),
        Some(second)
    );
    // A third identical call was never made: it runs.
    assert_eq!(log.rerun("pay", json!({"n": 1}), json!("r3")), None);
    let state = log.state();
    let results: Vec<_> = state
        .history
        .iter()
        .map(|entry| entry.result.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        results,
        [
            json!("r1"),
            json!("r2"),
            json!("r1"),
            json!("r2"),
            json!("r3")
        ]
    );
    // Replays charge nothing: 3 live steps.
    assert_eq!(state.usage.steps, 3);
}

#[test]
fn failures_replay_cancelled_and_timed_out_calls_run_again() {
    let mut log = Log::new();
    log.start();
    let failed = log.call("pay", json!({"n": 1}), Some(Err("card declined")));
    log.call("pay", json!({"n": 2}), None);
    log.reset();
    log.start();
    let state = log.state();
    let entry = machine::replayable(&state, &"pay".into(), &json!({"n": 1}));
    assert_eq!(entry.map(|entry| entry.step_id.clone()), Some(failed));
    assert_eq!(entry.map(|entry| entry.success), Some(false));
    assert!(machine::replayable(&state, &"pay".into(), &json!({"n": 2})).is_none());
    // The replayed failure is the recorded one, pushed as a failed tool.result.
    let call = ReplayedCall {
        tool_id: &"pay".into(),
        arguments: &json!({"n": 1}),
        key: None,
        remote: true,
    };
    let Some(entry) = entry else { return };
    let (transition, reply) = machine::replay_call(&state, &call, entry, crate::time::now());
    assert!(reply.accepted && !reply.pending_approval);
    assert!(matches!(
        &transition.events[2].body,
        EventBody::StepFailed { error, retryable: false, cost: None } if error == "card declined"
    ));
    assert!(
        transition
            .effects
            .iter()
            .all(|effect| !matches!(effect, crate::execution::Effect::EnqueueJob(_)))
    );
}

#[test]
fn a_diverging_rerun_replays_what_matches_and_runs_the_rest() {
    let mut log = Log::new();
    log.start();
    let a = log.call("search", json!({"q": "x"}), Some(Ok(json!("hits"))));
    let b = log.call("pay", json!({"n": 1}), Some(Ok(json!("paid"))));
    log.reset();
    log.start();
    // Different arguments: a new call, run live.
    assert_eq!(log.rerun("search", json!({"q": "y"}), json!("other")), None);
    // Other calls keep matching by content, whatever the order.
    assert_eq!(log.rerun("pay", json!({"n": 1}), json!("again")), Some(b));
    assert_eq!(
        log.rerun("search", json!({"q": "x"}), json!("again")),
        Some(a.clone())
    );
    // A third run replays the original calls and the second run's live one, never a replay.
    log.reset();
    log.start();
    let state = log.state();
    let replayed = |tool: &str, args: Value| {
        machine::replayable(&state, &tool.into(), &args).map(|entry| entry.step_id.clone())
    };
    assert_eq!(replayed("search", json!({"q": "x"})), Some(a));
    let live_y = state
        .steps
        .iter()
        .find(|step| step.arguments == json!({"q": "y"}))
        .map(|step| step.id.clone());
    assert_eq!(replayed("search", json!({"q": "y"})), live_y);
    assert_eq!(
        state
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Succeeded)
            .count(),
        5
    );
}

#[test]
fn the_journal_is_rebuilt_from_the_log() {
    let mut log = Log::new();
    log.start();
    log.call("pay", json!({"n": 1}), Some(Ok(json!("paid"))));
    log.reset();
    log.start();
    log.rerun("pay", json!({"n": 1}), json!("again"));
    // Folding the same log again (a restart) gives the same journal and occurrence counts.
    let live = log.state();
    let rebuilt = ExecutionState::from_events(&log.events);
    assert_eq!(rebuilt.as_ref().map(|s| &s.journal), Some(&live.journal));
    assert!(machine::replayable(&live, &"pay".into(), &json!({"n": 1})).is_none());
    assert!(live.journal.is_some());
    let _ = Journal::default();
}

impl Log {
    /// A call that asks for approval and gets `approved`; a granted one is then cancelled (the
    /// agent was lost while it ran), a denied one fails with the approver's reason.
    fn gated(&mut self, tool: &str, arguments: Value, approved: bool) -> StepId {
        use crate::events::{BlockReason, ResumeReason};
        let step = StepId::generate();
        self.push(NewEvent::step(
            &step,
            created(tool, arguments.clone(), None),
        ));
        self.push(NewEvent::step(
            &step,
            EventBody::StepApprovalRequired {
                tool_id: tool.into(),
                arguments,
                remote: true,
                reason: "a human must agree".to_owned(),
                rule_id: None,
                arguments_digest: None,
                approvers: None,
                expires_at: None,
                on_expiry: None,
                self_approval: false,
            },
        ));
        self.push(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: BlockReason::Approval,
            reference: step.to_string(),
            tool_id: None,
            arguments: None,
            remote: None,
        }));
        if approved {
            self.push(NewEvent::execution(EventBody::ExecutionResumed {
                reason: ResumeReason::ApprovalGranted,
            }));
            self.push(NewEvent::step(
                &step,
                EventBody::StepCancelled {
                    reason: "agent disconnected".to_owned(),
                },
            ));
        } else {
            self.push(NewEvent::step(
                &step,
                EventBody::StepFailed {
                    error: "not today".to_owned(),
                    retryable: false,
                    cost: None,
                },
            ));
            self.push(NewEvent::execution(EventBody::ExecutionResumed {
                reason: ResumeReason::ApprovalDenied,
            }));
        }
        step
    }

    /// A `wait` for `signal_type` satisfied by a signal carrying `payload`.
    fn waited(&mut self, signal_type: &str, payload: Value) {
        use crate::events::{BlockReason, ResumeReason};
        self.push(NewEvent::execution(EventBody::IntentAccepted {
            intent_type: "wait".to_owned(),
            details: Some(json!({ "signal_type": signal_type })),
        }));
        self.push(NewEvent::execution(EventBody::ExecutionBlocked {
            reason: BlockReason::Signal,
            reference: signal_type.to_owned(),
            tool_id: None,
            arguments: None,
            remote: None,
        }));
        self.signal(signal_type, payload);
        self.push(NewEvent::execution(EventBody::ExecutionResumed {
            reason: ResumeReason::SignalReceived(signal_type.to_owned()),
        }));
    }

    fn signal(&mut self, signal_type: &str, payload: Value) {
        self.push(NewEvent::execution(EventBody::SignalReceived {
            signal_type: signal_type.to_owned(),
            payload,
            sent_by: None,
        }));
    }
}

#[test]
fn a_granted_approval_is_reused_by_the_same_call_only() {
    let mut log = Log::new();
    log.start();
    let granted = log.gated("pay", json!({"n": 1}), true);
    log.reset();
    log.start();
    let state = log.state();
    let pay = ToolId::from("pay");
    // Not in the journal of outcomes (it was cancelled), but its grant is.
    assert!(machine::replayable(&state, &pay, &json!({"n": 1})).is_none());
    assert_eq!(
        machine::reusable_grant(&state, &pay, &json!({"n": 1.0})),
        Some(&granted)
    );
    assert!(machine::reusable_grant(&state, &pay, &json!({"n": 2})).is_none());
    assert!(machine::reusable_grant(&state, &"refund".into(), &json!({"n": 1})).is_none());
    // Once the call was made again, a second identical call gets no grant.
    log.call("pay", json!({"n": 1}), Some(Ok(json!("paid"))));
    assert!(machine::reusable_grant(&log.state(), &pay, &json!({"n": 1})).is_none());
}

#[test]
fn a_denied_approval_is_replayed_as_that_denial() {
    let mut log = Log::new();
    log.start();
    let denied = log.gated("pay", json!({"n": 1}), false);
    log.reset();
    log.start();
    let state = log.state();
    let pay = ToolId::from("pay");
    assert!(machine::reusable_grant(&state, &pay, &json!({"n": 1})).is_none());
    let Some(entry) = machine::replayable(&state, &pay, &json!({"n": 1})) else {
        panic!("the denied call is in the journal");
    };
    assert_eq!(entry.step_id, denied);
    assert!(entry.approval_denied);
    let call = ReplayedCall {
        tool_id: &pay,
        arguments: &json!({"n": 1}),
        key: None,
        remote: false,
    };
    let (transition, reply) = machine::replay_call(&state, &call, entry, crate::time::now());
    assert!(reply.accepted && reply.pending_approval);
    let pushes: Vec<_> = transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            crate::execution::Effect::PushToAgent(push) => Some(push),
            _ => None,
        })
        .collect();
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].event, "approval.resolved");
    assert_eq!(pushes[0].data["approved"], json!(false));
    assert_eq!(pushes[0].data["reason"], json!("not today"));
}

#[test]
fn a_wait_gets_the_signal_an_earlier_run_consumed_in_order() {
    let mut log = Log::new();
    log.start();
    log.waited("go", json!({"n": 1}));
    log.waited("go", json!({"n": 2}));
    log.reset();
    // A new signal arrived while pending: it is for the wait after the replayed ones.
    log.signal("go", json!({"n": 3}));
    log.start();
    for expected in [json!({"n": 1}), json!({"n": 2})] {
        let state = log.state();
        let payload = machine::replayable_signal(&state, "go").cloned();
        assert_eq!(payload, Some(expected.clone()));
        assert!(machine::replayable_signal(&state, "stop").is_none());
        let transition = machine::replay_wait(&state, "go", &expected);
        assert!(transition.events.iter().all(|event| !matches!(
            event.body,
            EventBody::ExecutionBlocked { .. } | EventBody::ExecutionResumed { .. }
        )));
        for event in transition.events {
            log.push(event);
        }
    }
    let state = log.state();
    assert!(machine::replayable_signal(&state, "go").is_none());
    assert_eq!(state.pending_signals.len(), 1);
    assert_eq!(state.pending_signals[0].1, json!({"n": 3}));
}

#[test]
fn a_call_keeps_the_key_of_the_position_it_holds_across_runs() {
    let mut log = Log::new();
    log.start();
    let first = log.call("pay", json!({"n": 1}), None);
    let other = log.call("pay", json!({"n": 2}), Some(Ok(json!("paid"))));
    log.reset();
    log.start();
    let state = log.state();
    let journal = state.journal.as_ref().expect("a re-run has a journal");
    let pay = ToolId::from("pay");
    assert_eq!(journal.key_of(&pay, &json!({"n": 1.0})), Some(&first));
    assert_eq!(journal.key_of(&pay, &json!({"n": 2})), Some(&other));
    assert_eq!(journal.key_of(&pay, &json!({"n": 3})), None);
    // The re-run's call of {"n": 1} records key_of and so has the first step's key.
    let again = StepId::generate();
    let mut body = created("pay", json!({"n": 1}), None);
    if let EventBody::StepCreated { key_of, .. } = &mut body {
        *key_of = Some(first.clone());
    }
    log.push(NewEvent::step(&again, body));
    let state = log.state();
    let id = ExecutionId::new("e");
    let step = state.step(&again).expect("step");
    assert_eq!(step.idempotency_key(&id), format!("e:{first}"));
    let own = state.step(&first).expect("step");
    assert_eq!(own.idempotency_key(&id), format!("e:{first}"));
    // A third run still finds the first step at that position.
    log.reset();
    log.start();
    let state = log.state();
    let journal = state.journal.as_ref().expect("journal");
    assert_eq!(journal.key_of(&pay, &json!({"n": 1})), Some(&first));
}

#[test]
fn a_call_run_again_names_the_recorded_step_it_repeats() {
    use crate::execution::{ExecutionSettings, Intent};
    use crate::policy::{Decision, PolicyDecision};
    let mut log = Log::new();
    log.start();
    let recorded = log.call("clock", json!({}), Some(Ok(json!("12:00"))));
    log.reset();
    log.start();
    let state = log.state();
    let allow = PolicyDecision::plain(Decision::Allow, "default", "allowed");
    let created = |arguments: Value, remote: bool| {
        let intent = Intent::InvokeTool {
            tool_id: "clock".into(),
            arguments,
            idempotency_key: None,
            remote,
        };
        let settings = ExecutionSettings::default();
        let (transition, _) =
            machine::intent(&state, &intent, Some(&allow), crate::time::now(), &settings)
                .expect("accepted");
        transition
            .events
            .into_iter()
            .find_map(|event| match event.body {
                EventBody::StepCreated {
                    repeats, key_of, ..
                } => Some((repeats, key_of)),
                _ => None,
            })
    };
    // A local call (the rebuno SDK runs it) or a remote one under `replay: false`.
    for remote in [false, true] {
        assert_eq!(
            created(json!({}), remote),
            Some((Some(recorded.clone()), Some(recorded.clone())))
        );
    }
    assert_eq!(created(json!({"tz": "UTC"}), false), Some((None, None)));
}
