//! Load problems of policy files, reported as `FILE:LINE: message`, one per line, so that an
//! editor or CI log can jump to them.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem (or warning) in a policy file, with its line when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyProblem {
    /// File (or directory) the problem is in.
    pub file: PathBuf,
    /// 1-based line, when the problem is tied to one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl PolicyProblem {
    /// Returns a problem at a line of a file.
    pub fn new(file: &Path, line: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Every problem found while loading a policy path (never empty), plus the warnings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyLoadErrors {
    /// Problems, in file order then line order.
    pub problems: Vec<PolicyProblem>,
    /// Warnings found along the way, already formatted (`FILE:LINE: warning: ...`).
    pub warnings: Vec<String>,
}

impl fmt::Display for PolicyLoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyLoadErrors {}
