use serde_json::Value;

use super::*;
use crate::ids::{ExecutionId, StepId};

#[test]
fn event_json_has_type_and_payload_side_by_side_and_round_trips() {
    let events = seal(
        &ExecutionId::new("e1"),
        3,
        crate::time::now(),
        None,
        vec![NewEvent::step(
            &StepId::new("s1"),
            EventBody::StepCompleted {
                result: serde_json::json!({"x": 1}),
                cost: None,
            },
        )],
    );
    let json = serde_json::to_value(&events[0]).expect("serializes");
    assert_eq!(json["type"], "step.completed");
    assert_eq!(json["payload"]["result"]["x"], 1);
    assert_eq!(json["sequence"], 4);
    assert_eq!(json["step_id"], "s1");
    assert!(json.get("idempotency_key").is_none());
    let back: Event = serde_json::from_value(json).expect("deserializes");
    assert_eq!(back, events[0]);
}

#[test]
fn a_batch_shares_one_correlation_and_chains_causation() {
    let bodies = vec![
        NewEvent::execution(EventBody::ExecutionResumed { reason: "a".into() }),
        NewEvent::execution(EventBody::ExecutionResumed { reason: "b".into() }),
    ];
    let events = seal(&ExecutionId::new("e"), 0, crate::time::now(), None, bodies);
    assert_eq!(events[0].causation_id, events[0].id);
    assert_eq!(events[1].causation_id, events[0].id);
    assert_eq!(events[0].correlation_id, events[1].correlation_id);
    assert_eq!((events[0].sequence, events[1].sequence), (1, 2));
}

/// The stores keep no index on event ids (migrations 0008): their uniqueness is the kernel's,
/// every sealed event gets a fresh UUIDv7, in the order the events are sealed.
#[test]
fn every_sealed_event_gets_its_own_increasing_uuid_v7() {
    let batch = |last| {
        let bodies = (0..100)
            .map(|n| {
                NewEvent::execution(EventBody::ExecutionResumed {
                    reason: format!("{n}").into(),
                })
            })
            .collect();
        seal(
            &ExecutionId::new("e"),
            last,
            crate::time::now(),
            None,
            bodies,
        )
    };
    let ids: Vec<String> = [batch(0), batch(100)]
        .concat()
        .into_iter()
        .map(|event| event.id)
        .collect();
    for id in &ids {
        let parsed = uuid::Uuid::parse_str(id).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 7, "{id}");
    }
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, ids, "distinct and increasing");
}

#[test]
fn from_parts_rebuilds_every_body_from_its_payload() {
    let body = EventBody::StepTimedOut {};
    assert_eq!(body.payload(), serde_json::json!({}));
    let back = EventBody::from_parts("step.timed_out", body.payload()).expect("parses");
    assert_eq!(back, body);
    assert!(EventBody::from_parts("nope", Value::Null).is_err());
}
