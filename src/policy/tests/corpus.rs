//! File corpora: policies written in the reference kernel's shapes (`reference/`), which must
//! load and decide as they did there, and refused files (`refused/`), each carrying its
//! expected report as `# expect: LINE: MESSAGE` comments.

use std::path::{Path, PathBuf};

use serde_json::json;

use keel_actors::policy::{Decision, PolicyInput};

use super::{call, decide};
use crate::policy::*;

/// Returns the directory of this module's data.
fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/policy/tests")
        .join(name)
}

/// Returns the YAML files of a directory, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yaml")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_refused_file_reports_exactly_its_expected_problems() {
    let files = yaml_files(&data("refused"));
    assert!(files.len() >= 25, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# expect: "))
            .map(|problem| format!("{}:{problem}", file.display()))
            .collect();
        assert!(
            !expected.is_empty(),
            "{} has no `# expect:`",
            file.display()
        );
        let errors = match load_path(&file) {
            Ok(_) => panic!("{} loaded", file.display()),
            Err(errors) => errors,
        };
        let actual: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
        assert_eq!(actual, expected, "{}", file.display());
    }
}

/// Returns a call by `agent` to `tool` with these arguments.
fn with(agent: &str, tool: &str, arguments: serde_json::Value) -> PolicyInput {
    call(agent, tool, arguments)
}

#[test]
fn reference_files_load_and_decide_as_the_reference_kernel() {
    use Decision::{Allow, Deny, RequireApproval};
    let load = |name: &str| {
        let loaded = load_path(&data("reference").join(name))
            .unwrap_or_else(|errors| panic!("{name} does not load:\n{errors}"));
        assert!(
            name == "directory" || loaded.warnings.is_empty(),
            "{name}: {:?}",
            loaded.warnings
        );
        loaded
    };

    let shell = load("shell.yaml");
    let cases = [
        (json!({"command": "ls -la"}), Allow, "allow-safe-shell"),
        // A prefix check: what follows the prefix is not checked, as in the reference.
        (
            json!({"command": "ls; rm -rf /"}),
            Allow,
            "allow-safe-shell",
        ),
        (
            json!({"command": "ls", "timeout": 30}),
            Allow,
            "allow-safe-shell",
        ),
        (
            json!({"command": "ls", "timeout": 31}),
            RequireApproval,
            "shell-needs-approval",
        ),
        (
            json!({"command": "ls", "timeout": "10"}),
            RequireApproval,
            "shell-needs-approval",
        ),
        (
            json!({"command": "rm -rf /"}),
            RequireApproval,
            "shell-needs-approval",
        ),
        (json!({"timeout": 5}), Allow, "allow-safe-shell"),
        (json!("ls"), RequireApproval, "shell-needs-approval"),
    ];
    for (arguments, decision, rule) in cases {
        assert_eq!(
            decide(&shell, &with("a", "shell_exec", arguments.clone())),
            (decision, rule.to_owned()),
            "{arguments}"
        );
    }
    let allowed = shell
        .engine
        .evaluate(&with("a", "shell_exec", json!({"command": "pwd"})));
    assert_eq!(
        (allowed.reason.as_str(), allowed.timeout_ms),
        ("Read-only shell commands", Some(10_000))
    );
    let refused = shell.engine.evaluate(&with("a", "web.search", json!({})));
    assert_eq!(
        (
            refused.decision,
            refused.rule_id.as_str(),
            refused.reason.as_str()
        ),
        (Deny, "default", "Tool not allowed")
    );

    let limits = load("limits.yaml");
    let burst = limits
        .engine
        .evaluate(&with("writer", "web.fetch", json!({})));
    let limit = burst.rate_limit.clone().unwrap();
    assert_eq!(
        (burst.rule_id.as_str(), burst.timeout_ms, limit.max),
        ("search-burst", None, 5)
    );
    assert_eq!(
        (limit.window, limit.window_text.as_str()),
        (std::time::Duration::from_secs(90), "1m30s")
    );
    let mut free = with("other", "llm.complete", json!({}));
    free.labels.insert("tier".into(), "free".into());
    let hourly = limits.engine.evaluate(&free).rate_limit.unwrap();
    assert_eq!(hourly.window, std::time::Duration::from_secs(5400));
    let level = |arguments| decide(&limits, &with("a", "log.set_level", arguments));
    assert_eq!(level(json!({"level": "debug"})).1, "log-level");
    // one_of is a list of strings: the YAML `1` is the string "1", and a number never matches.
    assert_eq!(level(json!({"level": "1"})).1, "log-level");
    assert_eq!(level(json!({"level": 1})).1, "no-nested-tools");
    // required: present and not empty.
    assert_eq!(level(json!({"level": ""})).1, "no-nested-tools");
    assert_eq!(level(json!({})).1, "no-nested-tools");
    // max_length counts characters.
    assert_eq!(
        level(json!({"level": "info", "note": "日本語"})).1,
        "log-level"
    );
    assert_eq!(
        level(json!({"level": "info", "note": "abcd"})).1,
        "no-nested-tools"
    );
    let window = limits
        .engine
        .evaluate(&with("a", "log.set_level", json!({"level": "info"})))
        .rate_limit
        .unwrap()
        .window;
    assert_eq!(window, std::time::Duration::from_millis(300));
    // `*` matches no `/`: the last rule catches only ids without one.
    assert_eq!(
        decide(&limits, &with("a", "calc", json!({}))),
        (Deny, "no-nested-tools".to_owned())
    );
    assert_eq!(
        decide(&limits, &with("a", "ns/calc", json!({}))).1,
        "default"
    );

    let guards = load("guards.yaml");
    let mut looping = with("a", "t", json!({}));
    looping.step_count = 100;
    assert_eq!(decide(&guards, &looping), (Deny, "deny-runaway".to_owned()));
    let mut slow = with("a", "t", json!({}));
    slow.duration_ms = 3_600_000;
    assert_eq!(decide(&guards, &slow), (Deny, "deny-slow".to_owned()));
    // `call` is a Wednesday noon UTC.
    assert_eq!(
        decide(&guards, &with("a", "t", json!({}))),
        (Allow, "office-hours".to_owned())
    );

    let directory = load("directory");
    assert_eq!(directory.warnings.len(), 1, "{:?}", directory.warnings);
    assert!(
        directory.warnings[0].contains("`[!...]` is a class that matches `!`"),
        "{:?}",
        directory.warnings
    );
    let calc = |tool: &str, arguments| decide(&directory, &with("calc-agent", tool, arguments));
    // `[!.]` is the class of `!` and `.`, as in Go: no negation.
    assert_eq!(
        calc("calc.add", json!({"expression": "1+1"})).1,
        "calculator"
    );
    assert_eq!(calc("calc!x", json!({})).1, "calculator");
    assert_eq!(calc("calcx", json!({})).1, "default");
    assert_eq!(
        calc("calc.add", json!({"expression": "123456789"})).1,
        "default"
    );
    // A negated class matches `/` too.
    assert_eq!(
        calc("/etc", json!({})),
        (Deny, "global-no-deletes".to_owned())
    );
    assert_eq!(calc("Admin.x", json!({})).1, "global-no-deletes");
    assert_eq!(
        decide(&directory, &with("other", "kb.delete", json!({}))).1,
        "global-no-deletes"
    );
}

