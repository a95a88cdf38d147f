//! The `hooks:` section of a policy file (docs/hooks.md): the hook chain's endpoints, each with
//! its point, timeout, failure mode and scope (every call, some agents, some rules; creations
//! have no rule, so `pre_create` hooks are scoped by agent only). Rebuno
//! policy files have no such key and load unchanged.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use keel_actors::hooks::{FailureMode, HookPoint, HookSpec, LocalModify};
use keel_actors::policy::rules::parse_duration;
use serde::Deserialize;
use yaml_serde::Value;

use super::errors::PolicyProblem;
use super::locate::strip_positions;
use keel_actors::ids::AgentId;

/// Default bound of one hook call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest timeout a hook may have: the agent (or the creating client) waits for its answer
/// meanwhile.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HookEntry {
    id: String,
    point: String,
    url: String,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    failure: Option<String>,
    #[serde(default)]
    agent_ids: Vec<String>,
    #[serde(default)]
    rule_ids: Vec<String>,
    #[serde(default)]
    local_modify: Option<String>,
}

/// Reads the `hooks:` list of one file's source (none when the key is absent). `agent` scopes
/// every hook of the file to one agent (a per-agent file of a policy directory).
pub fn parse_hooks(
    path: &Path,
    source: &str,
    agent: Option<&str>,
) -> (Vec<HookSpec>, Vec<PolicyProblem>) {
    let mut problems = Vec::new();
    let document: Value = match yaml_serde::from_str(source) {
        Ok(document) => document,
        // The rules' parser reports a document that does not parse.
        Err(_) => return (Vec::new(), problems),
    };
    let Some(list) = document.get("hooks") else {
        return (Vec::new(), problems);
    };
    let entries: Vec<HookEntry> = match yaml_serde::from_value(list.clone()) {
        Ok(entries) => entries,
        Err(error) => {
            let message = format!("hooks: {}", strip_positions(&error.to_string()));
            problems.push(PolicyProblem::new(path, None, message));
            return (Vec::new(), problems);
        }
    };
    let mut hooks = Vec::new();
    let mut seen = HashSet::new();
    for entry in entries {
        let mut problem = |message: String| {
            problems.push(PolicyProblem::new(
                path,
                None,
                format!("hook {:?}: {message}", entry.id),
            ));
        };
        if entry.id.is_empty() || !seen.insert(entry.id.clone()) {
            problem("hook ids must be non-empty and unique".to_owned());
            continue;
        }
        let point = match entry.point.as_str() {
            "pre_tool" => HookPoint::PreTool,
            "post_tool" => HookPoint::PostTool,
            "pre_create" => HookPoint::PreCreate,
            other => {
                problem(format!(
                    "point {other:?} must be pre_tool, post_tool or pre_create"
                ));
                continue;
            }
        };
        if point == HookPoint::PreCreate && !entry.rule_ids.is_empty() {
            problem(
                "rule_ids do not apply to pre_create hooks (no rule decides a creation); \
                 scope them with agent_ids"
                    .to_owned(),
            );
            continue;
        }
        match url::Url::parse(&entry.url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            _ => {
                problem(format!(
                    "url {:?} must be an http:// or https:// URL",
                    entry.url
                ));
                continue;
            }
        }
        let timeout = match entry
            .timeout
            .as_deref()
            .map(|text| parse_duration(text.trim()))
        {
            None => DEFAULT_TIMEOUT,
            Some(Ok(timeout)) if timeout <= MAX_TIMEOUT => timeout,
            Some(Ok(_)) => {
                problem(format!(
                    "timeout must be at most {}s",
                    MAX_TIMEOUT.as_secs()
                ));
                continue;
            }
            Some(Err(error)) => {
                problem(format!("timeout: {error}"));
                continue;
            }
        };
        let failure = match entry.failure.as_deref() {
            None | Some("fail_closed") => FailureMode::FailClosed,
            Some("fail_open") => FailureMode::FailOpen,
            Some(other) => {
                problem(format!(
                    "failure {other:?} must be fail_closed or fail_open"
                ));
                continue;
            }
        };
        let local_modify = match entry.local_modify.as_deref() {
            None | Some("refuse") => LocalModify::Refuse,
            Some("record_only") => LocalModify::RecordOnly,
            Some(other) => {
                problem(format!(
                    "local_modify {other:?} must be refuse or record_only"
                ));
                continue;
            }
        };
        if point == HookPoint::PreCreate && entry.local_modify.is_some() {
            problem("local_modify applies to pre_tool and post_tool hooks only".to_owned());
            continue;
        }
        let agent_ids = match agent {
            Some(agent) => vec![AgentId::new(agent)],
            None => entry.agent_ids.into_iter().map(AgentId::new).collect(),
        };
        hooks.push(HookSpec {
            id: entry.id,
            point,
            url: entry.url,
            timeout,
            failure,
            agent_ids,
            rule_ids: entry.rule_ids,
            local_modify,
        });
    }
    (hooks, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_parse_with_defaults_and_scopes() {
        let source = "rules: []\nhooks:\n  - id: a\n    point: pre_tool\n    url: http://127.0.0.1:1/a\n  \
                      - id: b\n    point: post_tool\n    url: https://h/b\n    timeout: 250ms\n    \
                      failure: fail_open\n    agent_ids: [x]\n    rule_ids: [r]\n";
        let (hooks, problems) = parse_hooks(Path::new("p.yaml"), source, None);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0].timeout, DEFAULT_TIMEOUT);
        assert_eq!(hooks[0].failure, FailureMode::FailClosed);
        assert!(hooks[0].applies(HookPoint::PreTool, &"anyone".into(), "any-rule"));
        assert!(!hooks[0].applies(HookPoint::PostTool, &"anyone".into(), "any-rule"));
        assert_eq!(hooks[1].timeout, Duration::from_millis(250));
        assert_eq!(hooks[1].failure, FailureMode::FailOpen);
        assert!(hooks[1].applies(HookPoint::PostTool, &"x".into(), "r"));
        assert!(!hooks[1].applies(HookPoint::PostTool, &"y".into(), "r"));
        assert!(!hooks[1].applies(HookPoint::PostTool, &"x".into(), "s"));
        let (scoped, _) = parse_hooks(Path::new("agent.yaml"), source, Some("agent"));
        assert_eq!(scoped[0].agent_ids, vec!["agent".to_owned()]);
    }

    #[test]
    fn pre_create_hooks_parse_and_are_scoped_by_agent() {
        let source = "rules: []\nhooks:\n  - id: admit\n    point: pre_create\n    url: http://h/c\n    \
                      timeout: 1s\n    failure: fail_open\n    agent_ids: [x]\n";
        let (hooks, problems) = parse_hooks(Path::new("p.yaml"), source, None);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(hooks[0].point, HookPoint::PreCreate);
        assert_eq!(hooks[0].failure, FailureMode::FailOpen);
        assert_eq!(hooks[0].timeout, Duration::from_secs(1));
        assert!(hooks[0].applies_to_creation(&"x".into()));
        assert!(!hooks[0].applies_to_creation(&"y".into()));
        assert!(!hooks[0].applies(HookPoint::PreTool, &"x".into(), "any-rule"));
        let (scoped, _) = parse_hooks(Path::new("y.yaml"), source, Some("y"));
        assert!(scoped[0].applies_to_creation(&"y".into()));
        assert!(!scoped[0].applies_to_creation(&"x".into()));
    }

    #[test]
    fn pre_create_hook_mistakes_are_reported() {
        let cases = [
            ("    rule_ids: [r]\n", "rule_ids do not apply to pre_create"),
            ("    timeout: 21s\n", "timeout must be at most 20s"),
            ("    timeout: soon\n", "timeout"),
            (
                "    failure: fail_later\n",
                "must be fail_closed or fail_open",
            ),
            ("    labels: {a: b}\n", "unknown field"),
        ];
        for (extra, expected) in cases {
            let source = format!(
                "rules: []\nhooks:\n  - id: admit\n    point: pre_create\n    url: http://h/c\n{extra}"
            );
            let (hooks, problems) = parse_hooks(Path::new("p.yaml"), &source, None);
            assert!(hooks.is_empty(), "{extra}");
            assert_eq!(problems.len(), 1, "{extra}: {problems:?}");
            assert!(
                problems[0].to_string().contains(expected),
                "{extra}: {}",
                problems[0]
            );
        }
        let (_, problems) = parse_hooks(
            Path::new("p.yaml"),
            "rules: []\nhooks:\n  - id: a\n    point: precreate\n    url: http://h\n",
            None,
        );
        assert!(
            problems[0].to_string().contains("pre_create"),
            "{problems:?}"
        );
    }

    #[test]
    fn local_modify_defaults_to_refuse_and_is_checked() {
        let source = "rules: []\nhooks:\n  - id: a\n    point: pre_tool\n    url: http://h/a\n  \
                      - id: b\n    point: post_tool\n    url: http://h/b\n    local_modify: record_only\n";
        let (hooks, problems) = parse_hooks(Path::new("p.yaml"), source, None);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(hooks[0].local_modify, LocalModify::Refuse);
        assert_eq!(hooks[1].local_modify, LocalModify::RecordOnly);
        for (point, extra, expected) in [
            (
                "pre_tool",
                "local_modify: ignore",
                "must be refuse or record_only",
            ),
            (
                "pre_create",
                "local_modify: refuse",
                "pre_tool and post_tool hooks only",
            ),
        ] {
            let source = format!(
                "rules: []\nhooks:\n  - id: a\n    point: {point}\n    url: http://h\n    {extra}\n"
            );
            let (hooks, problems) = parse_hooks(Path::new("p.yaml"), &source, None);
            assert!(hooks.is_empty(), "{extra}");
            assert!(problems[0].to_string().contains(expected), "{problems:?}");
        }
    }

    #[test]
    fn bad_hooks_are_reported() {
        let source = "rules: []\nhooks:\n  - id: a\n    point: sometime\n    url: http://h\n  \
                      - id: b\n    point: pre_tool\n    url: ftp://h\n  \
                      - id: c\n    point: pre_tool\n    url: http://h\n    timeout: 1h\n  \
                      - id: c\n    point: pre_tool\n    url: http://h\n  \
                      - id: d\n    point: pre_tool\n    url: http://h\n    failure: maybe\n";
        let (hooks, problems) = parse_hooks(Path::new("p.yaml"), source, None);
        assert!(hooks.is_empty());
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 5, "{text:?}");
        let (_, problems) = parse_hooks(
            Path::new("p.yaml"),
            "rules: []\nhooks:\n  - id: a\n    typo: 1\n",
            None,
        );
        assert_eq!(problems.len(), 1);
    }
}
