//! A kernel the bench starts as a child process (`keel dev` on 127.0.0.1 and a port of its
//! own, a data directory the bench chose), waits for, `kill -9`s and starts again on the same
//! data: the `restart` scenario's subject. Its output goes to a log file whose tail is shown
//! when it fails to come up.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::http::Http;
use crate::cli::CliError;

/// Interval between readiness polls.
const POLL: Duration = Duration::from_millis(5);

/// How to start the kernel.
#[derive(Clone, Debug)]
pub struct KernelSpec {
    /// Binary to run as `BIN dev …`.
    pub bin: PathBuf,
    /// Port on 127.0.0.1.
    pub port: u16,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--db-url`, when not the SQLite file in the data directory.
    pub db_url: Option<String>,
    /// File receiving the kernel's stdout and stderr (appended).
    pub log: PathBuf,
}

/// A running kernel process.
pub struct KernelProcess {
    child: Child,
    /// Its process id.
    pub pid: u32,
    log: PathBuf,
}

impl KernelSpec {
    /// Returns `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the kernel (killed if the bench drops it).
    pub fn start(&self) -> Result<KernelProcess, CliError> {
        let failed = |what: &str, error: std::io::Error| {
            CliError::Failed(format!("cannot {what} ({}): {error}", self.bin.display()))
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|error| failed("open the kernel log", error))?;
        let log_err = log
            .try_clone()
            .map_err(|error| failed("open the kernel log", error))?;
        let mut command = Command::new(&self.bin);
        command
            .arg("dev")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--log-level", "warn"]);
        if let Some(url) = &self.db_url {
            command.args(["--db-url", url]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| failed("start the kernel", error))?;
        let pid = child
            .id()
            .ok_or_else(|| CliError::Failed("the kernel exited at once".to_owned()))?;
        Ok(KernelProcess {
            child,
            pid,
            log: self.log.clone(),
        })
    }
}

impl KernelProcess {
    /// Polls `/v0/ready` until it answers 200; returns how long that took.
    pub async fn wait_ready(
        &mut self,
        http: &Http,
        within: Duration,
    ) -> Result<Duration, CliError> {
        let started = Instant::now();
        loop {
            if http.ok("/v0/ready").await {
                return Ok(started.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(CliError::Failed(format!(
                    "the kernel exited during startup ({status}); its log ends with:\n{}",
                    self.log_tail()
                )));
            }
            if started.elapsed() >= within {
                return Err(CliError::Failed(format!(
                    "the kernel was not ready within {within:?}; its log ends with:\n{}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Sends SIGKILL and waits for the process to be gone.
    pub async fn kill9(&mut self) -> Result<(), CliError> {
        self.child
            .kill()
            .await
            .map_err(|error| CliError::Failed(format!("cannot kill the kernel: {error}")))
    }

    /// The last lines of the kernel's log.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Returns a port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16, CliError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| CliError::Failed(format!("cannot find a free port: {error}")))
}
