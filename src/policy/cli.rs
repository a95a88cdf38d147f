//! The two policy subcommands, as functions returning text so the CLI only prints:
//! `keel policy check PATH` (validate a file or directory without starting a kernel) and
//! `keel policy eval PATH ...` (show what a policy decides about one tool call, now).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use keel_actors::policy::PolicyInput;
use keel_actors::time;

use super::load::load_path;
use keel_actors::ids::{AgentId, ToolId};

/// Validates a policy path; returns the report to print and whether the policy is valid.
/// Problems are listed one per line as `FILE:LINE: message`, then the warnings.
pub fn check_command(path: &Path) -> (String, bool) {
    let mut report = String::new();
    if path.is_dir() {
        report.push_str(&directory_map(path));
    }
    match load_path(path) {
        Ok(loaded) => {
            for file in &loaded.files {
                let _ = writeln!(report, "{}: ok", file.display());
            }
            for warning in &loaded.warnings {
                let _ = writeln!(report, "{warning}");
            }
            let _ = writeln!(
                report,
                "policy ok: {} file(s), {} warning(s), digest {}",
                loaded.files.len(),
                loaded.warnings.len(),
                loaded.digest
            );
            (report, true)
        }
        Err(errors) => {
            for problem in &errors.problems {
                let _ = writeln!(report, "{problem}");
            }
            for warning in &errors.warnings {
                let _ = writeln!(report, "{warning}");
            }
            let _ = writeln!(
                report,
                "policy invalid: {} problem(s)",
                errors.problems.len()
            );
            (report, false)
        }
    }
}

/// For a policy directory: which file applies to which agent, and a warning for each entry no
/// agent will use (hidden, not YAML, a subdirectory, an `_`-file that is not `_global`).
fn directory_map(dir: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let mut names: Vec<(String, bool)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_str()?.to_owned();
            let is_file = std::fs::metadata(entry.path()).is_ok_and(|meta| meta.is_file());
            Some((name, is_file))
        })
        .collect();
    names.sort();
    let global_stem = super::directory::GLOBAL_STEM;
    let mut agents = Vec::new();
    let mut global = None;
    let mut ignored = Vec::new();
    let mut suspicious = Vec::new();
    for (name, is_file) in &names {
        let yaml = Path::new(name)
            .extension()
            .is_some_and(|extension| extension == "yaml" || extension == "yml");
        let stem = Path::new(name)
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or(name);
        if name.starts_with('.') {
            // Kubernetes ConfigMap mounts keep their real files in `..data`: say nothing.
            if yaml {
                ignored.push(format!("{name}: hidden files are not read"));
            }
        } else if !is_file {
            ignored.push(format!("{name}: subdirectories are not read"));
        } else if !yaml {
            ignored.push(format!("{name}: not a .yaml or .yml file"));
        } else if stem == global_stem {
            global = Some(name.clone());
        } else if stem.starts_with('_') {
            agents.push((stem.to_owned(), name.clone()));
            suspicious.push(format!(
                "{name} applies only to an agent named `{stem}`; the file every agent shares is {global_stem}.yaml"
            ));
        } else {
            agents.push((stem.to_owned(), name.clone()));
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "which file applies to which agent:");
    for (agent, file) in &agents {
        match &global {
            Some(global) => {
                let _ = writeln!(out, "  agent {agent}: {file} with the rules of {global}");
            }
            None => {
                let _ = writeln!(out, "  agent {agent}: {file}");
            }
        }
    }
    match &global {
        Some(global) => {
            let _ = writeln!(out, "  any other agent: {global}");
        }
        None => {
            let _ = writeln!(
                out,
                "  any other agent: no file, every tool call denied (rule agent-default)"
            );
        }
    }
    for problem in &ignored {
        let _ = writeln!(
            out,
            "warning: {}/{problem} (no agent uses it)",
            dir.display()
        );
    }
    for problem in &suspicious {
        let _ = writeln!(out, "warning: {}/{problem}", dir.display());
    }
    out
}

