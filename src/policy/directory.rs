//! Directory mode of `--policy DIR`: one `<agent_id>.yaml|.yml` per agent plus an optional
//! `_global.yaml|.yml`. An agent's rules are its file's rules merged with the global rules (ids
//! and priorities unique across both); its file's `default` applies, else the global one.
//! Agents without a file use the global file; with no global file they are denied (rule id
//! `agent-default`). Hidden entries (Kubernetes ConfigMap `..data` links), subdirectories and
//! files with other extensions are ignored; a directory with no policy file is an error.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_actors::policy::rules::{
    CompiledPolicy, CompiledRules, FieldPath, MergeConflict, RuleSet,
};

use super::digest::Fnv64;
use super::errors::{PolicyLoadErrors, PolicyProblem};
use super::load::{FileLoad, LoadedPolicy, load_file, read_source};
use super::locate::line_of;

/// Stem of the file whose rules every agent shares.
pub const GLOBAL_STEM: &str = "_global";

/// One policy file of the directory, read and compiled.
struct PolicyFile {
    path: PathBuf,
    source: String,
    rules: CompiledRules,
}

/// Loads a policy directory; returns every problem of every file when it is not valid.
pub(super) fn load_directory(dir: &Path) -> Result<LoadedPolicy, PolicyLoadErrors> {
    let mut problems = Vec::new();
    let candidates = policy_files(dir, &mut problems);
    if candidates.is_empty() && problems.is_empty() {
        problems.push(PolicyProblem::new(
            dir,
            None,
            "no policy files (*.yaml, *.yml) in directory",
        ));
    }
    let mut warnings = Vec::new();
    let mut files: BTreeMap<String, PolicyFile> = BTreeMap::new();
    let mut hooks = Vec::new();
    for (stem, path) in candidates {
        let source = match read_source(&path) {
            Ok(source) => source,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        let FileLoad {
            compiled,
            problems: file_problems,
            warnings: file_warnings,
        } = load_file(&path, &source);
        problems.extend(file_problems);
        warnings.extend(file_warnings);
        let agent = (stem != GLOBAL_STEM).then_some(stem.as_str());
        let (file_hooks, hook_problems) = super::hooks::parse_hooks(&path, &source, agent);
        problems.extend(hook_problems);
        hooks.extend(file_hooks);
        if let Some(rules) = compiled {
            files.insert(
                stem,
                PolicyFile {
                    path,
                    source,
                    rules,
                },
            );
        }
    }
    if !problems.is_empty() {
        return Err(PolicyLoadErrors { problems, warnings });
    }
    let global = files.get(GLOBAL_STEM);
    // Breakers count results per tool id across every agent: they are kernel-wide.
    for (stem, file) in &files {
        if stem != GLOBAL_STEM && !file.rules.breakers().0.is_empty() {
            let line = line_of(
                &file.source,
                &FieldPath::default().keys(&["circuit_breakers"]),
            );
            problems.push(PolicyProblem::new(
                &file.path,
                line,
                format!(
                    "circuit_breakers are kernel-wide: put them in {GLOBAL_STEM}.yaml, not in an agent file"
                ),
            ));
        }
        // Steps per tool id are counted across every agent too.
        if stem != GLOBAL_STEM && !file.rules.concurrency().tools.is_empty() {
            let line = line_of(
                &file.source,
                &FieldPath::default().keys(&["concurrency", "tools"]),
            );
            problems.push(PolicyProblem::new(
                &file.path,
                line,
                format!(
                    "concurrency.tools are kernel-wide: put them in {GLOBAL_STEM}.yaml, not in an agent file"
                ),
            ));
        }
    }
    let mut agents = HashMap::new();
    for (stem, file) in files
        .iter()
        .filter(|(stem, _)| stem.as_str() != GLOBAL_STEM)
    {
        let rules = match global {
            None => RuleSet::single(&file.rules),
            Some(global) => match RuleSet::merged(&file.rules, &global.rules) {
                Ok(rules) => rules,
                Err(conflicts) => {
                    problems.extend(
                        conflicts
                            .iter()
                            .map(|conflict| conflict_problem(conflict, file, global)),
                    );
                    continue;
                }
            },
        };
        agents.insert(stem.clone(), rules);
    }
    if !problems.is_empty() {
        return Err(PolicyLoadErrors { problems, warnings });
    }
    let mut digest = Fnv64::new();
    for (stem, file) in &files {
        for part in [stem.as_bytes(), file.source.as_bytes()] {
            digest.write(&(part.len() as u64).to_le_bytes());
            digest.write(part);
        }
    }
    let digest = digest.hex();
    let global_rules = global.map(|global| RuleSet::single(&global.rules));
    let paths = files.values().map(|file| file.path.clone()).collect();
    Ok(LoadedPolicy {
        engine: Arc::new(
            CompiledPolicy::per_agent(agents, global_rules, digest.clone())
                .with_breakers(
                    global
                        .map(|global| global.rules.breakers().clone())
                        .unwrap_or_default(),
                )
                .with_tool_limits(
                    global
                        .map(|global| global.rules.concurrency().tools.clone())
                        .unwrap_or_default(),
                ),
        ),
        hooks,
        warnings,
        digest,
        files: paths,
    })
}

/// Lists `(stem, path)` of the directory's policy files, sorted by stem; reports two files for
/// one agent (`a.yaml` and `a.yml`).
fn policy_files(dir: &Path, problems: &mut Vec<PolicyProblem>) -> Vec<(String, PathBuf)> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            problems.push(PolicyProblem::new(
                dir,
                None,
                format!("cannot read directory: {error}"),
            ));
            return Vec::new();
        }
    };
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    paths.sort();
    for path in paths {
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        let is_yaml = path
            .extension()
            .is_some_and(|extension| extension == "yaml" || extension == "yml");
        // `fs::metadata` follows symlinks, so linked files (ConfigMap mounts) count.
        if name.starts_with('.')
            || !is_yaml
            || !fs::metadata(&path).is_ok_and(|metadata| metadata.is_file())
        {
            continue;
        }
        let Some(stem) = path.file_stem().and_then(|stem| stem.to_str()) else {
            continue;
        };
        if let Some(first) = found.get(stem) {
            let message = format!(
                "agent `{stem}` has two policy files; keep one of this and {}",
                first.display()
            );
            problems.push(PolicyProblem::new(&path, None, message));
            continue;
        }
        found.insert(stem.to_owned(), path);
    }
    found.into_iter().collect()
}

/// Describes a rule id or priority shared by an agent file and the global file.
fn conflict_problem(
    conflict: &MergeConflict,
    agent: &PolicyFile,
    global: &PolicyFile,
) -> PolicyProblem {
    let key = if conflict.same_id { "id" } else { "priority" };
    let agent_line = line_of(
        &agent.source,
        &FieldPath::rule(conflict.agent_rule).keys(&[key]),
    );
    let global_line = line_of(
        &global.source,
        &FieldPath::rule(conflict.global_rule).keys(&[key]),
    );
    let global_place = match global_line {
        Some(line) => format!("{}:{line}", global.path.display()),
        None => global.path.display().to_string(),
    };
    let message = format!(
        "{} is also used by {global_place}; ids and priorities must be unique across an agent file and the global file",
        conflict.shared
    );
    PolicyProblem::new(&agent.path, agent_line, message)
}
