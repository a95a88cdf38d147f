//! Table tests of the lexical pieces: schedules and argument predicates. Durations and globs,
//! which follow Go, are in `go_duration.rs` and `go_match.rs`.

use serde_json::{Value, json};

use super::{engine, input, rule, utc};
use crate::policy::engine::{Decision, PolicyEngine};
use crate::policy::rules::{
    ArgumentsDefinition, ConditionDefinition, PredicateDefinition, Schedule, json_equal,
};

#[test]
fn schedules_handle_wrapping_days_overnight_windows_and_dst() {
    let cases = [
        // New York business hours, before and after the 2025-03-09 spring-forward.
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-07T14:00:00Z",
            true,
        ),
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-07T13:59:59Z",
            false,
        ),
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-10T13:00:00Z",
            true,
        ),
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-10T12:59:59Z",
            false,
        ),
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-10T20:59:59Z",
            true,
        ),
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-10T21:00:00Z",
            false,
        ),
        (
            "Mon-Fri 09:00-17:00 America/New_York",
            "2025-03-08T15:00:00Z",
            false,
        ),
        // The skipped hour of spring-forward never matches; the end stays exclusive.
        (
            "Sun 01:00-03:00 America/New_York",
            "2025-03-09T06:59:59Z",
            true,
        ),
        (
            "Sun 01:00-03:00 America/New_York",
            "2025-03-09T07:00:00Z",
            false,
        ),
        (
            "Sun 02:00-03:00 America/New_York",
            "2025-03-09T06:59:59Z",
            false,
        ),
        (
            "Sun 02:00-03:00 America/New_York",
            "2025-03-09T07:00:00Z",
            false,
        ),
        // The repeated hour of fall-back (2025-11-02) matches both times.
        (
            "Sun 01:00-02:00 America/New_York",
            "2025-11-02T05:30:00Z",
            true,
        ),
        (
            "Sun 01:00-02:00 America/New_York",
            "2025-11-02T06:30:00Z",
            true,
        ),
        (
            "Sun 01:00-02:00 America/New_York",
            "2025-11-02T07:00:00Z",
            false,
        ),
        // Berlin: spring-forward 2025-03-30, fall-back 2025-10-26.
        (
            "Mon-Fri 09:00-17:00 Europe/Berlin",
            "2025-03-28T08:00:00Z",
            true,
        ),
        (
            "Mon-Fri 09:00-17:00 Europe/Berlin",
            "2025-03-28T07:59:59Z",
            false,
        ),
        (
            "Mon-Fri 09:00-17:00 Europe/Berlin",
            "2025-03-31T07:00:00Z",
            true,
        ),
        (
            "Mon-Fri 09:00-17:00 Europe/Berlin",
            "2025-03-31T06:59:59Z",
            false,
        ),
        (
            "Sun 02:00-03:00 Europe/Berlin",
            "2025-03-30T00:59:59Z",
            false,
        ),
        (
            "Sun 02:00-03:00 Europe/Berlin",
            "2025-03-30T01:00:00Z",
            false,
        ),
        (
            "Sun 02:00-03:00 Europe/Berlin",
            "2025-10-26T00:30:00Z",
            true,
        ),
        (
            "Sun 02:00-03:00 Europe/Berlin",
            "2025-10-26T01:30:00Z",
            true,
        ),
        (
            "Sun 02:00-03:00 Europe/Berlin",
            "2025-10-26T02:00:00Z",
            false,
        ),
        // Day ranges that wrap over the weekend, and lists (2025-03-10 is a Monday).
        ("Fri-Mon 10:00-11:00 UTC", "2025-03-07T10:30:00Z", true),
        ("Fri-Mon 10:00-11:00 UTC", "2025-03-08T10:30:00Z", true),
        ("Fri-Mon 10:00-11:00 UTC", "2025-03-09T10:30:00Z", true),
        ("Fri-Mon 10:00-11:00 UTC", "2025-03-10T10:30:00Z", true),
        ("Fri-Mon 10:00-11:00 UTC", "2025-03-11T10:30:00Z", false),
        ("Fri-Mon 10:00-11:00 UTC", "2025-03-06T10:30:00Z", false),
        ("Mon,Wed,Fri 00:00-24:00 UTC", "2025-03-10T23:59:59Z", true),
        ("Mon,Wed,Fri 00:00-24:00 UTC", "2025-03-11T12:00:00Z", false),
        ("mon,WED,fri 00:00-24:00 UTC", "2025-03-12T12:00:00Z", true),
        ("Mon-Tue,Fri 00:00-24:00 UTC", "2025-03-14T00:00:00Z", true),
        // Overnight windows belong to the day they start on.
        ("Fri 22:00-06:00 UTC", "2025-03-07T22:00:00Z", true),
        ("Fri 22:00-06:00 UTC", "2025-03-07T21:59:59Z", false),
        ("Fri 22:00-06:00 UTC", "2025-03-08T05:59:59Z", true),
        ("Fri 22:00-06:00 UTC", "2025-03-08T06:00:00Z", false),
        ("Fri 22:00-06:00 UTC", "2025-03-07T05:00:00Z", false),
        ("Fri 22:00-06:00 UTC", "2025-03-08T22:30:00Z", false),
        ("Mon-Fri 22:00-06:00 UTC", "2025-03-10T03:00:00Z", false),
        ("Mon-Fri 22:00-06:00 UTC", "2025-03-11T03:00:00Z", true),
        ("Mon-Fri 22:00-06:00 UTC", "2025-03-08T03:00:00Z", true),
        ("Mon-Fri 22:00-06:00 UTC", "2025-03-09T03:00:00Z", false),
        ("Sun 22:00-06:00 UTC", "2025-03-10T01:00:00Z", true),
        // Overnight across the New York spring-forward: ends at 06:00 EDT.
        (
            "Sat 22:00-06:00 America/New_York",
            "2025-03-09T09:59:59Z",
            true,
        ),
        (
            "Sat 22:00-06:00 America/New_York",
            "2025-03-09T10:00:00Z",
            false,
        ),
    ];
    for (text, instant, expected) in cases {
        let schedule = Schedule::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        assert_eq!(
            schedule.contains(&utc(instant)),
            expected,
            "{text} at {instant}"
        );
    }
}

