//! `keel bench --embedded`: a throwaway `keel dev` kernel inside the bench process, on
//! 127.0.0.1 with a free port and a temporary SQLite database, started through [`crate::run`]
//! like any other kernel and shut down gracefully when the bench ends.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::CliError;
use crate::config::Config;

/// How long the embedded kernel may take to answer its first health check.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// A kernel running inside this process.
pub struct EmbeddedKernel {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
    _data_dir: tempfile::TempDir,
}

impl EmbeddedKernel {
    /// Starts the kernel and waits until it answers.
    pub async fn start() -> Result<Self, CliError> {
        Self::start_with(|_| {}).await
    }

    /// Starts the kernel with `configure` applied to its configuration.
    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> Result<Self, CliError> {
        let data_dir = tempfile::Builder::new()
            .prefix("keel-bench-")
            .tempdir()
            .map_err(|error| {
                CliError::Failed(format!("cannot create a temporary data directory: {error}"))
            })?;
        let mut config = Config::embedded(data_dir.path())
            .map_err(|error| CliError::Failed(format!("embedded kernel configuration: {error}")))?;
        configure(&mut config);
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|error| CliError::Failed(format!("cannot listen on 127.0.0.1: {error}")))?;
        let address = listener.local_addr().map_err(|error| {
            CliError::Failed(format!("cannot read the listener address: {error}"))
        })?;
        let stop = CancellationToken::new();
        let signal = stop.clone();
        let task = tokio::spawn(crate::run(config, listener, async move {
            signal.cancelled().await
        }));
        let kernel = Self {
            url: format!("http://{address}"),
            stop,
            task,
            _data_dir: data_dir,
        };
        kernel.wait_until_up().await?;
        Ok(kernel)
    }

    /// Polls `/v0/health` until it answers or the startup timeout passes.
    async fn wait_until_up(&self) -> Result<(), CliError> {
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
        loop {
            if self.task.is_finished() {
                return Err(CliError::Failed(
                    "the embedded kernel stopped during startup (see the log)".to_owned(),
                ));
            }
            let answered = client.get(format!("{}/v0/health", self.url)).send().await;
            if answered.is_ok_and(|response| response.status().is_success()) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CliError::Failed(format!(
                    "the embedded kernel did not answer within {STARTUP_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Shuts the kernel down gracefully and removes its data directory.
    pub async fn stop(self) -> Result<(), CliError> {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(CliError::Failed(format!("embedded kernel: {error:#}"))),
            Err(error) => Err(CliError::Failed(format!("embedded kernel task: {error}"))),
        }
    }
}
