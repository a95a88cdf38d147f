//! Table tests of the lexical pieces: durations, globs, schedules and argument predicates.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::{engine, input, rule, utc};
use crate::policy::engine::{Decision, PolicyEngine};
use crate::policy::rules::{
    ConditionDefinition, Glob, PredicateDefinition, Schedule, json_equal, parse_duration,
};

#[test]
fn durations_parse_units_largest_first() {
    let good = [
        ("500ms", 500),
        ("30s", 30_000),
        ("1m", 60_000),
        ("1h", 3_600_000),
        ("1h30m", 5_400_000),
        ("2m30s250ms", 150_250),
        ("0h5s", 5_000),
    ];
    for (text, millis) in good {
        assert_eq!(
            parse_duration(text),
            Ok(Duration::from_millis(millis)),
            "{text}"
        );
    }
    let bad = [
        ("", "empty"),
        ("0s", "greater than zero"),
        ("0h0m", "greater than zero"),
        ("10", "has no unit"),
        ("s", "whole number"),
        ("-5s", "whole number"),
        ("1.5h", "fractions"),
        ("1d", "unknown unit `d`"),
        ("1us", "unknown unit `us`"),
        ("30m1h", "largest first"),
        ("1s1s", "largest first"),
        ("1h 30m", "unknown unit `h `"),
        (" 1s", "whole number"),
        ("99999999999999999999s", "too large"),
        ("18446744073709551615h", "too large"),
    ];
    for (text, fragment) in bad {
        let error = parse_duration(text).expect_err(text);
        assert!(error.contains(fragment), "{text}: {error}");
    }
}

#[test]
fn globs_follow_path_match_semantics() {
    let cases = [
        ("shell.*", "shell.exec", true),
        ("shell.*", "shell.", true),
        ("shell.*", "shell", false),
        ("shell.*", "shellXexec", false),
        ("shell.*", "shell.a/b", false),
        ("*", "", true),
        ("*", "a/b", false),
        ("*/*", "github/create", true),
        ("github/*", "github/create_issue", true),
        ("github/*", "github/a/b", false),
        ("a**b", "axxb", true),
        ("a**b", "a/b", false),
        ("?", "a", true),
        ("?", "é", true),
        ("?", "/", false),
        ("?", "", false),
        ("a?c", "abc", true),
        ("a?c", "abbc", false),
        ("[abc]x", "bx", true),
        ("[a-c]x", "dx", false),
        ("[!a-c]x", "dx", true),
        ("[^a-c]x", "ax", false),
        ("[!a]", "/", false),
        ("[é-ë]", "ê", true),
        (r"\*", "*", true),
        (r"\*", "a", false),
        (r"a\[b", "a[b", true),
        (r"[\]]", "]", true),
        (r"[\-]", "-", true),
        ("{a,b}", "{a,b}", true),
        ("{a,b}", "a", false),
        ("shell.exec", "shell.exec", true),
        ("shell.exec", "xshell.exec", false),
        ("(x)+$", "(x)+$", true),
    ];
    for (pattern, text, expected) in cases {
        let glob = Glob::new(pattern).unwrap_or_else(|error| panic!("{pattern}: {error}"));
        assert_eq!(glob.is_match(text), expected, "{pattern} ~ {text}");
        assert_eq!(glob.as_str(), pattern);
    }
}

#[test]
fn malformed_globs_are_rejected() {
    let cases = [
        ("[", "unclosed `[`"),
        ("[abc", "unclosed `[`"),
        ("[]", "empty class"),
        ("[!]", "empty class"),
        ("[z-a]", "reversed"),
        ("[a-]", "no end"),
        ("[-a]", "bare `-`"),
        ("a\\", "escapes nothing"),
        ("a]", "unmatched `]`"),
    ];
    for (pattern, fragment) in cases {
        let error = Glob::new(pattern).expect_err(pattern);
        assert!(
            error.contains(fragment) && error.contains(pattern),
            "{pattern}: {error}"
        );
    }
}

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
        ("non-object arguments fail", &length, json!(["f"]), false),
        ("null arguments fail", &length, Value::Null, false),
        ("string arguments fail", &length, json!("f"), false),
    ];
    for (name, predicate, arguments, expected) in cases {
        let when = ConditionDefinition {
            arguments: Some(BTreeMap::from([("f".to_owned(), predicate.clone())])),
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