#[test]
fn bad_schedules_are_rejected() {
    let cases = [
        ("", "expected `<days> <HH:MM>-<HH:MM> <IANA zone>`"),
        ("Mon-Fri 09:00-17:00", "expected `<days>"),
        ("Mon-Fri 09:00-17:00 UTC extra", "expected `<days>"),
        ("Mon-Fri 9:00-17:00 UTC", "bad time `9:00`"),
        ("Mon-Fri 09:00-17:60 UTC", "bad time `17:60`"),
        ("Mon-Fri 09:00-24:01 UTC", "bad time `24:01`"),
        ("Mon-Fri 09:00 UTC", "bad time range"),
        (
            "Mon-Fri 09:00-17:00 Mars/Base",
            "unknown time zone `Mars/Base`",
        ),
        ("Mon-Mon 09:00-10:00 UTC", "same day"),
        ("Mon,Mon 09:00-10:00 UTC", "names a day twice"),
        ("Mon-Wed,Tue 09:00-10:00 UTC", "names a day twice"),
        ("Funday 09:00-10:00 UTC", "unknown day `Funday`"),
        ("Monday 09:00-10:00 UTC", "unknown day `Monday`"),
        ("Mon, 09:00-10:00 UTC", "unknown day ``"),
        ("Mon 24:00-01:00 UTC", "cannot start at 24:00"),
        ("Mon 10:00-10:00 UTC", "is empty"),
    ];
    for (text, fragment) in cases {
        let error = Schedule::parse(text).expect_err(text);
        assert!(error.contains(fragment), "{text}: {error}");
    }
}

