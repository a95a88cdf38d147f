//! Loads `--policy PATH`: one YAML file, or a directory of per-agent files (see
//! `directory.rs`). Parsing is strict (unknown keys and wrong types are errors) and collects
//! every problem of a file: the top level and each rule are parsed separately, then the
//! compiler in `keel_actors::policy::rules` checks meaning, and every problem gets its line.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use yaml_serde::Value;

use keel_actors::hooks::HookSpec;
use keel_actors::policy::PolicyEngine;
use keel_actors::policy::rules::{
    CompileIssue, CompiledPolicy, CompiledRules, FieldPath, ModelAllowList, PathSegment,
    PolicyDefinition, RuleSet, compile,
};

use super::digest::Fnv64;
use super::directory::load_directory;
use super::errors::{PolicyLoadErrors, PolicyProblem};
use super::locate::{deserialize_at, line_of, strip_positions};
use super::spec::{
    BudgetSpec, FileShellSpec, RateLimitSpec, RetrySpec, RuleSpec, ThenSpec, WhenSpec,
};

/// Largest policy file accepted, in bytes.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A policy ready to install in the policy actor.
#[derive(Clone)]
pub struct LoadedPolicy {
    /// The compiled engine.
    pub engine: Arc<dyn PolicyEngine>,
    /// The `hooks:` of the policy files, in order (docs/hooks.md): installed beside the engine.
    pub hooks: Vec<HookSpec>,
    /// Things that load but are probably mistakes, formatted `FILE:LINE: warning: ...`.
    pub warnings: Vec<String>,
    /// Short hex digest of the source bytes (FNV-1a 64), also returned by `engine.digest()`.
    pub digest: String,
    /// Files read, in load order.
    pub files: Vec<PathBuf>,
}

impl fmt::Debug for LoadedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPolicy")
            .field("digest", &self.digest)
            .field("files", &self.files)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// Loads a policy file or directory; returns every problem found when it is not valid.
/// Reads files synchronously: async callers (hot reload) should use `spawn_blocking`.
pub fn load_path(path: &Path) -> Result<LoadedPolicy, PolicyLoadErrors> {
    let metadata = fs::metadata(path).map_err(|error| {
        let problem = PolicyProblem::new(path, None, format!("cannot read policy path: {error}"));
        PolicyLoadErrors {
            problems: vec![problem],
            warnings: Vec::new(),
        }
    })?;
    if metadata.is_dir() {
        return load_directory(path);
    }
    let source = read_source(path).map_err(|problem| PolicyLoadErrors {
        problems: vec![problem],
        warnings: Vec::new(),
    })?;
    let file = load_file(path, &source);
    let Some(rules) = file.compiled.filter(|_| file.problems.is_empty()) else {
        return Err(PolicyLoadErrors {
            problems: file.problems,
            warnings: file.warnings,
        });
    };
    let (hooks, problems) = super::hooks::parse_hooks(path, &source, None);
    if !problems.is_empty() {
        return Err(PolicyLoadErrors {
            problems,
            warnings: file.warnings,
        });
    }
    let mut digest = Fnv64::new();
    digest.write(source.as_bytes());
    let digest = digest.hex();
    Ok(LoadedPolicy {
        engine: Arc::new(
            CompiledPolicy::single(RuleSet::single(&rules), digest.clone())
                .with_breakers(rules.breakers().clone())
                .with_tool_limits(rules.concurrency().tools.clone()),
        ),
        hooks,
        warnings: file.warnings,
        digest,
        files: vec![path.to_path_buf()],
    })
}

