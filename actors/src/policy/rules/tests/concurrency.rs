//! `concurrency:` compiled: `max_running` per agent (an agent file's wins over the global one)
//! and `tools` limits per tool id (first matching entry), with every bad value reported.

use std::collections::HashMap;

use super::{compiled, problems};
use crate::guardrails::concurrency::LabelLimit;
use crate::policy::engine::PolicyEngine;
use crate::policy::rules::{
    CompiledPolicy, ConcurrencyDefinition, LabelLimitDefinition, PolicyDefinition, RuleSet,
    ToolLimitDefinition,
};

fn with(concurrency: ConcurrencyDefinition) -> PolicyDefinition {
    PolicyDefinition {
        concurrency: Some(concurrency),
        ..Default::default()
    }
}

fn tool(pattern: &str, limit: i64) -> ToolLimitDefinition {
    ToolLimitDefinition {
        tool_id: Some(pattern.to_owned()),
        tool_ids: None,
        max_concurrent_steps: limit,
    }
}

#[test]
fn a_single_file_gives_every_agent_its_max_running_and_the_tool_limits() {
    let file = compiled(&with(ConcurrencyDefinition {
        max_running: Some(3),
        tools: Some(vec![tool("pay.*", 2), tool("*", 10)]),
        ..Default::default()
    }));
    let engine = CompiledPolicy::single(RuleSet::single(&file), "d".into())
        .with_tool_limits(file.concurrency().tools.clone());
    assert_eq!(engine.max_running(&"billing".into()), Some(3));
    assert_eq!(engine.max_running(&"anyone".into()), Some(3));
    assert_eq!(
        engine.tool_limits().limit(&"pay.charge".into()),
        Some(2),
        "first match"
    );
    assert_eq!(engine.tool_limits().limit(&"search".into()), Some(10));
    let plain = compiled(&PolicyDefinition::default());
    let engine = CompiledPolicy::single(RuleSet::single(&plain), "d".into());
    assert_eq!(engine.max_running(&"billing".into()), None);
    assert_eq!(engine.tool_limits().limit(&"pay.charge".into()), None);
}

#[test]
fn an_agent_files_max_running_wins_over_the_global_one() {
    let global = compiled(&with(ConcurrencyDefinition {
        max_running: Some(5),
        tools: None,
        ..Default::default()
    }));
    let strict = compiled(&with(ConcurrencyDefinition {
        max_running: Some(1),
        tools: None,
        ..Default::default()
    }));
    let silent = compiled(&PolicyDefinition::default());
    let merged = |agent| RuleSet::merged(agent, &global).unwrap_or_else(|e| panic!("{e:?}"));
    let agents = HashMap::from([
        ("strict".to_owned(), merged(&strict)),
        ("silent".to_owned(), merged(&silent)),
    ]);
    let engine = CompiledPolicy::per_agent(agents, Some(RuleSet::single(&global)), "d".into());
    assert_eq!(engine.max_running(&"strict".into()), Some(1));
    assert_eq!(engine.max_running(&"silent".into()), Some(5));
    assert_eq!(engine.max_running(&"no-file".into()), Some(5));
}

#[test]
fn bad_limits_are_reported_with_their_field() {
    let issues = problems(&with(ConcurrencyDefinition {
        max_running: Some(0),
        tools: Some(vec![
            tool("pay.*", 0),
            ToolLimitDefinition {
                tool_id: None,
                tool_ids: None,
                max_concurrent_steps: 1,
            },
            tool("pay.[", 1),
            tool("x", -3),
        ]),
        ..Default::default()
    }));
    let found: Vec<(String, String)> = issues
        .iter()
        .map(|issue| (issue.path.to_string(), issue.message.clone()))
        .collect();
    let paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "concurrency.max_running",
            "concurrency.tools[0].max_concurrent_steps",
            "concurrency.tools[1]",
            "concurrency.tools[2].tool_id",
            "concurrency.tools[3].max_concurrent_steps",
        ],
        "{found:?}"
    );
    assert!(
        found[0]
            .1
            .contains("concurrency.max_running must be between 1 and"),
        "{found:?}"
    );
    assert!(found[2].1.contains("`tool_id` or `tool_ids`"), "{found:?}");
}

