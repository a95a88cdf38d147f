//! `pattern` regexes against Go's `regexp`: a table of patterns and inputs with the result Go's
//! `MatchString` gives, run through a compiled policy. The cases pin the places where the Rust
//! `regex` crate reads the same text differently: ASCII-only Perl classes and word boundaries,
//! `\Q...\E`, and characters that are literal inside a Go bracket class.

use serde_json::json;

use super::{engine, input, rule};
use crate::policy::engine::{Decision, PolicyEngine};
use crate::policy::rules::go_regex;
use crate::policy::rules::{ArgumentsDefinition, ConditionDefinition, PredicateDefinition};

/// Returns whether a policy whose only rule has `pattern` on field `f` matches `value`.
fn policy_matches(pattern: &str, value: &str) -> bool {
    let when = ConditionDefinition {
        arguments: Some(ArgumentsDefinition::mapping([(
            "f".to_owned(),
            PredicateDefinition {
                pattern: Some(pattern.to_owned()),
                ..Default::default()
            },
        )])),
        ..Default::default()
    };
    let policy = engine(vec![rule("r", 1, when, Decision::Allow)]);
    let mut case_input = input("t");
    case_input.arguments = json!({ "f": value });
    policy.evaluate(&case_input).rule_id == "r"
}

#[test]
fn patterns_match_as_go_regexp_matches() {
    let cases: &[(&str, &str, bool)] = &[
        // Perl classes are ASCII in Go.
        (r"^\d+$", "123", true),
        (r"^\d+$", "١٢٣", false),
        (r"^\d+$", "12a", false),
        (r"^\D+$", "١٢٣", true),
        (r"^\D$", "7", false),
        (r"^\w+$", "a_Z9", true),
        (r"^\w+$", "é", false),
        (r"^\W$", "é", true),
        (r"^\W$", "_", false),
        (r"\s", "a b", true),
        (r"\s", "\t", true),
        (r"\s", "\u{a0}", false),
        (r"\s", "\u{0b}", false),
        (r"\s", "\u{2003}", false),
        (r"^\S$", "\u{a0}", true),
        (r"^\S$", "\u{0c}", false),
        // Word boundaries are ASCII: `é` is not a word character.
        (r"\bfoo\b", "a foo b", true),
        (r"\bfoo\b", "éfooé", true),
        (r"\bfoo\b", "xfoo", false),
        (r"\Bfoo", "xfoo", true),
        (r"\Bfoo", "éfoo", false),
        // Perl classes inside a bracket class, plain and negated.
        (r"^[\d]+$", "123", true),
        (r"^[\d]+$", "١", false),
        (r"^[^\d]+$", "١", true),
        (r"^[\D]$", "a", true),
        (r"^[\D]$", "١", true),
        (r"^[\D]$", "1", false),
        (r"^[^\D]$", "1", true),
        (r"^[^\D]$", "١", false),
        (r"^[\w-]+$", "a-b_c", true),
        (r"^[\w-]+$", "é", false),
        (r"^[\s]$", "\u{a0}", false),
        (r"^[x\S]$", "\u{a0}", true),
        (r"^[[:digit:]]+$", "12", true),
        (r"^[[:digit:]]+$", "١", false),
        // Unicode classes stay Unicode.
        (r"^\pN+$", "١٢٣", true),
        (r"^[\p{Greek}\d]+$", "α1", true),
        // An escaped backslash hides the letter after it.
        (r"^\\d$", r"\d", true),
        (r"^\\d$", "1", false),
        (r"^\\\d$", r"\1", true),
        (r"^[\\d]+$", r"d\", true),
        (r"^[\\d]+$", "1", false),
        // `]` first in a class is literal; `[`, `&&`, `~~`, `--` in a class are literal in Go.
        (r"^[]a]+$", "]a", true),
        (r"^[^]a]$", "b", true),
        (r"^[^]a]$", "]", false),
        (r"^[a[]+$", "a[", true),
        (r"^[a[b]c]$", "bc]", true),
        (r"^[a&&b]+$", "&ab", true),
        (r"^[a~~b]+$", "~", true),
        (r"^[+--]+$", ",", true),
        (r"^[\x41-\x43]+$", "ABC", true),
        // `\Q...\E` quotes literal text, up to `\E` or the end.
        (r"^\Qa.b\E$", "a.b", true),
        (r"^\Qa.b\E$", "axb", false),
        (r"^\Q[\d]", r"[\d]", true),
        (r"^\Qab\E+$", "abbb", true),
    ];
    for &(pattern, value, expected) in cases {
        assert_eq!(
            policy_matches(pattern, value),
            expected,
            "regexp.MatchString({pattern:?}, {value:?})"
        );
    }
}

#[test]
fn patterns_go_refuses_stay_refused() {
    for pattern in [r"[a", r"a\", r"(a)\1", r"[a-\d]", r"\Qa\E*\E", r"\012"] {
        assert!(
            go_regex::compile(pattern, 1 << 20).is_err(),
            "{pattern:?} loaded, but Go refuses it"
        );
    }
}
