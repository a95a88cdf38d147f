//! The cost of the step journal for a re-run (issue 33): an execution whose first run recorded
//! N completed tool calls is reset and started again; the re-run builds the journal (on
//! `execution.started`) and matches each of its N calls against it (`Journal::lookup` and
//! `Journal::saw`, what `machine::replay_call` does per intent). Prints the time per replayed
//! step for several N. No Criterion: a plain timing loop (`harness = false`), run with
//!
//!     cargo bench -p keel-actors --bench journal
//!
//! The arguments are realistic tool arguments (a nested object of ~200 bytes), each call
//! distinct except every fourth, which repeats an earlier call (occurrence matching).

use std::hint::black_box;
use std::time::{Duration, Instant};

use keel_actors::events::Event;
use keel_actors::execution::state::ExecutionState;
use keel_actors::ids::ToolId;
use serde_json::{Value, json};

const EXECUTION: &str = "01JBENCH000000000000000000";

fn event(sequence: i64, step: Option<String>, kind: &str, payload: Value) -> Event {
    let mut envelope = json!({
        "id": format!("ev-{sequence}"),
        "execution_id": EXECUTION,
        "type": kind,
        "payload": payload,
        "schema_version": 1,
        "timestamp": "2026-01-01T00:00:00.000000Z",
        "causation_id": "",
        "correlation_id": "",
        "sequence": sequence,
    });
    if let Some(step) = step {
        envelope["step_id"] = json!(step);
    }
    match serde_json::from_value(envelope) {
        Ok(event) => event,
        Err(error) => panic!("bad bench event {kind}: {error}"),
    }
}

/// The arguments of call `index`: every fourth call repeats the call before it.
fn arguments(index: usize) -> Value {
    let n = if index % 4 == 3 { index - 1 } else { index };
    json!({
        "customer": { "id": format!("cus_{n:06}"), "country": "DE", "tier": "gold" },
        "amount": 1000 + n,
        "currency": "EUR",
        "lines": [ { "sku": "A-1", "qty": 2, "price": 12.5 }, { "sku": "B-7", "qty": 1, "price": 99.0 } ],
        "note": "monthly renewal",
    })
}

/// The log of a first run with `n` completed calls, then a reset: ready for a re-run.
fn recorded_log(n: usize) -> Vec<Event> {
    let mut log = Vec::new();
    let mut sequence = 0;
    let mut push = |log: &mut Vec<Event>, step: Option<String>, kind: &str, payload: Value| {
        sequence += 1;
        log.push(event(sequence, step, kind, payload));
    };
    push(
        &mut log,
        None,
        "execution.created",
        json!({ "agent_id": "bench", "input": {}, "labels": null }),
    );
    push(
        &mut log,
        None,
        "execution.started",
        json!({ "session_id": "s1", "consumer_id": "c1" }),
    );
    for index in 0..n {
        let step = format!("step-{index:06}");
        push(
            &mut log,
            Some(step.clone()),
            "step.created",
            json!({
                "tool_id": "billing.charge", "tool_version": 0, "arguments": arguments(index),
                "max_attempts": 3, "attempt": 1, "deadline": "2026-01-01T01:00:00.000000Z", "remote": true,
            }),
        );
        push(
            &mut log,
            Some(step.clone()),
            "step.dispatched",
            json!({
                "runner_id": "r", "job_id": format!("job-{index}"), "deadline": "2026-01-01T01:00:00.000000Z",
            }),
        );
        push(
            &mut log,
            Some(step),
            "step.completed",
            json!({ "result": { "charged": true, "n": index } }),
        );
    }
    push(
        &mut log,
        None,
        "agent.timeout",
        json!({ "session_id": "s1" }),
    );
    push(
        &mut log,
        None,
        "execution.reset",
        json!({ "reason": "agent_disconnect", "from_status": "running" }),
    );
    log
}

/// One re-run: the journal is built and each of the `n` calls matched; returns the replays.
fn rerun(state: &mut ExecutionState, started: &Event, tool: &ToolId, calls: &[Value]) -> usize {
    state.apply(started);
    let Some(journal) = state.journal.as_mut() else {
        panic!("the re-run has no journal");
    };
    let mut replayed = 0;
    for arguments in calls {
        if journal.lookup(tool, arguments).is_some() {
            replayed += 1;
        }
        journal.saw(tool, arguments);
    }
    replayed
}

fn main() {
    let tool = ToolId::new("billing.charge");
    println!("journal matching cost per replayed step (build + lookup + saw), release build");
    for n in [10_usize, 100, 1000] {
        let log = recorded_log(n);
        let Some(base) = ExecutionState::from_events(&log) else {
            panic!("the bench log does not start with execution.created");
        };
        let started = event(
            log.len() as i64 + 1,
            None,
            "execution.started",
            json!({ "session_id": "s2", "consumer_id": "c2" }),
        );
        let calls: Vec<Value> = (0..n).map(arguments).collect();
        // Warm up, and check that every call replays.
        let mut state = base.clone();
        assert_eq!(rerun(&mut state, &started, &tool, &calls), n);
        let rounds = (200_000 / n).max(20);
        let mut total = Duration::ZERO;
        for _ in 0..rounds {
            let mut state = base.clone();
            let begin = Instant::now();
            black_box(rerun(&mut state, &started, &tool, black_box(&calls)));
            total += begin.elapsed();
        }
        let per_step = total.as_secs_f64() * 1e6 / (rounds * n) as f64;
        println!("N = {n:>5}: {per_step:.2} µs per replayed step ({rounds} re-runs)");
    }
}
