//! `concurrency:` compiled: `max_running` per agent (an agent file's wins over the global one)
//! and `tools` limits per tool id (first matching entry), with every bad value reported.

use std::collections::HashMap;

use super::{compiled, problems};
use crate::policy::engine::PolicyEngine;
use crate::policy::rules::{
    CompiledPolicy, ConcurrencyDefinition, PolicyDefinition, RuleSet, ToolLimitDefinition,
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
    }));
    let strict = compiled(&with(ConcurrencyDefinition {
        max_running: Some(1),
        tools: None,
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