#[test]
fn argument_predicates_check_values_types_and_presence() {
    let pattern = PredicateDefinition {
        pattern: Some("^ls( |$)".into()),
        ..Default::default()
    };
    let length = PredicateDefinition {
        max_length: Some(3),
        ..Default::default()
    };
    let range = PredicateDefinition {
        min: Some(1.0),
        max: Some(10.0),
        ..Default::default()
    };
    let choice = PredicateDefinition {
        one_of: Some(vec![
            json!(1),
            json!("a"),
            json!(true),
            json!([1, {"k": 2}]),
        ]),
        ..Default::default()
    };
    let required = PredicateDefinition {
        required: Some(true),
        ..Default::default()
    };
    let cases: Vec<(&str, &PredicateDefinition, Value, bool)> = vec![
        ("pattern hit", &pattern, json!({"f": "ls -la"}), true),
        ("pattern miss", &pattern, json!({"f": "rm -rf /"}), false),
        ("pattern needs a string", &pattern, json!({"f": 5}), false),
        ("pattern on null", &pattern, json!({"f": null}), false),
        ("absent field passes", &pattern, json!({"g": "rm"}), true),
        ("max_length ascii", &length, json!({"f": "abc"}), true),
        ("max_length over", &length, json!({"f": "abcd"}), false),
        (
            "max_length counts characters not bytes",
            &length,
            json!({"f": "äöü"}),
            true,
        ),
        ("max_length cjk", &length, json!({"f": "日本語"}), true),
        (
            "max_length cjk over",
            &length,
            json!({"f": "日本語x"}),
            false,
        ),
        ("max_length emoji", &length, json!({"f": "👍👍👍"}), true),
        (
            "max_length needs a string",
            &length,
            json!({"f": 123}),
            false,
        ),
        ("min inclusive", &range, json!({"f": 1}), true),
        ("max inclusive", &range, json!({"f": 10.0}), true),
        ("below min", &range, json!({"f": 0.5}), false),
        ("above max", &range, json!({"f": 11}), false),
        ("min needs a number", &range, json!({"f": "5"}), false),
        ("min on bool", &range, json!({"f": true}), false),
        ("one_of number by value", &choice, json!({"f": 1.0}), true),
        ("one_of string", &choice, json!({"f": "a"}), true),
        ("one_of bool", &choice, json!({"f": true}), true),
        (
            "one_of nested",
            &choice,
            json!({"f": [1.0, {"k": 2}]}),
            true,
        ),
        ("one_of miss", &choice, json!({"f": 2}), false),
        (
            "one_of keeps types apart",
            &choice,
            json!({"f": "1"}),
            false,
        ),
        ("required absent", &required, json!({}), false),
        ("required present null", &required, json!({"f": null}), true),
        (
            "required refuses the empty string",
            &required,
            json!({"f": ""}),
            false,
        ),
        (
            "required accepts a space",
            &required,
            json!({"f": " "}),
            true,
        ),
        ("required accepts zero", &required, json!({"f": 0}), true),
        ("non-object arguments fail", &length, json!(["f"]), false),
        ("null arguments fail", &length, Value::Null, false),
        ("string arguments fail", &length, json!("f"), false),
    ];
    for (name, predicate, arguments, expected) in cases {
        let when = ConditionDefinition {
            arguments: Some(ArgumentsDefinition::mapping([(
                "f".to_owned(),
                predicate.clone(),
            )])),
            ..Default::default()
        };
        let policy = engine(vec![rule("r", 1, when, Decision::Allow)]);
        let mut case_input = input("t");
        case_input.arguments = arguments;
        assert_eq!(
            policy.evaluate(&case_input).rule_id == "r",
            expected,
            "case: {name}"
        );
    }
}

#[test]
fn json_equality_compares_numbers_by_value() {
    assert!(json_equal(&json!(1), &json!(1.0)));
    assert!(json_equal(&json!(u64::MAX), &json!(u64::MAX)));
    assert!(!json_equal(&json!(-1), &json!(u64::MAX)));
    assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    assert!(!json_equal(&json!([1]), &json!([1, 1])));
    assert!(json_equal(&json!(null), &json!(null)));
}