fn label(key: &str, limit: i64) -> LabelLimitDefinition {
    LabelLimitDefinition {
        label: key.to_owned(),
        max_running: limit,
    }
}

fn limit(key: &str, max_running: u32) -> LabelLimit {
    LabelLimit {
        label: key.to_owned(),
        max_running,
    }
}

#[test]
fn label_limits_apply_per_agent_and_an_agent_files_list_wins_over_the_global_one() {
    let single = compiled(&with(ConcurrencyDefinition {
        labels: Some(vec![label("tenant", 2), label("region", 5)]),
        ..Default::default()
    }));
    let engine = CompiledPolicy::single(RuleSet::single(&single), "d".into());
    assert_eq!(
        engine.label_limits(&"anyone".into()),
        [limit("tenant", 2), limit("region", 5)]
    );
    assert_eq!(
        engine.max_running(&"anyone".into()),
        None,
        "no agent-wide limit given"
    );

    let global = compiled(&with(ConcurrencyDefinition {
        max_running: Some(9),
        labels: Some(vec![label("tenant", 3)]),
        ..Default::default()
    }));
    let own = compiled(&with(ConcurrencyDefinition {
        labels: Some(vec![label("team", 1)]),
        ..Default::default()
    }));
    let lifted = compiled(&with(ConcurrencyDefinition {
        labels: Some(Vec::new()),
        ..Default::default()
    }));
    let silent = compiled(&PolicyDefinition::default());
    let merged = |agent| RuleSet::merged(agent, &global).unwrap_or_else(|e| panic!("{e:?}"));
    let agents = HashMap::from([
        ("own".to_owned(), merged(&own)),
        ("lifted".to_owned(), merged(&lifted)),
        ("silent".to_owned(), merged(&silent)),
    ]);
    let engine = CompiledPolicy::per_agent(agents, Some(RuleSet::single(&global)), "d".into());
    assert_eq!(engine.label_limits(&"own".into()), [limit("team", 1)]);
    assert_eq!(
        engine.max_running(&"own".into()),
        Some(9),
        "the global max_running still applies"
    );
    assert_eq!(engine.label_limits(&"lifted".into()), []);
    assert_eq!(engine.label_limits(&"silent".into()), [limit("tenant", 3)]);
    assert_eq!(engine.label_limits(&"no-file".into()), [limit("tenant", 3)]);
    let plain = compiled(&PolicyDefinition::default());
    let engine = CompiledPolicy::single(RuleSet::single(&plain), "d".into());
    assert_eq!(engine.label_limits(&"anyone".into()), []);
}

#[test]
fn bad_label_limits_are_reported_with_their_field() {
    let issues = problems(&with(ConcurrencyDefinition {
        labels: Some(vec![
            label("tenant", 0),
            label("", 1),
            label("region", 2),
            label("region", 3),
            label(&"k".repeat(257), 1),
            label("team", -1),
        ]),
        ..Default::default()
    }));
    let found: Vec<(String, String)> = issues
        .iter()
        .map(|issue| (issue.path.to_string(), issue.message.clone()))
        .collect();
    let paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "concurrency.labels[0].max_running",
            "concurrency.labels[1].label",
            "concurrency.labels[3].label",
            "concurrency.labels[4].label",
            "concurrency.labels[5].max_running",
        ],
        "{found:?}"
    );
    assert_eq!(
        found[0].1,
        "concurrency.labels[0].max_running must be between 1 and 4294967295, got 0"
    );
    assert_eq!(
        found[1].1,
        "concurrency.labels[1].label must be a label key of 1 to 256 bytes, got \"\""
    );
    assert_eq!(
        found[2].1,
        "concurrency.labels[3].label: label \"region\" is already limited by concurrency.labels[2]"
    );
}