/// Evaluates one `tool.invoke` call against a policy path at the current time (step count and
/// duration 0); `args_json` is the arguments object (`None` means `{}`). Returns the decision,
/// rule id and reason (plus timeout, rate limit and retry when the rule sets them), or the load
/// problems / a bad-arguments message.
pub fn eval_command(
    path: &Path,
    agent: &str,
    tool: &str,
    args_json: Option<&str>,
    labels: Vec<(String, String)>,
) -> Result<EvalReport, String> {
    let loaded = load_path(path).map_err(|errors| errors.to_string())?;
    let arguments: Value = match args_json {
        None => Value::Object(serde_json::Map::new()),
        Some(text) => serde_json::from_str(text)
            .map_err(|error| format!("arguments are not valid JSON: {error}"))?,
    };
    let input = PolicyInput {
        created_by: None,
        on_behalf_of: None,
        action: "tool.invoke".to_owned(),
        agent_id: agent.into(),
        tool_id: tool.into(),
        execution_id: "policy-eval".into(),
        labels: labels.into_iter().collect::<BTreeMap<_, _>>(),
        arguments,
        step_count: 0,
        duration_ms: 0,
        usage: Default::default(),
        now: time::now(),
    };
    let decision = loaded.engine.evaluate(&input);
    let mut json = serde_json::json!({
        "agent_id": agent,
        "tool_id": tool,
        "decision": decision.decision.as_str(),
        "rule_id": decision.rule_id.to_string(),
        "reason": decision.reason.to_string(),
    });
    if let Some(timeout_ms) = decision.timeout_ms {
        json["timeout_ms"] = Value::from(timeout_ms);
    }
    if let Some(limit) = &decision.rate_limit {
        json["rate_limit"] =
            serde_json::json!({"max": limit.max, "window": limit.window_text.to_string()});
    }
    if let Some(retry) = &decision.retry {
        json["retry"] = serde_json::json!({
            "max_attempts": retry.max_attempts,
            "base_delay_ms": u64::try_from(retry.base_delay.as_millis()).unwrap_or(u64::MAX),
            "max_delay_ms": u64::try_from(retry.max_delay.as_millis()).unwrap_or(u64::MAX),
        });
    }
    if let Some(budget) = &decision.budget {
        json["budget"] = budget.limits_json();
    }
    let mut output = String::new();
    let _ = writeln!(output, "decision: {}", decision.decision.as_str());
    let _ = writeln!(output, "rule: {}", decision.rule_id);
    let _ = writeln!(output, "reason: {}", decision.reason);
    if let Some(timeout_ms) = decision.timeout_ms {
        let _ = writeln!(output, "timeout_ms: {timeout_ms}");
    }
    if let Some(limit) = &decision.rate_limit {
        let _ = writeln!(
            output,
            "rate_limit: max {} per {}",
            limit.max, limit.window_text
        );
    }
    if let Some(retry) = &decision.retry {
        let _ = writeln!(
            output,
            "retry: max_attempts {}, base_delay {}ms, max_delay {}ms",
            retry.max_attempts,
            retry.base_delay.as_millis(),
            retry.max_delay.as_millis()
        );
    }
    // The budget in force for this call: the file's, tightened by the rule's.
    if let Some(budget) = &decision.budget {
        let _ = writeln!(output, "budget: {}", budget.limits_json());
    }
    if let Some(limit) = loaded.engine.max_running(&AgentId::new(agent)) {
        let _ = writeln!(output, "max_running: {limit}");
    }
    for limit in loaded.engine.label_limits(&AgentId::new(agent)) {
        let (label, max) = (limit.label, limit.max_running);
        let _ = writeln!(output, "max_running per {label} value: {max}");
    }
    if let Some(limit) = loaded.engine.tool_limits().limit(&ToolId::new(tool)) {
        let _ = writeln!(output, "max_concurrent_steps: {limit}");
        json["max_concurrent_steps"] = Value::from(limit);
    }
    if let Some(limit) = loaded.engine.max_running(&AgentId::new(agent)) {
        json["max_running"] = Value::from(limit);
    }
    Ok(EvalReport {
        text: output,
        json,
        decision: decision.decision,
    })
}

/// What `keel policy eval` prints, and the decision that sets its exit status.
#[derive(Debug)]
pub struct EvalReport {
    /// `field: value` lines.
    pub text: String,
    /// The same as one JSON object.
    pub json: Value,
    /// The decision.
    pub decision: keel_actors::policy::Decision,
}
