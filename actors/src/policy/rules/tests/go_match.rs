//! Globs against Go's `path.Match`: the cases of Go's own `match_test.go` table (pattern, name,
//! expected result, and whether Go reports `ErrBadPattern`), then cases that pin down where Go
//! differs from shell globbing (`!` is literal, classes can match `/`, `]` alone is literal,
//! reversed ranges are valid) and from a backtracking matcher.

use crate::policy::rules::Glob;

/// What `path.Match` returns for a case.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Go {
    /// `(true, nil)`.
    Match,
    /// `(false, nil)`.
    NoMatch,
    /// `(false, ErrBadPattern)`: Keel refuses the pattern when it loads.
    BadPattern,
}

/// Checks one `(pattern, name, expected)` case.
fn check(pattern: &str, name: &str, expected: Go) {
    let actual = match Glob::new(pattern) {
        Err(message) => {
            assert!(
                message.starts_with(&format!("bad glob `{pattern}`: ")),
                "{pattern}: {message}"
            );
            Go::BadPattern
        }
        Ok(glob) if glob.is_match(name) => Go::Match,
        Ok(_) => Go::NoMatch,
    };
    assert_eq!(actual, expected, "path.Match({pattern:?}, {name:?})");
}

#[test]
fn the_cases_of_go_match_test_agree() {
    use Go::{BadPattern, Match, NoMatch};
    let cases = [
        ("abc", "abc", Match),
        ("*", "abc", Match),
        ("*c", "abc", Match),
        ("a*", "a", Match),
        ("a*", "abc", Match),
        ("a*", "ab/c", NoMatch),
        ("a*/b", "abc/b", Match),
        ("a*/b", "a/c/b", NoMatch),
        ("a*b*c*d*e*/f", "axbxcxdxe/f", Match),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Match),
        ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", NoMatch),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", NoMatch),
        ("a*b?c*x", "abxbbxdbxebxczzx", Match),
        ("a*b?c*x", "abxbbxdbxebxczzy", NoMatch),
        ("ab[c]", "abc", Match),
        ("ab[b-d]", "abc", Match),
        ("ab[e-g]", "abc", NoMatch),
        ("ab[^c]", "abc", NoMatch),
        ("ab[^b-d]", "abc", NoMatch),
        ("ab[^e-g]", "abc", Match),
        ("a\\*b", "a*b", Match),
        ("a\\*b", "ab", NoMatch),
        ("a?b", "a☺b", Match),
        ("a[^a]b", "a☺b", Match),
        ("a???b", "a☺b", NoMatch),
        ("a[^a][^a][^a]b", "a☺b", NoMatch),
        ("[a-ζ]*", "α", Match),
        ("*[a-ζ]", "A", NoMatch),
        ("a?b", "a/b", NoMatch),
        ("a*b", "a/b", NoMatch),
        ("[\\]a]", "]", Match),
        ("[\\-]", "-", Match),
        ("[x\\-]", "x", Match),
        ("[x\\-]", "-", Match),
        ("[x\\-]", "z", NoMatch),
        ("[\\-x]", "x", Match),
        ("[\\-x]", "-", Match),
        ("[\\-x]", "a", NoMatch),
        ("[]a]", "]", BadPattern),
        ("[-]", "-", BadPattern),
        ("[x-]", "x", BadPattern),
        ("[x-]", "-", BadPattern),
        ("[x-]", "z", BadPattern),
        ("[-x]", "x", BadPattern),
        ("[-x]", "-", BadPattern),
        ("[-x]", "a", BadPattern),
        ("\\", "a", BadPattern),
        ("[a-b-c]", "a", BadPattern),
        ("[", "a", BadPattern),
        ("[^", "a", BadPattern),
        ("[^bc", "a", BadPattern),
        ("a[", "a", BadPattern),
        ("a[", "ab", BadPattern),
        ("a[", "x", BadPattern),
        ("a/b[", "x", BadPattern),
        ("*x", "xxx", Match),
    ];
    for (pattern, name, expected) in cases {
        check(pattern, name, expected);
    }
}

