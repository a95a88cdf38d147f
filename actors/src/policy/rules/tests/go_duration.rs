//! Durations against Go's `time.ParseDuration`: the valid and invalid inputs of Go's own
//! `time_test.go` tables with the values Go gives them, then the policy's and the flags' rules
//! on top (policy durations must be positive, flag durations not negative).

use std::time::Duration;

use crate::policy::rules::{parse_duration, parse_go_duration, parse_non_negative_duration};

const NS: i64 = 1;
const US: i64 = 1_000 * NS;
const MS: i64 = 1_000 * US;
const S: i64 = 1_000 * MS;
const M: i64 = 60 * S;
const H: i64 = 60 * M;

#[test]
fn go_valid_durations_parse_to_the_same_nanoseconds() {
    let cases = [
        ("0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0", 0),
        ("+0", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        (".5s", 500 * MS),
        ("1.0s", S),
        ("1.00s", S),
        ("1.004s", S + 4 * MS),
        ("1.0040s", S + 4 * MS),
        ("100.00100s", 100 * S + MS),
        ("10ns", 10 * NS),
        ("11us", 11 * US),
        ("12\u{b5}s", 12 * US),
        ("12\u{3bc}s", 12 * US),
        ("13ms", 13 * MS),
        ("14s", 14 * S),
        ("15m", 15 * M),
        ("16h", 16 * H),
        ("3h30m", 3 * H + 30 * M),
        ("10.5s4m", 4 * M + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
        (
            "1h2m3s4ms5us6ns",
            H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS,
        ),
        ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
        ("52763797000ns", 52_763_797_000 * NS),
        ("0.3333333333333333333h", 20 * M),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", i64::MAX),
        ("9223372036854775.807us", i64::MAX),
        ("9223372036s854ms775us807ns", i64::MAX),
        ("-9223372036854775808ns", i64::MIN),
        ("-9223372036854775.808us", i64::MIN),
        ("-9223372036s854ms775us808ns", i64::MIN),
        ("-2562047h47m16.854775808s", i64::MIN),
        ("0.100000000000000000000h", 6 * M),
        (
            "0.830103483285477580700h",
            49 * M + 48 * S + 372_539_827 * NS,
        ),
        // The forms the issue and the documentation use.
        ("1m30s", 90 * S),
        ("1.5h", 90 * M),
        ("300ms", 300 * MS),
        ("2h45m", 2 * H + 45 * M),
        ("1s1s", 2 * S),
        ("30m1h", H + 30 * M),
    ];
    for (text, nanos) in cases {
        assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
    }
}

#[test]
fn go_invalid_durations_are_refused_with_a_reason() {
    let cases = [
        ("", "expected numbers with units"),
        ("3", "has no unit"),
        ("-", "expected numbers with units"),
        ("s", "expected numbers with units"),
        (".", "expected numbers with units"),
        ("-.", "expected numbers with units"),
        (".s", "expected numbers with units"),
        ("+.s", "expected numbers with units"),
        ("1d", "unknown unit `d`"),
        ("\u{85}\u{85}", "expected numbers with units"),
        ("\u{fffd}", "expected numbers with units"),
        ("9223372036854775810ns", "too large"),
        ("9223372036854775808ns", "too large"),
        ("-9223372036854775809ns", "too large"),
        ("9223372036854776us", "too large"),
        ("3000000h", "too large"),
        ("9223372036854775.808us", "too large"),
        ("9223372036854ms775us808ns", "too large"),
        // Forms other duration parsers accept and Go does not.
        ("1h 30m", "unknown unit `h `"),
        (" 1s", "expected numbers with units"),
        ("1min", "unknown unit `min`"),
        ("2days", "unknown unit `days`"),
        ("1S", "unknown unit `S`"),
        ("1e3s", "unknown unit `e`"),
    ];
    for (text, fragment) in cases {
        let error = parse_go_duration(text).expect_err(text);
        assert!(
            error.starts_with(&format!("bad duration `{text}`: ")) && error.contains(fragment),
            "{text:?}: {error}"
        );
    }
}

#[test]
fn policy_durations_must_be_positive_and_flag_durations_not_negative() {
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("1ns"), Ok(Duration::from_nanos(1)));
    for zero_or_less in ["0", "0s", "-0", "0.0h", "-1m", "-1ns"] {
        let error = parse_duration(zero_or_less).expect_err(zero_or_less);
        assert!(error.ends_with("must be greater than zero"), "{error}");
    }
    assert_eq!(parse_non_negative_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_non_negative_duration("0s"), Ok(Duration::ZERO));
    assert_eq!(
        parse_non_negative_duration("168h"),
        Ok(Duration::from_secs(168 * 3600))
    );
    let negative = parse_non_negative_duration("-5s").unwrap_err();
    assert!(negative.ends_with("must not be negative"), "{negative}");
    assert!(parse_non_negative_duration("5 fortnights").is_err());
}
