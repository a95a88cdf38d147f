//! docs/policy.md stays true: every ```yaml block in it is a whole policy that loads (the one
//! marked ```yaml broken must fail), and the output it shows for `keel policy check` and
//! `keel policy eval` — on its own named examples (`shell.yaml`:) and on `policies/` — is what
//! the commands print.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::policy::*;

/// One fenced block of the document.
struct Block {
    /// The info string (`yaml`, `yaml broken`, `console`).
    info: String,
    /// The lines between the fences.
    body: String,
    /// The file name the paragraph before it gives (`shell.yaml`:), if any.
    name: Option<String>,
}

/// Splits a Markdown text into its fenced blocks.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = markdown.lines();
    let mut previous = "";
    while let Some(line) = lines.next() {
        if let Some(info) = line.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().take_while(|line| *line != "```").collect();
            let name = previous
                .trim()
                .strip_suffix("`:")
                .and_then(|head| head.rsplit('`').next())
                .filter(|name| name.ends_with(".yaml"))
                .map(str::to_owned);
            found.push(Block {
                info: info.trim().to_owned(),
                body: body.join("\n") + "\n",
                name,
            });
            previous = "";
        } else if !line.trim().is_empty() {
            previous = line;
        }
    }
    found
}

/// Splits a command line into words, honouring single quotes.
fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut in_word = false;
    for character in command.chars() {
        match character {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            ' ' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                }
                in_word = false;
            }
            other => {
                current.push(other);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(current);
    }
    words
}

/// Runs a `keel policy check|eval` command line as the CLI would; `None` for other commands.
fn run(command: &str, files: &HashMap<String, PathBuf>, root: &Path) -> Option<String> {
    let words = words(command);
    let [keel, policy, subcommand, path, options @ ..] = words.as_slice() else {
        return None;
    };
    if keel != "keel" || policy != "policy" {
        return None;
    }
    let resolved = files.get(path).cloned().unwrap_or_else(|| root.join(path));
    if !resolved.exists() {
        // A file the page only talks about (the hot-reload session's `policy.yaml`).
        return None;
    }
    let shown = |text: String| {
        text.replace(&format!("{}/", root.display()), "")
            .replace(&format!("{}", resolved.display()), path)
    };
    match subcommand.as_str() {
        "check" => Some(shown(check_command(&resolved).0)),
        "eval" => {
            let (mut agent, mut tool, mut args, mut labels) = ("", "", None, Vec::new());
            for pair in options.chunks(2) {
                let [flag, value] = pair else {
                    panic!("odd options in `{command}`");
                };
                match flag.as_str() {
                    "--agent" => agent = value,
                    "--tool" => tool = value,
                    "--args" => args = Some(value.as_str()),
                    "--labels" => {
                        let (key, label) = value.split_once('=').unwrap();
                        labels.push((key.to_owned(), label.to_owned()));
                    }
                    other => panic!("unknown option {other} in `{command}`"),
                }
            }
            let output = eval_command(&resolved, agent, tool, args, labels)
                .map_or_else(|e| e, |report| report.text);
            Some(shown(output))
        }
        _ => None,
    }
}

#[test]
fn the_policy_reference_shows_policies_that_load_and_real_command_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(root.join("docs/policy.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut files = HashMap::new();
    let (mut loaded, mut broken, mut commands) = (0, 0, 0);
    for (index, block) in blocks(&markdown).iter().enumerate() {
        if block.info.starts_with("yaml") {
            let name = block
                .name
                .clone()
                .unwrap_or_else(|| format!("example-{index}.yaml"));
            let path = super::write(dir.path(), &name, &block.body);
            files.insert(name.clone(), path.clone());
            match (block.info.as_str(), load_path(&path)) {
                ("yaml", Ok(_)) => loaded += 1,
                ("yaml", Err(errors)) => panic!("{name} does not load:\n{errors}\n{}", block.body),
                ("yaml broken", Err(_)) => broken += 1,
                (info, result) => panic!("{name} ({info}): unexpected {result:?}"),
            }
        }
        if block.info == "console" {
            let mut lines = block.body.lines().peekable();
            while let Some(line) = lines.next() {
                let Some(command) = line.strip_prefix("$ ") else {
                    continue;
                };
                let mut shown = Vec::new();
                while let Some(next) = lines.peek()
                    && !next.starts_with("$ ")
                {
                    shown.push(*next);
                    lines.next();
                }
                let Some(output) = run(command, &files, root) else {
                    continue;
                };
                commands += 1;
                assert_eq!(
                    output.trim_end().lines().collect::<Vec<_>>(),
                    shown,
                    "output of `{command}`"
                );
            }
        }
    }
    assert!(loaded >= 9, "only {loaded} loadable examples");
    assert_eq!(broken, 1);
    assert!(commands >= 8, "only {commands} commands checked");
}