#[test]
fn go_semantics_where_shell_globs_differ() {
    use Go::{BadPattern, Match, NoMatch};
    let cases = [
        // `!` is an ordinary class member; only `^` negates.
        ("[!a-c]x", "dx", NoMatch),
        ("[!a-c]x", "!x", Match),
        ("[!a-c]x", "bx", Match),
        ("[^a-c]x", "dx", Match),
        ("[^a-c]x", "ax", NoMatch),
        // A class, negated or not, can match `/`; `?` and `*` cannot.
        ("[^a]", "/", Match),
        ("a[^x]b", "a/b", Match),
        ("a[/]b", "a/b", Match),
        ("a?b", "a/b", NoMatch),
        // `]` outside a class, `{`, `}`, `-` and regex characters are literal.
        ("a]", "a]", Match),
        ("{a,b}", "{a,b}", Match),
        ("{a,b}", "a", NoMatch),
        ("(x)+$", "(x)+$", Match),
        ("a-b", "a-b", Match),
        // Stars: runs of them are one star; `*` inside a class is a member.
        ("a**b", "axxb", Match),
        ("a**b", "a/b", NoMatch),
        ("[*]", "*", Match),
        ("[*]", "a", NoMatch),
        ("*", "", Match),
        ("", "", Match),
        ("", "a", NoMatch),
        // A reversed range is valid and matches nothing.
        ("[z-a]", "m", NoMatch),
        ("[z-ab]", "b", Match),
        // Escapes, inside and outside classes.
        ("\\a", "a", Match),
        ("[\\^a]", "^", Match),
        ("[\\\\]", "\\", Match),
        ("a\\", "a", BadPattern),
        ("[a\\", "a", BadPattern),
        ("[]", "a", BadPattern),
        ("[^]", "a", BadPattern),
        // Matching is exact: case, whitespace and dots count.
        ("Shell.*", "shell.exec", NoMatch),
        ("shell.*", "shell.exec ", Match),
        ("shell.exec", "shell.exec ", NoMatch),
        ("shell.*", "shell", NoMatch),
        ("shell.*", "shellXexec", NoMatch),
        // Each chunk after a star is matched at its first fit, so a class that can match `/`
        // can use up the only `/` a later chunk needed: Go says no here, where a backtracking
        // matcher would say yes.
        ("*[^x]*b", "a/b", NoMatch),
        ("*[^x]*b", "ab", Match),
        // A star skips bytes, so it can stop inside a multi-byte character; the bytes left
        // read as U+FFFD, one byte each, as Go's decoder reads them.
        ("*??", "日", Match),
        ("??", "日", NoMatch),
        ("*[\u{fffd}]", "é", Match),
        ("[\u{fffd}]", "é", NoMatch),
        ("?", "é", Match),
    ];
    for (pattern, name, expected) in cases {
        check(pattern, name, expected);
    }
}

#[test]
fn malformed_globs_say_what_is_wrong() {
    let cases = [
        ("[", "unclosed `[`"),
        ("[abc", "unclosed `[`"),
        ("[]", "member is missing before `]`"),
        ("[a-]", "member is missing before `]`"),
        ("[-a]", "`-` in a class must be escaped"),
        ("a\\", "trailing `\\` escapes nothing"),
    ];
    for (pattern, fragment) in cases {
        let error = Glob::new(pattern).expect_err(pattern);
        assert!(
            error.starts_with(&format!("bad glob `{pattern}`: ")) && error.contains(fragment),
            "{pattern}: {error}"
        );
    }
}

#[test]
fn oddities_point_at_reversed_ranges_and_bang_classes() {
    assert!(Glob::new("tool.[a-z]*").unwrap().oddities().is_empty());
    assert!(Glob::new("[^!]").unwrap().oddities().is_empty());
    let reversed = Glob::new("t[z-a]").unwrap().oddities();
    assert_eq!(
        reversed,
        vec!["glob `t[z-a]`: range `z-a` is reversed and matches nothing".to_owned()]
    );
    let bang = Glob::new("[!a]*").unwrap().oddities();
    assert_eq!(bang.len(), 1);
    assert!(bang[0].contains("negate a class with `[^...]`"), "{bang:?}");
}