/// Reads a policy file as UTF-8 text, refusing huge files.
pub(super) fn read_source(path: &Path) -> Result<String, PolicyProblem> {
    let size = fs::metadata(path)
        .map(|metadata| metadata.len())
        .unwrap_or(0);
    if size > MAX_FILE_BYTES {
        return Err(PolicyProblem::new(
            path,
            None,
            format!("file is larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    let bytes = fs::read(path)
        .map_err(|error| PolicyProblem::new(path, None, format!("cannot read file: {error}")))?;
    String::from_utf8(bytes).map_err(|error| {
        let valid = error.utf8_error().valid_up_to();
        let line = error.as_bytes()[..valid]
            .iter()
            .filter(|byte| **byte == b'\n')
            .count()
            + 1;
        PolicyProblem::new(path, Some(line), "file is not valid UTF-8")
    })
}

/// What loading one file produced.
pub(super) struct FileLoad {
    /// The compiled rules; `None` when there are problems.
    pub compiled: Option<CompiledRules>,
    /// Every problem found, by line.
    pub problems: Vec<PolicyProblem>,
    /// Warnings, formatted.
    pub warnings: Vec<String>,
}

/// Parses and compiles one file's source, collecting every problem.
pub(super) fn load_file(path: &Path, source: &str) -> FileLoad {
    let (parsed, mut problems) = parse(path, source);
    let Some((definition, rule_indices)) = parsed else {
        return FileLoad {
            compiled: None,
            problems,
            warnings: Vec::new(),
        };
    };
    let compilation = compile(&definition);
    let locate = |issue: &CompileIssue| {
        let line = line_of(source, &in_file(&issue.path, &rule_indices));
        let related_line = issue
            .related
            .as_ref()
            .and_then(|related| line_of(source, &in_file(related, &rule_indices)));
        let message = match related_line {
            Some(related_line) => {
                format!("{} (first defined at line {related_line})", issue.message)
            }
            None => issue.message.clone(),
        };
        (line, message)
    };
    let warnings = compilation
        .warnings
        .iter()
        .map(|issue| {
            let (line, message) = locate(issue);
            PolicyProblem::new(path, line, format!("warning: {message}")).to_string()
        })
        .collect();
    let compiled = match compilation.result {
        Ok(compiled) => Some(compiled),
        Err(issues) => {
            problems.extend(issues.iter().map(|issue| {
                let (line, message) = locate(issue);
                PolicyProblem::new(path, line, message)
            }));
            None
        }
    };
    let compiled = match parse_models(source) {
        Ok(models) => compiled.map(|compiled| compiled.with_models(models)),
        Err(message) => {
            let line = source
                .lines()
                .position(|line| line.starts_with("models:"))
                .map(|index| index + 1);
            problems.push(PolicyProblem::new(path, line, message));
            None
        }
    };
    problems.sort_by_key(|problem| problem.line);
    FileLoad {
        compiled: compiled.filter(|_| problems.is_empty()),
        problems,
        warnings,
    }
}

/// Maps a path in the compiled definition (which holds only the rules that parsed) back to
/// the rule's index in the file.
fn in_file(path: &FieldPath, rule_indices: &[usize]) -> FieldPath {
    let mut segments = path.0.clone();
    if let Some(index) = path.rule_index()
        && let Some(file_index) = rule_indices.get(index)
    {
        segments[1] = PathSegment::Index(*file_index);
    }
    FieldPath(segments)
}

/// Parses the file's structure: the definition of every rule that parsed (with each one's
/// index in the file), and the problems of the rest.
fn parse(
    path: &Path,
    source: &str,
) -> (Option<(PolicyDefinition, Vec<usize>)>, Vec<PolicyProblem>) {
    let from_yaml = |error: yaml_serde::Error| {
        let message = strip_positions(&error.to_string());
        // The parser gives no position for a second document: point at where it starts.
        let line = error
            .location()
            .map(|location| location.line())
            .or_else(|| {
                message
                    .contains("more than one document")
                    .then(|| second_document_line(source))
                    .flatten()
            });
        PolicyProblem::new(path, line, message)
    };
    let document: Value = match yaml_serde::from_str(source) {
        Ok(document) => document,
        Err(error) => return (None, vec![from_yaml(error)]),
    };
    if document.is_null() {
        let message = "policy file is empty (expected `rules:` and an optional `default:`)";
        return (None, vec![PolicyProblem::new(path, Some(1), message)]);
    }
    if !document.is_mapping() {
        let message = "the top level must be a mapping with `rules:` and an optional `default:`";
        return (None, vec![PolicyProblem::new(path, Some(1), message)]);
    }
    let mut problems = Vec::new();
    let (default, budget, circuit_breakers, concurrency) =
        match yaml_serde::from_str::<FileShellSpec>(source) {
            Ok(shell) => (
                shell.default.map(Into::into),
                shell.budget.map(Into::into),
                shell
                    .circuit_breakers
                    .map(|breakers| breakers.into_iter().map(Into::into).collect()),
                shell.concurrency.map(Into::into),
            ),
            Err(error) => {
                problems.push(from_yaml(error));
                (None, None, None, None)
            }
        };
    let mut rules = Vec::new();
    let mut rule_indices = Vec::new();
    let items = match document.get("rules") {
        Some(Value::Sequence(items)) => items.as_slice(),
        _ => &[],
    };
    for (index, item) in items.iter().enumerate() {
        // Parsing the already-loaded value is cheap; only a rule that fails is parsed again
        // from the text, which gives the exact position (and the text's scalar rules).
        let parsed = match yaml_serde::from_value::<RuleSpec>(item.clone()) {
            Ok(rule) => Some(rule),
            Err(_) => match deserialize_at::<RuleSpec>(source, &FieldPath::rule(index)) {
                Ok(rule) => rule,
                Err(error) => {
                    let first = from_yaml(error);
                    // serde stops at a rule's first problem: read each section on its own too,
                    // so one run reports a problem of `when` and one of `then` together.
                    let more = section_problems(source, index, item);
                    let mut found: Vec<PolicyProblem> = more
                        .into_iter()
                        .map(from_yaml)
                        .filter(|problem| *problem != first)
                        .collect();
                    found.push(first);
                    found.sort_by_key(|problem| problem.line);
                    problems.extend(found);
                    None
                }
            },
        };
        if let Some(rule) = parsed {
            rules.push(rule.into());
            rule_indices.push(index);
        }
    }
    (
        Some((
            PolicyDefinition {
                rules,
                default,
                budget,
                circuit_breakers,
                concurrency,
            },
            rule_indices,
        )),
        problems,
    )
}

/// Reads a file's `models:` section (the LLM gateway's allow-list); `None` without one.
fn parse_models(source: &str) -> Result<Option<ModelAllowList>, String> {
    let shell: super::spec::ModelsShellSpec = match yaml_serde::from_str(source) {
        Ok(shell) => shell,
        // A file whose shape is wrong elsewhere is reported by `parse`; only a bad `models`
        // section is this function's to report.
        Err(error) if error.to_string().contains("models") => {
            return Err(format!("models: {error}"));
        }
        Err(_) => return Ok(None),
    };
    shell
        .models
        .map(|models| ModelAllowList::new(&models.allow))
        .transpose()
}

/// Reads each section of rule `index` on its own and returns every section's first problem.
fn section_problems(source: &str, index: usize, item: &Value) -> Vec<yaml_serde::Error> {
    fn problem<T: serde::de::DeserializeOwned>(
        source: &str,
        index: usize,
        key: &str,
    ) -> Option<yaml_serde::Error> {
        deserialize_at::<T>(source, &FieldPath::rule(index).keys(&[key])).err()
    }
    let present = |key: &str| item.get(key).is_some();
    let mut found = Vec::new();
    for key in ["when", "then", "rate_limit", "retry", "budget"] {
        if !present(key) {
            continue;
        }
        let error = match key {
            "when" => problem::<WhenSpec>(source, index, key),
            "then" => problem::<ThenSpec>(source, index, key),
            "rate_limit" => problem::<RateLimitSpec>(source, index, key),
            "retry" => problem::<RetrySpec>(source, index, key),
            _ => problem::<BudgetSpec>(source, index, key),
        };
        found.extend(error);
    }
    found
}

/// Returns the line where a YAML stream's second document starts: a `---` marker after the
/// first document began, or any content or marker after a `...` end marker.
fn second_document_line(source: &str) -> Option<usize> {
    let mut begun = false;
    let mut ended = false;
    for (index, line) in source.lines().enumerate() {
        let marker = |text: &str| {
            line.strip_prefix(text)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
        };
        if marker("...") {
            ended = begun;
            continue;
        }
        let start = marker("---");
        let trimmed = line.trim_start();
        let content = !trimmed.is_empty() && !trimmed.starts_with('#') && !line.starts_with('%');
        if start || content {
            if ended || (start && begun) {
                return Some(index + 1);
            }
            begun = true;
        }
    }
    None
}
