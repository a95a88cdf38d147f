//! Tests of directory mode: merging agent and global files, defaults, routing, conflicts
//! across files, and which directory entries count.

use std::path::Path;

use serde_json::json;

use keel_actors::policy::Decision;

use super::{call, decide, write};
use crate::policy::*;

const GLOBAL: &str = "\
rules:
- id: global-deny-delete
  priority: 1
  when: {tool_id: '*.delete'}
  then: {decision: deny}
- id: global-search
  priority: 50
  when: {tool_id: web.search}
  then: {decision: allow}
default:
  decision: deny
  reason: global default
";

const AGENT: &str = "\
rules:
- id: bot-tickets
  priority: 10
  when: {tool_id: 'tickets.*'}
  then: {decision: allow}
default:
  decision: require_approval
  reason: bot default
";

#[test]
fn an_agent_gets_its_rules_plus_the_global_rules_and_its_own_default() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "_global.yaml", GLOBAL);
    write(dir.path(), "bot.yaml", AGENT);
    let loaded = load_path(dir.path()).unwrap();
    assert_eq!(loaded.files.len(), 2);
    let cases = [
        (
            "bot",
            "tickets.delete",
            Decision::Deny,
            "global-deny-delete",
        ),
        ("bot", "tickets.create", Decision::Allow, "bot-tickets"),
        ("bot", "web.search", Decision::Allow, "global-search"),
        ("bot", "db.query", Decision::RequireApproval, "default"),
        ("other", "tickets.create", Decision::Deny, "default"),
        ("other", "web.search", Decision::Allow, "global-search"),
    ];
    for (agent, tool, decision, rule) in cases {
        assert_eq!(
            decide(&loaded, &call(agent, tool, json!({}))),
            (decision, rule.to_owned()),
            "{agent} {tool}"
        );
    }
    assert_eq!(
        loaded
            .engine
            .evaluate(&call("other", "x", json!({})))
            .reason,
        "global default"
    );
    assert_eq!(
        loaded.engine.evaluate(&call("bot", "x", json!({}))).reason,
        "bot default"
    );
}

#[test]
fn defaults_fall_back_from_agent_to_global_to_deny() {
    let no_default =
        "rules:\n- id: bot-x\n  priority: 10\n  when: {tool_id: x}\n  then: {decision: allow}\n";
    let with_global = tempfile::tempdir().unwrap();
    write(with_global.path(), "_global.yml", GLOBAL);
    write(with_global.path(), "bot.yml", no_default);
    let loaded = load_path(with_global.path()).unwrap();
    let decision = loaded.engine.evaluate(&call("bot", "y", json!({})));
    assert_eq!(
        (
            decision.decision,
            decision.rule_id.as_str(),
            decision.reason.as_str()
        ),
        (Decision::Deny, "default", "global default")
    );

    let without_global = tempfile::tempdir().unwrap();
    write(without_global.path(), "bot.yaml", no_default);
    let loaded = load_path(without_global.path()).unwrap();
    let own = loaded.engine.evaluate(&call("bot", "y", json!({})));
    assert_eq!(
        (own.rule_id.as_str(), own.reason.as_str()),
        ("default", "No explicit allow rule matched")
    );
    assert_eq!(
        decide(&loaded, &call("bot", "x", json!({}))),
        (Decision::Allow, "bot-x".into())
    );
    let stranger = loaded.engine.evaluate(&call("stranger", "x", json!({})));
    assert_eq!(
        (stranger.decision, stranger.rule_id.as_str()),
        (Decision::Deny, "agent-default")
    );
}

#[test]
fn a_global_file_alone_answers_every_agent() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "_global.yaml", GLOBAL);
    let loaded = load_path(dir.path()).unwrap();
    assert_eq!(
        decide(&loaded, &call("anyone", "web.search", json!({}))),
        (Decision::Allow, "global-search".into())
    );
}

#[test]
fn ids_and_priorities_shared_with_the_global_file_are_errors_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let global = write(dir.path(), "_global.yaml", GLOBAL);
    let clash = "\
rules:
- id: global-search
  priority: 10
  when: {}
  then: {decision: allow}
- id: bot-other
  priority: 1
  when: {}
  then: {decision: allow}
";
    let agent = write(dir.path(), "bot.yaml", clash);
    let report = load_path(dir.path()).err().unwrap().to_string();
    let expected = [
        format!(
            "{}:2: rule id `global-search` is also used by {}:6;",
            agent.display(),
            global.display()
        ),
        format!(
            "{}:7: priority 1 is also used by {}:3;",
            agent.display(),
            global.display()
        ),
    ];
    for line in expected {
        assert!(
            report.lines().any(|problem| problem.starts_with(&line)),
            "missing `{line}` in:\n{report}"
        );
    }
    assert_eq!(report.lines().count(), 2, "{report}");
}

