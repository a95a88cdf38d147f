//! Tests of policy loading: every load error names file and line, all problems of a file are
//! reported, warnings, digests, the commands, and every example under `policies/`. Directory
//! mode is in `tests/directory.rs`, the reference-form and refused-file corpora in
//! `tests/corpus.rs`, the examples of docs/policy.md in `tests/docs.rs`.

mod approval;
mod corpus;
mod directory;
mod docs;
mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use keel_actors::policy::{Decision, PolicyDecision, PolicyInput};

use super::*;

/// Writes `text` to `dir/name` and returns the path.
pub(super) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Loads `text` as a single policy file.
fn load_text(
    text: &str,
) -> (
    tempfile::TempDir,
    PathBuf,
    Result<LoadedPolicy, PolicyLoadErrors>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "policy.yaml", text);
    let result = load_path(&path);
    (dir, path, result)
}

/// Returns an input for one tool call on a Wednesday noon UTC.
pub(super) fn call(agent: &str, tool: &str, arguments: Value) -> PolicyInput {
    PolicyInput {
        created_by: None,
        on_behalf_of: None,
        action: "tool.invoke".to_owned(),
        agent_id: agent.into(),
        tool_id: tool.into(),
        execution_id: "e".into(),
        labels: BTreeMap::new(),
        arguments,
        step_count: 0,
        duration_ms: 0,
        usage: Default::default(),
        now: chrono::DateTime::parse_from_rfc3339("2025-03-12T12:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    }
}

/// Evaluates a call and returns `(decision, rule id)`.
pub(super) fn decide(loaded: &LoadedPolicy, input: &PolicyInput) -> (Decision, String) {
    let PolicyDecision {
        decision, rule_id, ..
    } = loaded.engine.evaluate(input);
    (decision, rule_id)
}

#[test]
fn every_load_error_names_file_line_and_problem() {
    let ok_then = "  then: {decision: allow}\n";
    let cases: Vec<(&str, String, usize, &str)> = vec![
        ("unknown top-level key", "rules: []\nextra: 1\n".into(), 2, "unknown field `extra`"),
        ("unknown rule key", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  colour: red\n"), 6, "unknown field `colour`"),
        ("unknown when key", format!("rules:\n- id: r\n  priority: 1\n  when:\n    tool: x\n{ok_then}"), 5, "unknown field `tool`"),
        ("unknown predicate key", format!("rules:\n- id: r\n  priority: 1\n  when:\n    arguments:\n      cmd: {{regex: x}}\n{ok_then}"), 6, "unknown field `regex`"),
        ("unknown then key", "rules:\n- id: r\n  priority: 1\n  when: {}\n  then:\n    decision: allow\n    why: x\n".into(), 7, "unknown field `why`"),
        ("unknown rate_limit key", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  rate_limit:\n    max: 1\n    window: 1m\n    burst: 2\n"), 9, "unknown field `burst`"),
        ("unknown retry key", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  retry: {{max_attempts: 2, base_delay: 1s, max_delay: 2s, jitter: true}}\n"), 6, "unknown field `jitter`"),
        ("unknown default key", "rules: []\ndefault:\n  decision: deny\n  message: no\n".into(), 4, "unknown field `message`"),
        ("wrong type", format!("rules:\n- id: r\n  priority: high\n  when: {{}}\n{ok_then}"), 3, "expected i64"),
        ("wrong type in predicate", format!("rules:\n- id: r\n  priority: 1\n  when:\n    arguments:\n      n: {{min: ten}}\n{ok_then}"), 6, "expected f64"),
        ("bad decision", "rules:\n- id: r\n  priority: 1\n  when: {}\n  then:\n    decision: alow\n".into(), 6, "unknown variant `alow`"),
        ("bad default decision", "rules: []\ndefault:\n  decision: maybe\n".into(), 3, "unknown variant `maybe`"),
        ("missing then", "rules:\n- id: r\n  priority: 1\n  when: {}\n".into(), 2, "missing field `then`"),
        ("missing id", format!("rules:\n- priority: 1\n  when: {{}}\n{ok_then}"), 2, "missing field `id`"),
        ("rules not a list", "rules: {}\n".into(), 1, "expected a sequence"),
        ("empty file", String::new(), 1, "policy file is empty"),
        ("comments only", "# nothing\n# here\n".into(), 1, "policy file is empty"),
        ("top level not a mapping", "- a\n- b\n".into(), 1, "top level must be a mapping"),
        ("yaml syntax", "rules: [\n".into(), 2, "did not find expected node content"),
        ("duplicate key", "rules: []\nrules: []\n".into(), 1, "duplicate entry with key \"rules\""),
        ("duplicate id", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}- id: r\n  priority: 2\n  when: {{}}\n{ok_then}"), 6, "duplicate rule id `r` (first defined at line 2)"),
        ("duplicate priority", format!("rules:\n- id: a\n  priority: 7\n  when: {{}}\n{ok_then}- id: b\n  priority: 7\n  when: {{}}\n{ok_then}"), 7, "rule `b`: duplicate priority 7 (first defined at line 3)"),
        ("empty id", format!("rules:\n- id: ''\n  priority: 1\n  when: {{}}\n{ok_then}"), 2, "id must not be empty"),
        ("bad regex", format!("rules:\n- id: r\n  priority: 1\n  when:\n    arguments:\n      cmd:\n        pattern: '^(ls$'\n{ok_then}"), 7, "rule `r`: when.arguments.cmd.pattern: bad regex"),
        ("bad schedule", format!("rules:\n- id: r\n  priority: 1\n  when:\n    schedule: Mon-Fri 9-5\n{ok_then}"), 5, "rule `r`: when.schedule: bad schedule `Mon-Fri 9-5`"),
        ("unknown zone", format!("rules:\n- id: r\n  priority: 1\n  when:\n    schedule: Mon 09:00-10:00 Europe/Gotham\n{ok_then}"), 5, "unknown time zone `Europe/Gotham`"),
        ("bad window", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  rate_limit:\n    max: 5\n    window: 1x\n"), 8, "rule `r`: rate_limit.window: bad duration `1x`"),
        ("zero window", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  rate_limit:\n    max: 5\n    window: 0s\n"), 8, "must be greater than zero"),
        ("zero rate", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  rate_limit:\n    max: 0\n    window: 1s\n"), 7, "rate_limit.max must be between 1"),
        ("retry delays reversed", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  retry:\n    max_attempts: 3\n    base_delay: 1m\n    max_delay: 1s\n"), 8, "longer than retry.max_delay"),
        ("bad retry delay", format!("rules:\n- id: r\n  priority: 1\n  when: {{}}\n{ok_then}  retry:\n    max_attempts: 3\n    base_delay: soon\n    max_delay: 1s\n"), 8, "bad duration `soon`"),
        ("predicate without constraint", format!("rules:\n- id: r\n  priority: 1\n  when:\n    arguments:\n      cmd: {{}}\n{ok_then}"), 6, "predicate has no constraint"),
        ("required false is no constraint", format!("rules:\n- id: r\n  priority: 1\n  when:\n    arguments:\n      cmd:\n        required: false\n{ok_then}"), 7, "predicate has no constraint"),
        ("negative min_step_count", format!("rules:\n- id: r\n  priority: 1\n  when:\n    min_step_count: -1\n{ok_then}"), 5, "when.min_step_count: must be 0 or more"),
        ("zero min_duration_ms", format!("rules:\n- id: r\n  priority: 1\n  when:\n    min_duration_ms: 0\n{ok_then}"), 5, "when.min_duration_ms: must be greater than 0"),
        ("bad glob", format!("rules:\n- id: r\n  priority: 1\n  when:\n    tool_id: 'shell.[a-'\n{ok_then}"), 5, "bad glob `shell.[a-`"),
        ("bad glob in list", format!("rules:\n- id: r\n  priority: 1\n  when:\n    tool_ids: [ok, '[]']\n{ok_then}"), 5, "bad glob `[]`"),
        ("negative timeout", "rules:\n- id: r\n  priority: 1\n  when: {}\n  then:\n    decision: allow\n    timeout_ms: -5\n".into(), 7, "then.timeout_ms must be 0 (the step timeout) or more, got -5"),
        ("then as a scalar", "rules:\n- id: r\n  priority: 1\n  when: {}\n  then: allow\n".into(), 5, "invalid type: string \"allow\", expected a `then` mapping with `decision`"),
        ("unknown action", format!("rules:\n- id: r\n  priority: 1\n  when:\n    action: tool.call\n{ok_then}"), 5, "unknown action `tool.call`"),
        ("empty labels", format!("rules:\n- id: r\n  priority: 1\n  when:\n    labels: {{}}\n{ok_then}"), 5, "when.labels: map is empty"),
    ];
    for (name, text, line, fragment) in cases {
        let (_dir, path, result) = load_text(&text);
        let errors = match result {
            Ok(_) => panic!("case `{name}` loaded"),
            Err(errors) => errors,
        };
        let prefix = format!("{}:{line}: ", path.display());
        let report = errors.to_string();
        assert!(
            report
                .lines()
                .any(|problem| problem.starts_with(&prefix) && problem.contains(fragment)),
            "case `{name}`: expected `{prefix}...{fragment}` in:\n{report}"
        );
    }
}

#[test]
fn every_problem_of_a_file_is_reported_in_line_order() {
    let text = "\
rules:
- id: typo
  priority: 1
  when: {tool: x}
  then: {decision: allow}
- id: bad-schedule
  priority: 2
  when: {schedule: Someday 09:00-10:00 UTC}
  then: {decision: allow}
- id: bad-type
  priority: three
  when: {}
  then: {decision: allow}
- id: bad-window
  priority: 4
  when: {}
  then: {decision: allow}
  rate_limit: {max: 1, window: forever}
- id: bad-schedule
  priority: 5
  when: {}
  then: {decision: deny}
";
    let (_dir, path, result) = load_text(text);
    let errors = result.err().unwrap();
    let lines: Vec<Option<usize>> = errors.problems.iter().map(|problem| problem.line).collect();
    assert_eq!(
        lines,
        vec![Some(4), Some(8), Some(11), Some(18), Some(19)],
        "{errors}"
    );
    assert!(errors.problems.iter().all(|problem| problem.file == path));
    assert_eq!(errors.to_string().lines().count(), 5);
    assert!(
        errors.problems[4]
            .message
            .contains("duplicate rule id `bad-schedule` (first defined at line 6)")
    );
}

#[test]
fn an_unanchored_pattern_loads_with_a_warning_naming_rule_and_field() {
    let text = "\
rules:
- id: loose-shell
  priority: 1
  when:
    arguments:
      command:
        pattern: 'ls'
      path:
        pattern: '^/tmp/[a-z]+$'
  then: {decision: allow}
";
    let (_dir, path, result) = load_text(text);
    let loaded = result.unwrap();
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    let warning = &loaded.warnings[0];
    assert!(
        warning.starts_with(&format!(
            "{}:7: warning: rule `loose-shell`",
            path.display()
        )),
        "{warning}"
    );
    assert!(
        warning.contains("arguments.command.pattern `ls` is not anchored"),
        "{warning}"
    );
}

#[test]
fn warnings_are_kept_when_a_file_also_has_problems() {
    let text = "rules:\n- id: r\n  priority: 1\n  when:\n    arguments:\n      a: {pattern: x}\n      b: {}\n  then: {decision: allow}\n";
    let (_dir, _path, result) = load_text(text);
    let errors = result.err().unwrap();
    assert_eq!(errors.problems.len(), 1);
    assert_eq!(errors.warnings.len(), 1);
}

#[test]
fn the_digest_is_a_stable_fnv_hash_of_the_source() {
    let (_dir, _path, result) = load_text("rules: []\n");
    let loaded = result.unwrap();
    assert_eq!(loaded.digest, "603e9ce6ef03f5d0");
    assert_eq!(loaded.engine.digest(), loaded.digest);
    let (_other_dir, _other_path, other) = load_text("rules: []  \n");
    assert_ne!(other.unwrap().digest, loaded.digest);
}

#[test]
fn a_loaded_file_evaluates_by_priority_with_its_default() {
    let text = "\
rules:
- id: allow-web
  priority: 20
  when: {tool_id: 'web.*'}
  then: {decision: allow, timeout_ms: 5000}
- id: deny-web-delete
  priority: 10
  when: {tool_id: web.delete}
  then: {decision: deny, reason: no deletes}
default:
  decision: require_approval
";
    let (_dir, _path, result) = load_text(text);
    let loaded = result.unwrap();
    assert_eq!(
        decide(&loaded, &call("a", "web.delete", json!({}))),
        (Decision::Deny, "deny-web-delete".into())
    );
    let allowed = loaded.engine.evaluate(&call("a", "web.get", json!({})));
    assert_eq!(
        (allowed.decision, allowed.timeout_ms),
        (Decision::Allow, Some(5000))
    );
    assert_eq!(
        decide(&loaded, &call("a", "db.query", json!({}))),
        (Decision::RequireApproval, "default".into())
    );
}

#[test]
fn a_file_that_is_not_utf8_is_an_error_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.yaml");
    std::fs::write(&path, b"rules: []\n# caf\xe9\n").unwrap();
    let report = load_path(&path).err().unwrap().to_string();
    assert_eq!(
        report,
        format!("{}:2: file is not valid UTF-8", path.display())
    );
}

#[test]
fn a_missing_path_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let errors = load_path(&missing).err().unwrap();
    assert!(
        errors
            .to_string()
            .starts_with(&format!("{}: cannot read policy path", missing.display()))
    );
}

#[test]
fn check_reports_success_or_every_problem() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let (report, ok) = check_command(&examples.join("safe-shell.yaml"));
    assert!(ok, "{report}");
    assert!(
        report.contains("safe-shell.yaml: ok")
            && report.contains("policy ok: 1 file(s), 0 warning(s), digest "),
        "{report}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "rules:\n- id: r\n  priority: 1\n  when: {schedule: x, min_step_count: -2}\n  then: {decision: allow}\n",
    );
    let (report, ok) = check_command(&bad);
    assert!(!ok);
    let prefix = format!("{}:4: rule `r`: when.", bad.display());
    assert_eq!(
        report
            .lines()
            .filter(|line| line.starts_with(&prefix))
            .count(),
        2,
        "{report}"
    );
    assert!(
        report.ends_with("policy invalid: 2 problem(s)\n"),
        "{report}"
    );
}

#[test]
fn eval_prints_decision_rule_and_reason() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let shell = examples.join("safe-shell.yaml");
    let allowed = eval_command(
        &shell,
        "a",
        "shell.exec",
        Some(r#"{"command": "ls -la /tmp"}"#),
        vec![],
    )
    .unwrap();
    assert_eq!(allowed.json["decision"], "allow");
    assert_eq!(allowed.json["rule_id"], "shell-read-only");
    assert_eq!(allowed.json["timeout_ms"], 30000);
    assert_eq!(allowed.json["rate_limit"]["max"], 30);
    let allowed = allowed.text;
    assert!(
        allowed.starts_with("decision: allow\nrule: shell-read-only\nreason: "),
        "{allowed}"
    );
    assert!(
        allowed.contains("timeout_ms: 30000\nrate_limit: max 30 per 1m\n"),
        "{allowed}"
    );
    let denied = eval_command(
        &shell,
        "a",
        "shell.exec",
        Some(r#"{"command": "ls; rm -rf /"}"#),
        vec![],
    )
    .unwrap();
    assert_eq!(denied.json["decision"], "deny");
    assert_eq!(denied.json["rule_id"], "shell-anything-else");
    let denied = denied.text;
    assert!(
        denied.starts_with("decision: deny\nrule: shell-anything-else\nreason: Only read-only"),
        "{denied}"
    );
    let default = eval_command(&shell, "a", "db.query", None, vec![])
        .unwrap()
        .text;
    assert!(
        default
            .starts_with("decision: deny\nrule: default\nreason: No explicit allow rule matched"),
        "{default}"
    );
    let deploy = examples.join("deploy-approval.yaml");
    let labels = vec![("env".to_owned(), "production".to_owned())];
    let gated = eval_command(&deploy, "a", "deploy.app", Some("{}"), labels)
        .unwrap()
        .text;
    assert!(
        gated.starts_with("decision: require_approval\nrule: production-deploy\n"),
        "{gated}"
    );
    let bad_json = eval_command(&shell, "a", "shell.exec", Some("{"), vec![]).unwrap_err();
    assert!(
        bad_json.starts_with("arguments are not valid JSON"),
        "{bad_json}"
    );
    let dir = tempfile::tempdir().unwrap();
    let broken = write(dir.path(), "broken.yaml", "rules: [\n");
    assert!(
        eval_command(&broken, "a", "t", None, vec![])
            .unwrap_err()
            .starts_with(&format!("{}:2: ", broken.display()))
    );
}

#[test]
fn eval_prints_the_budget_of_the_call_and_the_concurrency_limits() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(
        dir.path(),
        "guarded.yaml",
        "budget: {max_steps: 20, max_calls_per_tool: 5}
\
         concurrency:
  max_running: 3
  labels:
  - {label: tenant, max_running: 1}
  tools:
  - {tool_id: 'search*', max_concurrent_steps: 2}
\
         rules:
\
         - id: search
  priority: 1
  when: {tool_id: search}
  then: {decision: allow}
  budget: {max_calls_per_tool: 2}
\
         - id: rest
  priority: 2
  when: {}
  then: {decision: allow}
",
    );
    let search = eval_command(&policy, "a", "search", None, vec![])
        .unwrap()
        .text;
    assert!(
        search.ends_with(
            "budget: {\"max_calls_per_tool\":2,\"max_steps\":20}\nmax_running: 3\n\
             max_running per tenant value: 1\nmax_concurrent_steps: 2\n"
        ),
        "{search}"
    );
    let other = eval_command(&policy, "a", "write", None, vec![])
        .unwrap()
        .text;
    assert!(
        other.ends_with(
            "budget: {\"max_calls_per_tool\":5,\"max_steps\":20}\nmax_running: 3\n\
             max_running per tenant value: 1\n"
        ),
        "{other}"
    );
}

#[test]
fn every_example_under_policies_loads_without_problems_or_warnings() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    let mut loaded_count = 0;
    for entry in entries {
        let is_yaml = entry
            .extension()
            .is_some_and(|extension| extension == "yaml" || extension == "yml");
        if !entry.is_dir() && !is_yaml {
            continue;
        }
        match load_path(&entry) {
            Ok(loaded) => assert!(
                loaded.warnings.is_empty(),
                "{}: {:?}",
                entry.display(),
                loaded.warnings
            ),
            Err(errors) => panic!("{} does not load:\n{errors}", entry.display()),
        }
        loaded_count += 1;
    }
    assert!(
        loaded_count >= 5,
        "expected the example files and the per-agent directory"
    );
}

#[test]
fn the_examples_decide_as_their_comments_say() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let load = |name: &str| load_path(&examples.join(name)).unwrap();
    let hours = load("business-hours.yaml");
    let mut wednesday_noon_new_york = call("a", "web.search", json!({}));
    wednesday_noon_new_york.now = chrono::DateTime::parse_from_rfc3339("2025-03-12T16:00:00Z")
        .unwrap()
        .to_utc();
    assert_eq!(decide(&hours, &wednesday_noon_new_york).0, Decision::Allow);
    let mut saturday_night = wednesday_noon_new_york.clone();
    saturday_night.now = chrono::DateTime::parse_from_rfc3339("2025-03-16T02:00:00Z")
        .unwrap()
        .to_utc();
    assert_eq!(
        decide(&hours, &saturday_night),
        (Decision::Deny, "maintenance-window".into())
    );
    let mut wednesday_night = wednesday_noon_new_york.clone();
    wednesday_night.now = chrono::DateTime::parse_from_rfc3339("2025-03-13T03:00:00Z")
        .unwrap()
        .to_utc();
    assert_eq!(
        decide(&hours, &wednesday_night),
        (Decision::RequireApproval, "default".into())
    );

    let guards = load("runaway-guards.yaml");
    let mut looping = call("a", "web.search", json!({}));
    looping.step_count = 200;
    assert_eq!(
        decide(&guards, &looping),
        (Decision::Deny, "too-many-steps".into())
    );
    let mut old = call("a", "web.search", json!({}));
    old.duration_ms = 3_600_000;
    assert_eq!(
        decide(&guards, &old),
        (Decision::Deny, "running-too-long".into())
    );
    let mut busy = call("a", "llm.complete", json!({}));
    busy.step_count = 60;
    assert_eq!(
        decide(&guards, &busy),
        (
            Decision::RequireApproval,
            "expensive-calls-after-50-steps".into()
        )
    );
    assert_eq!(
        decide(&guards, &call("a", "llm.complete", json!({}))),
        (Decision::Allow, "everything-else".into())
    );

    let deploy = load("deploy-approval.yaml");
    let staging = call(
        "a",
        "deploy.app",
        json!({"environment": "staging", "replicas": 3}),
    );
    assert_eq!(
        decide(&deploy, &staging),
        (Decision::Allow, "non-production-deploy".into())
    );
    let too_many = call(
        "a",
        "deploy.app",
        json!({"environment": "staging", "replicas": 50}),
    );
    assert_eq!(
        decide(&deploy, &too_many),
        (Decision::RequireApproval, "unknown-deploy".into())
    );
    let prod = call("a", "k8s.apply", json!({"environment": "prod"}));
    assert_eq!(
        decide(&deploy, &prod),
        (Decision::RequireApproval, "production-target".into())
    );
}

#[test]
fn hooks_load_beside_the_engine_which_keeps_every_part_of_the_policy() {
    let policy = "\
budget:
  max_steps: 20
circuit_breakers:
  - tool_id: \"payments.*\"
    failures: 5
    cool_down: 30s
rules:
  - id: search
    priority: 10
    when:
      tool_id: web.search
    then:
      decision: allow
    rate_limit:
      max: 3
      window: 90s
  - id: rest
    priority: 100
    when: {}
    then: {decision: allow}
";
    let hooks = "\
hooks:
  - id: admit
    point: pre_create
    url: http://127.0.0.1:1/admit
  - id: guard
    point: pre_tool
    url: http://127.0.0.1:1/guard
    rule_ids: [search]
";
    let (_dir, _, plain) = load_text(policy);
    let (_dir2, _, hooked) = load_text(&format!("{policy}{hooks}"));
    let (plain, hooked) = (plain.unwrap(), hooked.unwrap());
    assert!(plain.hooks.is_empty());
    let ids: Vec<&str> = hooked.hooks.iter().map(|hook| hook.id.as_str()).collect();
    assert_eq!(ids, ["admit", "guard"]);
    // The engine of the file with hooks answers every question as the one without them.
    let (with, without) = (&hooked.engine, &plain.engine);
    assert_eq!(with.digest(), hooked.digest);
    assert_eq!(with.rule_ids(), without.rule_ids());
    assert_eq!(with.longest_rate_window(), without.longest_rate_window());
    assert_eq!(with.longest_rate_window(), Some(Duration::from_secs(90)));
    assert_eq!(
        with.agent_budget(&"a".into()),
        without.agent_budget(&"a".into())
    );
    assert!(with.agent_budget(&"a".into()).is_some());
    assert_eq!(with.breakers().0.len(), 1);
    assert_eq!(with.breakers().horizon(), without.breakers().horizon());
    let search = call("a", "web.search", json!({}));
    assert_eq!(with.evaluate(&search), without.evaluate(&search));
}

#[test]
fn checking_a_directory_maps_files_to_agents_and_warns_about_unused_ones() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/per-agent");
    let dir = tempfile::tempdir().unwrap();
    for name in ["_global.yaml", "support-bot.yaml"] {
        std::fs::copy(examples.join(name), dir.path().join(name)).unwrap();
    }
    std::fs::copy(
        examples.join("support-bot.yaml"),
        dir.path().join("_gobal.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a policy").unwrap();
    std::fs::create_dir(dir.path().join("old")).unwrap();
    let (report, ok) = check_command(dir.path());
    assert!(ok, "{report}");
    assert!(
        report.contains("  agent support-bot: support-bot.yaml with the rules of _global.yaml\n")
            && report.contains("  any other agent: _global.yaml\n"),
        "{report}"
    );
    let shown = dir.path().display();
    for warning in [
        format!("warning: {shown}/notes.txt: not a .yaml or .yml file (no agent uses it)"),
        format!("warning: {shown}/old: subdirectories are not read (no agent uses it)"),
        format!(
            "warning: {shown}/_gobal.yaml applies only to an agent named `_gobal`; the file every agent shares is _global.yaml"
        ),
    ] {
        assert!(report.contains(&warning), "{warning}\n{report}");
    }
    // Without a global file, other agents are denied; the report says so.
    std::fs::remove_file(dir.path().join("_global.yaml")).unwrap();
    let (report, _) = check_command(dir.path());
    assert!(
        report.contains("  any other agent: no file, every tool call denied (rule agent-default)"),
        "{report}"
    );
}

#[test]
fn a_rule_can_match_who_created_the_execution_and_for_whom() {
    let (_dir, _path, loaded) = load_text(
        "rules:\n  - id: billing-only\n    priority: 1\n    when:\n      tool_id: payments.refund\n      created_by: \"billing-*\"\n      on_behalf_of: \"customer-*\"\n    then:\n      decision: allow\ndefault:\n  decision: deny\n",
    );
    let loaded = loaded.expect("loads");
    let refund = |created_by: Option<&str>, on_behalf_of: Option<&str>| {
        let mut input = call("a", "payments.refund", json!({}));
        input.created_by = created_by.map(str::to_owned);
        input.on_behalf_of = on_behalf_of.map(str::to_owned);
        decide(&loaded, &input)
    };
    assert_eq!(
        refund(Some("billing-svc"), Some("customer-7")).0,
        Decision::Allow
    );
    assert_eq!(
        refund(Some("support-svc"), Some("customer-7")).0,
        Decision::Deny
    );
    assert_eq!(refund(Some("billing-svc"), None).0, Decision::Deny);
    assert_eq!(refund(None, Some("customer-7")).0, Decision::Deny);
    let (_dir, _path, bad) = load_text(
        "rules:\n  - id: r\n    when:\n      created_by: \"[\"\n    then:\n      decision: allow\n",
    );
    assert!(bad.is_err(), "a malformed glob is refused");
}

#[test]
fn one_run_reports_a_problem_of_each_section_of_a_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "two.yaml",
        "rules:\n  - id: a\n    priority: 1\n    when:\n      tool_idd: x\n    then:\n      decision: maybe\n    rate_limit:\n      max: lots\n      window: 1m\n  - id: b\n    priority: 2\n    when: {}\n    then:\n      decision: allow\n",
    );
    let (report, ok) = check_command(&path);
    assert!(!ok);
    let shown = path.display();
    for expected in [
        format!("{shown}:5: rules[0].when: unknown field `tool_idd`"),
        format!("{shown}:7: rules[0].then.decision: unknown variant `maybe`"),
        format!("{shown}:9: rules[0].rate_limit.max: invalid type: string \"lots\""),
        "policy invalid: 3 problem(s)".to_owned(),
    ] {
        assert!(report.contains(&expected), "{expected}\n{report}");
    }
}
