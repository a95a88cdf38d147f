//! One worker process per job: started in a process group of its own with a cleared
//! environment, fed the job line on stdin, its stdout kept up to a limit and the tail of its
//! stderr kept for messages. It is killed — SIGTERM to the whole group, SIGKILL after a grace
//! — when its time is up, its output grows past the limit, the job is cancelled or the runner
//! stops; whatever of its group is left when it exits is killed too.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::capture::{Capped, Tail};
use super::protocol::Ending;
use super::shim::Rlimits;

/// How long output is still read after the worker exited and its group was killed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How every worker is started, fixed when the runner starts.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Working directory (the runner's own when `None`).
    pub workdir: Option<PathBuf>,
    /// The whole environment of the worker.
    pub env: Vec<(OsString, OsString)>,
    /// CPU and memory limits, applied by the `keel` shim before it executes the program.
    pub rlimits: Rlimits,
    /// The `keel` binary, which runs the shim.
    pub keel_exe: PathBuf,
    /// Most bytes accepted on stdout.
    pub max_output: usize,
    /// Bytes of stderr kept for the failure message.
    pub stderr_tail: usize,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
}

/// When the runner stops waiting for a worker, and what to call it then.
pub struct TimeLimit {
    /// The moment.
    pub at: Instant,
    /// `the job's deadline passed`, `wall time limit of 30s exceeded`.
    pub why: String,
}

/// What became of a worker.
#[derive(Debug)]
pub enum RunEnd {
    /// It ended; the result is to be posted.
    Finished {
        /// How.
        ending: Ending,
        /// Its stdout (up to the limit).
        stdout: Vec<u8>,
        /// The tail of its stderr.
        stderr_tail: String,
    },
    /// The job was cancelled by the kernel; the worker was killed and nothing is posted.
    Cancelled,
}

/// Runs one worker to its end.
pub async fn run(
    spec: &WorkerSpec,
    job_line: Vec<u8>,
    job_env: &[(&str, String)],
    limit: Option<TimeLimit>,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
) -> RunEnd {
    let mut command = command(spec);
    command.envs(job_env.iter().map(|(name, value)| (name, value)));
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return RunEnd::Finished {
                ending: Ending::SpawnFailed(error.to_string()),
                stdout: Vec::new(),
                stderr_tail: String::new(),
            };
        }
    };
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    tracing::debug!(pid = ?group, "worker started");
    let writer = child.stdin.take().map(|mut stdin| {
        tokio::spawn(async move {
            // A worker may exit without reading; a broken pipe is its problem, not ours.
            let _ = stdin.write_all(&job_line).await;
            let _ = stdin.shutdown().await;
        })
    });
    let (overflow_tx, mut overflow_rx) = tokio::sync::oneshot::channel();
    let drained = CancellationToken::new();
    let stdout = child.stdout.take().map(|pipe| {
        let reader = read_stdout(pipe, spec.max_output, overflow_tx, drained.clone());
        tokio::spawn(reader)
    });
    let stderr = child
        .stderr
        .take()
        .map(|pipe| tokio::spawn(read_tail(pipe, spec.stderr_tail, drained.clone())));
    let time_limit = async {
        match &limit {
            Some(limit) => tokio::time::sleep_until(limit.at).await,
            None => std::future::pending().await,
        }
    };

    enum Stop {
        Exited(std::io::Result<ExitStatus>),
        Kill(Why),
    }
    enum Why {
        Time,
        Output,
        Cancelled,
        Shutdown,
    }
    let stop = tokio::select! {
        status = child.wait() => Stop::Exited(status),
        Ok(()) = &mut overflow_rx => Stop::Kill(Why::Output),
        () = time_limit => Stop::Kill(Why::Time),
        () = cancel.cancelled() => Stop::Kill(Why::Cancelled),
        () = shutdown.cancelled() => Stop::Kill(Why::Shutdown),
    };
    let (status, killed) = match stop {
        Stop::Exited(status) => (status, None),
        Stop::Kill(why) => (
            terminate(&mut child, group, spec.kill_grace).await,
            Some(why),
        ),
    };
    // Whatever the worker left behind in its group goes with it.
    signal_group(group, Signal::SIGKILL);
    if let Some(writer) = writer {
        writer.abort();
    }
    // A process that left the group may still hold the pipes open: read on only briefly.
    let drain_timer = {
        let drained = drained.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DRAIN_TIMEOUT).await;
            drained.cancel();
        })
    };
    let (stdout, overflowed) = match stdout {
        Some(task) => task.await.unwrap_or_default(),
        None => (Vec::new(), false),
    };
    let stderr_tail = match stderr {
        Some(task) => task.await.unwrap_or_default(),
        None => String::new(),
    };
    drain_timer.abort();
    let ending = match killed {
        Some(Why::Cancelled) => return RunEnd::Cancelled,
        Some(Why::Shutdown) => Ending::ShuttingDown,
        Some(Why::Time) => Ending::TimedOut(limit.map(|limit| limit.why).unwrap_or_default()),
        Some(Why::Output) => Ending::OutputTooLarge(spec.max_output),
        None if overflowed => Ending::OutputTooLarge(spec.max_output),
        None => match status {
            Ok(status) => Ending::Exited {
                status: describe(status),
                ok: status.success(),
            },
            Err(error) => Ending::Exited {
                status: format!("an unknown status ({error})"),
                ok: false,
            },
        },
    };
    RunEnd::Finished {
        ending,
        stdout,
        stderr_tail,
    }
}

