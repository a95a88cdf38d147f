//! YAML edge cases of the policy loader, pinned so that a change of YAML parser shows up:
//! duplicate keys, anchors and aliases, merge keys, several documents, empty documents, and
//! how plain and quoted scalars (`10` / `"10"`, `yes`, `no`, `on`, `~`) are read.

use serde_json::json;

use keel_actors::policy::Decision;

use super::{call, decide, load_text};

/// Loads `text` and returns its report, which must be refused.
fn refused(text: &str) -> (std::path::PathBuf, String) {
    let (_dir, path, result) = load_text(text);
    match result {
        Ok(_) => panic!("loaded:\n{text}"),
        Err(errors) => (path, errors.to_string()),
    }
}

/// Asserts that the report of `text` is exactly one problem at `line` containing `fragment`.
fn assert_one_problem(text: &str, line: usize, fragment: &str) {
    let (path, report) = refused(text);
    let prefix = format!("{}:{line}: ", path.display());
    assert_eq!(report.lines().count(), 1, "{report}");
    assert!(
        report.starts_with(&prefix) && report.contains(fragment),
        "expected `{prefix}...{fragment}`, got:\n{report}"
    );
}

const THEN: &str = "  then: {decision: allow}\n";

#[test]
fn a_duplicate_key_is_an_error_at_any_depth() {
    assert_one_problem(
        "rules: []\ndefault: {decision: deny}\ndefault: {decision: allow}\n",
        1,
        "duplicate entry with key \"default\"",
    );
    assert_one_problem(
        &format!("rules:\n- id: a\n  priority: 1\n  priority: 2\n  when: {{}}\n{THEN}"),
        2,
        "duplicate entry with key \"priority\"",
    );
    assert_one_problem(
        &format!("rules:\n- id: a\n  priority: 1\n  when: {{tool_id: x, tool_id: y}}\n{THEN}"),
        4,
        "duplicate entry with key \"tool_id\"",
    );
}

#[test]
fn anchors_and_aliases_are_expanded() {
    let text = "\
rules:
- id: web-read
  priority: 1
  when: &web {tool_id: 'web.*'}
  then: {decision: allow, reason: &why shared reason}
- id: web-other
  priority: 2
  when: *web
  then: {decision: deny, reason: *why}
";
    let (_dir, _path, result) = load_text(text);
    let loaded = result.unwrap();
    assert_eq!(
        decide(&loaded, &call("a", "web.get", json!({}))),
        (Decision::Allow, "web-read".into())
    );
    let other = loaded.engine.evaluate(&call("a", "db.get", json!({})));
    assert_eq!(other.rule_id, "default");
}

#[test]
fn an_alias_to_an_unknown_anchor_is_an_error_with_its_line() {
    assert_one_problem(
        &format!("rules:\n- id: a\n  priority: 1\n  when: *nowhere\n{THEN}"),
        4,
        "unknown anchor",
    );
}

#[test]
fn a_merge_key_is_not_expanded_and_is_an_unknown_field() {
    let text = "\
rules:
- &base
  id: a
  priority: 1
  when: {}
  then: {decision: allow}
- <<: *base
  id: b
  priority: 2
";
    assert_one_problem(text, 7, "rules[1]: unknown field `<<`");
}

#[test]
fn a_file_of_several_documents_is_refused_at_the_second_one() {
    assert_one_problem("rules: []\n---\nrules: []\n", 2, "more than one document");
    assert_one_problem(
        "# leading comment\n---\nrules: []\n...\n---\nrules: []\n",
        5,
        "more than one document",
    );
    assert_one_problem(
        "rules: []\n...\n# the next one\nrules: []\n",
        4,
        "more than one document",
    );
    // A document start marker before the only document is fine.
    let (_dir, _path, result) = load_text("---\nrules: []\n");
    result.unwrap();
}

#[test]
fn an_empty_document_is_reported_as_an_empty_file() {
    for text in ["", "\n\n", "# only\n# comments\n", "---\n", "~\n", "null\n"] {
        assert_one_problem(text, 1, "policy file is empty");
    }
    assert_one_problem("{}\n", 1, "missing field `rules`");
    // `rules:` with no value is an empty list, as in the reference kernel (a null slice).
    let (_dir, _path, result) = load_text("rules:\n");
    assert_eq!(
        decide(&result.unwrap(), &call("a", "t", json!({}))),
        (Decision::Deny, "default".into())
    );
}

#[test]
fn quoted_numbers_are_strings_and_numbers_are_not_booleans() {
    // `"10"` is a string: an integer field refuses it, as the reference kernel does.
    assert_one_problem(
        &format!("rules:\n- id: a\n  priority: \"10\"\n  when: {{}}\n{THEN}"),
        3,
        "rules[0].priority: invalid type: string \"10\", expected i64",
    );
    assert_one_problem(
        "rules:\n- id: a\n  priority: 1\n  when: {}\n  then: {decision: allow, timeout_ms: '5000'}\n",
        5,
        "rules[0].then.timeout_ms: invalid type: string \"5000\", expected i64",
    );
    assert_one_problem(
        &format!(
            "rules:\n- id: a\n  priority: 1\n  when:\n    arguments:\n      - field: n\n        max: \"30\"\n{THEN}"
        ),
        7,
        "rules[0].when.arguments[0].max: invalid type: string \"30\", expected f64",
    );
    assert_one_problem(
        &format!("rules:\n- id: a\n  priority: 1.0\n  when: {{}}\n{THEN}"),
        3,
        "invalid type: floating point `1.0`, expected i64",
    );
    // YAML 1.2: `yes`, `no` and `on` are strings, not booleans.
    assert_one_problem(
        &format!(
            "rules:\n- id: a\n  priority: 1\n  when:\n    arguments:\n      - field: n\n        required: yes\n{THEN}"
        ),
        7,
        "rules[0].when.arguments[0].required: invalid type: string \"yes\", expected a boolean",
    );
}

#[test]
fn plain_scalars_are_read_as_text_where_text_is_expected() {
    let text = "\
rules:
- id: 10
  priority: 0x10
  when:
    tool_id: on
    labels: {tier: 1, paid: yes}
    arguments:
      - field: mode
        one_of: [yes, no, 1, 1.5, null]
  then: {decision: deny, reason: no}
";
    let (_dir, _path, result) = load_text(text);
    let loaded = result.unwrap();
    let mut input = call("a", "on", json!({"mode": "null"}));
    input.labels.insert("tier".into(), "1".into());
    input.labels.insert("paid".into(), "yes".into());
    let decided = loaded.engine.evaluate(&input);
    assert_eq!(
        (
            decided.decision,
            decided.rule_id.as_str(),
            decided.reason.as_str()
        ),
        (Decision::Deny, "10", "no")
    );
    for mode in ["yes", "no", "1", "1.5"] {
        input.arguments = json!({ "mode": mode });
        assert_eq!(decide(&loaded, &input).1, "10", "{mode}");
    }
    // `one_of` of the reference form compares strings: the number 1 is not `"1"`.
    input.arguments = json!({"mode": 1});
    assert_eq!(decide(&loaded, &input).1, "default");
    // The priority was read as hexadecimal 16: a rule at 16 collides with it.
    let (path, report) = refused(&format!(
        "rules:\n- id: a\n  priority: 0x10\n  when: {{}}\n{THEN}- id: b\n  priority: 16\n  when: {{}}\n{THEN}"
    ));
    assert!(
        report.starts_with(&format!(
            "{}:7: rule `b`: duplicate priority 16 (first defined at line 3)",
            path.display()
        )),
        "{report}"
    );
}