#[test]
fn problems_in_several_files_are_all_reported() {
    let dir = tempfile::tempdir().unwrap();
    let first = write(dir.path(), "a.yaml", "rules: []\nextra: 1\n");
    let second = write(
        dir.path(),
        "b.yaml",
        "rules:\n- id: r\n  priority: 1\n  when: {schedule: never}\n  then: {decision: deny}\n",
    );
    let errors = load_path(dir.path()).err().unwrap();
    let files: Vec<&Path> = errors
        .problems
        .iter()
        .map(|problem| problem.file.as_path())
        .collect();
    assert_eq!(files, vec![first.as_path(), second.as_path()]);
    assert_eq!(errors.problems[1].line, Some(4));
}

#[test]
fn only_visible_yaml_files_count() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bot.yaml", AGENT);
    write(dir.path(), "README.md", "not: [yaml");
    write(dir.path(), "notes.txt", "garbage");
    write(dir.path(), ".hidden.yaml", "not: [yaml");
    std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    let loaded = load_path(dir.path()).unwrap();
    assert_eq!(loaded.files, vec![dir.path().join("bot.yaml")]);
}

#[test]
fn an_empty_directory_or_one_without_yaml_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let expected = format!(
        "{}: no policy files (*.yaml, *.yml) in directory",
        dir.path().display()
    );
    assert_eq!(load_path(dir.path()).err().unwrap().to_string(), expected);
    write(dir.path(), "notes.txt", "hello");
    assert_eq!(load_path(dir.path()).err().unwrap().to_string(), expected);
}

#[test]
fn two_files_for_one_agent_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bot.yaml", AGENT);
    let second = write(dir.path(), "bot.yml", AGENT);
    let report = load_path(dir.path()).err().unwrap().to_string();
    assert!(
        report.starts_with(&format!(
            "{}: agent `bot` has two policy files",
            second.display()
        )),
        "{report}"
    );
}

#[test]
fn the_directory_digest_covers_every_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "_global.yaml", GLOBAL);
    write(dir.path(), "bot.yaml", AGENT);
    let before = load_path(dir.path()).unwrap().digest;
    assert_eq!(load_path(dir.path()).unwrap().digest, before);
    write(dir.path(), "bot.yaml", &format!("{AGENT}# changed\n"));
    let after = load_path(dir.path()).unwrap();
    assert_ne!(after.digest, before);
    assert_eq!(after.engine.digest(), after.digest);
    assert_eq!(after.digest.len(), 16);
}

#[test]
fn the_longest_rate_window_covers_every_file_of_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let limited = |id: &str, priority: u32, window: &str| {
        format!(
            "rules:\n- id: {id}\n  priority: {priority}\n  when: {{tool_id: x}}\n  then: {{decision: allow}}\n  rate_limit: {{max: 5, window: {window}}}\n"
        )
    };
    write(
        dir.path(),
        "_global.yaml",
        &limited("global-limit", 1, "1m"),
    );
    write(dir.path(), "bot.yaml", &limited("bot-limit", 2, "1h30m"));
    write(dir.path(), "other.yaml", &limited("other-limit", 3, "30s"));
    let loaded = load_path(dir.path()).unwrap();
    assert_eq!(
        loaded.engine.longest_rate_window(),
        Some(std::time::Duration::from_secs(90 * 60))
    );
    let single = write(dir.path(), "single.yml.txt", GLOBAL);
    assert_eq!(
        load_path(&single).unwrap().engine.longest_rate_window(),
        None
    );
}

#[test]
fn concurrency_max_running_comes_from_the_agent_file_else_the_global_one() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "_global.yaml",
        "rules: []\nconcurrency:\n  max_running: 4\n  tools:\n  - {tool_id: 'pay.*', max_concurrent_steps: 2}\n",
    );
    write(
        dir.path(),
        "strict.yaml",
        "rules: []\nconcurrency: {max_running: 1}\n",
    );
    write(dir.path(), "open.yaml", "rules: []\n");
    let loaded = load_path(dir.path()).unwrap();
    assert_eq!(loaded.engine.max_running(&"strict".into()), Some(1));
    assert_eq!(loaded.engine.max_running(&"open".into()), Some(4));
    assert_eq!(loaded.engine.max_running(&"no-file".into()), Some(4));
    assert_eq!(
        loaded.engine.tool_limits().limit(&"pay.charge".into()),
        Some(2)
    );
    assert_eq!(loaded.engine.tool_limits().limit(&"search".into()), None);
}

#[test]
fn tool_limits_in_an_agent_file_and_unknown_concurrency_keys_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let agent = write(
        dir.path(),
        "bot.yaml",
        "rules: []\nconcurrency:\n  tools:\n  - {tool_id: x, max_concurrent_steps: 1}\n",
    );
    let errors = load_path(dir.path()).err().unwrap();
    assert_eq!(errors.problems.len(), 1, "{errors:?}");
    assert_eq!(errors.problems[0].file, agent);
    assert_eq!(errors.problems[0].line, Some(4));
    assert!(
        errors.problems[0]
            .message
            .contains("concurrency.tools are kernel-wide: put them in _global.yaml"),
        "{errors:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "_global.yaml",
        "rules: []\nconcurrency: {max_runing: 3}\n",
    );
    let errors = load_path(dir.path()).err().unwrap();
    assert!(
        errors.problems[0].message.contains("max_runing"),
        "{errors:?}"
    );
}