/// Builds the worker's command: the program itself, or the shim when rlimits are set.
fn command(spec: &WorkerSpec) -> Command {
    let mut command = if spec.rlimits.is_empty() {
        Command::new(&spec.program)
    } else {
        let mut command = Command::new(&spec.keel_exe);
        command.args(spec.rlimits.shim_args());
        command.arg(&spec.program);
        command
    };
    confine(
        &mut command,
        &spec.args,
        &spec.env,
        spec.workdir.as_deref(),
        Stdio::piped(),
    );
    command
}

/// Gives a child (a worker or an MCP server) its arguments, only the environment `env`, its
/// working directory, piped stdin and stdout, and a process group of its own that is killed
/// with it.
pub(super) fn confine<A: AsRef<std::ffi::OsStr>>(
    command: &mut Command,
    args: &[A],
    env: &[(OsString, OsString)],
    workdir: Option<&std::path::Path>,
    stderr: Stdio,
) {
    command
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = workdir {
        command.current_dir(dir);
    }
}

/// SIGTERM to the group, SIGKILL after `grace`; returns the process's exit status (the
/// runner's workers and MCP servers).
pub(super) async fn terminate(
    child: &mut Child,
    group: Option<Pid>,
    grace: Duration,
) -> std::io::Result<ExitStatus> {
    signal_group(group, Signal::SIGTERM);
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status;
    }
    signal_group(group, Signal::SIGKILL);
    // The group leader may have changed its group; kill it directly too.
    let _ = child.start_kill();
    child.wait().await
}

/// Sends `signal` to a process group (nothing when it is gone).
pub(super) fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = killpg(group, signal);
    }
}

/// Reads stdout up to `limit` bytes; reports an overflow at once and stops reading.
async fn read_stdout(
    mut pipe: impl AsyncRead + Unpin,
    limit: usize,
    overflow: tokio::sync::oneshot::Sender<()>,
    drained: CancellationToken,
) -> (Vec<u8>, bool) {
    let mut kept = Capped::new(limit);
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = pipe.read(&mut buffer) => read,
            () = drained.cancelled() => return (kept.into_bytes(), false),
        };
        match read {
            Ok(0) | Err(_) => return (kept.into_bytes(), false),
            Ok(read) => {
                if kept.push(&buffer[..read]).is_err() {
                    let _ = overflow.send(());
                    return (kept.into_bytes(), true);
                }
            }
        }
    }
}

/// Reads a stream to its end, keeping its last `capacity` bytes.
async fn read_tail(
    mut pipe: impl AsyncRead + Unpin,
    capacity: usize,
    drained: CancellationToken,
) -> String {
    let mut tail = Tail::new(capacity);
    let mut buffer = vec![0_u8; 8 * 1024];
    loop {
        let read = tokio::select! {
            read = pipe.read(&mut buffer) => read,
            () = drained.cancelled() => return tail.text(),
        };
        match read {
            Ok(0) | Err(_) => return tail.text(),
            Ok(read) => tail.push(&buffer[..read]),
        }
    }
}

/// `exit status 3`, `signal 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(number) => match Signal::try_from(number) {
            Ok(signal) => format!("signal {number} ({})", signal.as_str()),
            Err(_) => format!("signal {number}"),
        },
        None => "an unknown status".to_owned(),
    }
}
