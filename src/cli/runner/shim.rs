//! CPU and memory limits for workers without `unsafe`: when a limit is set, the runner starts
//! `keel runner-shim --cpu-seconds N --memory BYTES -- PROGRAM ARGS…`, a hidden subcommand that
//! lowers its own rlimits (`setrlimit`, inherited across `exec`) and then replaces itself with
//! the program. The worker therefore starts, and stays, under the limits, and so do its
//! children; no code runs between `fork` and `exec` in the runner.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use clap::Args;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::cli::CliError;

/// Name of the hidden subcommand.
pub const SHIM_COMMAND: &str = "runner-shim";
/// Exit status of the shim when it cannot start the program (as a shell's "not found").
const EXEC_FAILED: i32 = 127;

/// Resource limits of a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rlimits {
    /// `RLIMIT_CPU`: CPU seconds (SIGXCPU at the limit, SIGKILL one second later).
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_AS`: bytes of address space (allocations beyond it fail).
    pub memory: Option<u64>,
}

impl Rlimits {
    /// Returns whether no limit is set (the program is started directly).
    pub fn is_empty(&self) -> bool {
        self.cpu_seconds.is_none() && self.memory.is_none()
    }

    /// Arguments of `keel` that run the shim, up to and including `--`.
    pub fn shim_args(&self) -> Vec<String> {
        let mut args = vec![SHIM_COMMAND.to_owned()];
        if let Some(seconds) = self.cpu_seconds {
            args.extend(["--cpu-seconds".to_owned(), seconds.to_string()]);
        }
        if let Some(bytes) = self.memory {
            args.extend(["--memory".to_owned(), bytes.to_string()]);
        }
        args.push("--".to_owned());
        args
    }
}

/// Flags of the hidden `keel runner-shim`.
#[derive(Debug, Args)]
pub struct ShimArgs {
    /// CPU seconds.
    #[arg(long, value_name = "SECONDS")]
    pub cpu_seconds: Option<u64>,
    /// Address-space bytes.
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<u64>,
    /// Program and arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

/// Sets the limits and executes the program; returns only when that fails.
pub fn exec(args: ShimArgs) -> Result<(), CliError> {
    let limits = [
        (
            Resource::RLIMIT_CPU,
            args.cpu_seconds
                .map(|seconds| (seconds, seconds.saturating_add(1))),
        ),
        (Resource::RLIMIT_AS, args.memory.map(|bytes| (bytes, bytes))),
    ];
    for (resource, wanted) in limits {
        let Some((soft, hard)) = wanted else {
            continue;
        };
        // A limit may only be lowered: never ask for more than the current hard limit.
        let (_, current_hard) = getrlimit(resource)
            .map_err(|error| CliError::Failed(format!("getrlimit {resource:?}: {error}")))?;
        let hard = hard.min(current_hard);
        setrlimit(resource, soft.min(hard), hard)
            .map_err(|error| CliError::Failed(format!("setrlimit {resource:?}: {error}")))?;
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err(CliError::Failed("runner-shim: no program".to_owned()));
    };
    let error = std::process::Command::new(program).args(rest).exec();
    eprintln!(
        "keel runner-shim: cannot execute {}: {error}",
        program.to_string_lossy()
    );
    std::process::exit(EXEC_FAILED);
}