#[test]
fn the_two_forms_of_arguments_decide_alike() {
    let sequence = "\
rules:
  - id: deploy
    priority: 1
    when:
      arguments:
        - field: environment
          required: true
          one_of: [staging, dev]
        - field: replicas
          min: 1
          max: 20
        - field: note
          pattern: '^[a-z ]*$'
          max_length: 12
    then: {decision: allow}
";
    let mapping = "\
rules:
  - id: deploy
    priority: 1
    when:
      arguments:
        environment:
          required: true
          one_of: [staging, dev]
        replicas:
          min: 1
          max: 20
        note:
          pattern: '^[a-z ]*$'
          max_length: 12
    then: {decision: allow}
";
    let dir = tempfile::tempdir().unwrap();
    let sequence = load_path(&super::write(dir.path(), "sequence.yaml", sequence)).unwrap();
    let mapping = load_path(&super::write(dir.path(), "mapping.yaml", mapping)).unwrap();
    let inputs = [
        json!({"environment": "staging"}),
        json!({"environment": "prod"}),
        json!({"environment": ""}),
        json!({}),
        json!({"environment": "dev", "replicas": 0}),
        json!({"environment": "dev", "replicas": 20}),
        json!({"environment": "dev", "replicas": "3"}),
        json!({"environment": "dev", "note": "all good"}),
        json!({"environment": "dev", "note": "Not OK"}),
        json!({"environment": "dev", "note": "far too long a note"}),
        json!(null),
    ];
    for arguments in inputs {
        let input = with("a", "deploy.web", arguments.clone());
        assert_eq!(
            decide(&sequence, &input),
            decide(&mapping, &input),
            "{arguments}"
        );
    }
    assert_eq!(
        decide(&sequence, &with("a", "x", json!({"environment": "dev"}))),
        (Decision::Allow, "deploy".to_owned())
    );
}
