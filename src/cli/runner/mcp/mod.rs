//! `keel runner --mcp`: the runner's jobs are `tools/call` requests to one MCP server. The
//! server is started over stdio (the command after `--`) in a process group of its own with
//! only the allowed environment, initialised with the official Rust MCP SDK (`rmcp`), and its
//! tools are published as Keel tools (`<prefix><name>`, with the server's input schemas). A job
//! becomes one `tools/call`; the result is mapped by [`result`]. Dropping a call
//! (the kernel cancelled the job, or its time is up) sends `notifications/cancelled`; if the
//! server then does not answer a `ping` within the kill grace, it is taken for stuck in the
//! cancelled call and its process group is killed. A server that exits (or was killed) is
//! started again by the next job, after a backoff that grows with consecutive crashes; the
//! jobs it was running fail as retryable.

mod calls;
mod changes;
pub mod http;
mod listing;
mod pins;
mod result;
mod spawn;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use nix::unistd::Pid;

use rmcp::ClientHandler;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use serde_json::Value;
use tokio::process::Child;
use tokio::sync::{Mutex, Notify};

pub use self::calls::{ProgressUpdate, progress_channel};
use self::listing::list_tools;
pub use self::listing::tools_body;
use self::pins::Pins;
use self::spawn::{connect, restart_delay, stop};

/// Time allowed to start a server, initialise it and list its tools.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest run of `tools/list` pages followed (a server that never stops paging is refused).
const MAX_LIST_PAGES: usize = 100;
/// First pause before starting a crashed server again; doubled per crash up to [`RESTART_MAX`].
const RESTART_MIN: Duration = Duration::from_millis(500);
/// Longest pause before starting a crashed server again.
const RESTART_MAX: Duration = Duration::from_secs(30);

/// How the MCP server is started, fixed when the runner starts.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Working directory (the runner's own when `None`).
    pub workdir: Option<PathBuf>,
    /// The whole environment of the server.
    pub env: Vec<(OsString, OsString)>,
    /// Time between SIGTERM and SIGKILL when the server is stopped.
    pub kill_grace: Duration,
    /// Most bytes of a mapped result; more is cut with a truncation marker.
    pub max_output: usize,
    /// Prefix of the published tool ids.
    pub prefix: String,
    /// MCP tool names to publish (all when empty).
    pub only: Vec<String>,
    /// Accept changed or new tool definitions (pin them as listed) instead of withdrawing them.
    pub accept_tool_changes: bool,
    /// Where the pins are kept across runs (in memory only when `None`).
    pub pin_file: Option<PathBuf>,
    /// `--mcp-url`: the server is reached over Streamable HTTP (nothing is started; `program`,
    /// `args`, `workdir` and `env` are unused).
    pub http: Option<http::HttpTarget>,
}

/// One MCP tool as published: the Keel id and the MCP name it calls.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedTool {
    /// Keel tool id (`<prefix><name>`).
    pub id: String,
    /// The tool's MCP name.
    pub name: String,
    /// Its description ("" when the server gave none).
    pub description: String,
    /// Its input schema (a JSON object).
    pub input_schema: Value,
    /// Digest of its definition ([`pins::digest`]).
    pub digest: String,
}

/// A running server: the MCP session and the process behind it.
struct Live {
    service: RunningService<RoleClient, Handler>,
    /// The server process (none for a server reached over HTTP).
    child: Option<Child>,
    group: Option<Pid>,
    /// Counts the servers started, to tell this one from its successors.
    generation: u64,
}

/// The running server, if any.
#[derive(Default)]
struct State {
    live: Option<Live>,
    generations: u64,
}

/// The MCP server behind a runner: started on demand, shared by all jobs.
pub struct McpServer {
    spec: ServerSpec,
    state: Mutex<State>,
    /// Crashes (exits, failed starts) since the last call that got an answer.
    crashes: AtomicU32,
    /// The published tools, by Keel tool id.
    active: RwLock<HashMap<String, PublishedTool>>,
    /// Listed tools withdrawn because their definition is not the pinned one, by Keel tool id.
    withdrawn: RwLock<HashMap<String, pins::Withdrawn>>,
    /// The last listing of the server's tools (checked again when a change is accepted).
    listing: std::sync::Mutex<Vec<Value>>,
    /// Signalled when the withdrawn tools changed (they are to be reported to the kernel).
    pub changes: Notify,
    /// The pinned definitions.
    pins: std::sync::Mutex<Pins>,
    /// Signalled when the published tools changed (they are to be published again).
    pub republish: Notify,
    /// Receives the server's notifications (shared by every session).
    notices: Handler,
}

/// Receives the server's notifications.
#[derive(Clone, Default)]
struct Handler {
    /// Signalled by the server's `notifications/tools/list_changed`.
    list_changed: Arc<Notify>,
    /// Where the progress of each call in flight goes, by its progress token.
    progress: calls::ProgressRoutes,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.list_changed.notify_one();
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.progress.deliver(params);
        std::future::ready(())
    }
}

/// Why a server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The process could not be started.
    #[error("cannot start the MCP server: {0}")]
    Spawn(std::io::Error),
    /// The MCP handshake failed.
    #[error("the MCP server did not initialise: {0}")]
    Initialize(String),
    /// Listing the tools failed.
    #[error("the MCP server did not list its tools: {0}")]
    List(String),
    /// Start-up took too long.
    #[error("the MCP server did not start within {0:?}")]
    Timeout(Duration),
    /// The pin file cannot be used.
    #[error("{0}")]
    Pins(String),
}

impl McpServer {
    /// Starts the server, initialises it, lists its tools and checks them against the pins
    /// (the pin file's, else the first listing is pinned).
    pub async fn start(spec: ServerSpec) -> Result<Self, McpError> {
        let pins = match &spec.pin_file {
            Some(path) => Pins::load(path).map_err(McpError::Pins)?,
            None => Pins::default(),
        };
        let notices = Handler::default();
        let mut live = tokio::time::timeout(STARTUP_TIMEOUT, connect(&spec, notices.clone()))
            .await
            .map_err(|_| McpError::Timeout(STARTUP_TIMEOUT))??;
        live.generation = 1;
        let listed = match tokio::time::timeout(STARTUP_TIMEOUT, list_tools(&live)).await {
            Ok(Ok(listed)) => listed,
            Ok(Err(error)) => {
                stop(&mut live, spec.kill_grace).await;
                return Err(error);
            }
            Err(_) => {
                stop(&mut live, spec.kill_grace).await;
                return Err(McpError::Timeout(STARTUP_TIMEOUT));
            }
        };
        let server = Self {
            spec,
            state: Mutex::new(State {
                live: Some(live),
                generations: 1,
            }),
            crashes: AtomicU32::new(0),
            active: RwLock::default(),
            withdrawn: RwLock::default(),
            listing: std::sync::Mutex::default(),
            changes: Notify::new(),
            pins: std::sync::Mutex::new(pins),
            republish: Notify::new(),
            notices,
        };
        server.reconcile(listed);
        Ok(server)
    }

    /// The published tools, ordered by id.
    pub fn published(&self) -> Vec<PublishedTool> {
        let mut tools: Vec<PublishedTool> = self
            .active
            .read()
            .map(|active| active.values().cloned().collect())
            .unwrap_or_default();
        tools.sort_by(|left, right| left.id.cmp(&right.id));
        tools
    }

    /// The body of `POST /v0/runners/{id}/tools`.
    pub fn tools_body(&self) -> Value {
        tools_body(&self.published())
    }

    /// Stops the server: SIGTERM to its group, SIGKILL after the grace.
    pub async fn shutdown(&self) {
        if let Some(mut live) = self.state.lock().await.live.take() {
            stop(&mut live, self.spec.kill_grace).await;
        }
    }

    /// The session's peer and its generation, starting the server again when it is gone
    /// (after a backoff when it crashed).
    async fn peer(&self) -> Result<(rmcp::Peer<RoleClient>, u64), McpError> {
        let mut state = self.state.lock().await;
        if let Some(current) = state.live.as_mut()
            && current.service.is_closed()
        {
            tracing::warn!(pid = ?current.group, "the MCP server went away");
            stop(current, self.spec.kill_grace).await;
            state.live = None;
            self.crashes.fetch_add(1, Ordering::Relaxed);
        }
        if state.live.is_none() {
            let crashes = self.crashes.load(Ordering::Relaxed);
            if crashes > 0 {
                let delay = restart_delay(crashes);
                tracing::info!(
                    crashes,
                    ?delay,
                    "starting the MCP server again after a pause"
                );
                tokio::time::sleep(delay).await;
            }
            let started =
                tokio::time::timeout(STARTUP_TIMEOUT, connect(&self.spec, self.notices.clone()))
                    .await;
            let mut live = match started {
                Ok(Ok(live)) => live,
                Ok(Err(error)) => {
                    self.crashes.fetch_add(1, Ordering::Relaxed);
                    return Err(error);
                }
                Err(_) => {
                    self.crashes.fetch_add(1, Ordering::Relaxed);
                    return Err(McpError::Timeout(STARTUP_TIMEOUT));
                }
            };
            state.generations += 1;
            live.generation = state.generations;
            // A restarted server may list other definitions: check them against the pins.
            match tokio::time::timeout(STARTUP_TIMEOUT, list_tools(&live)).await {
                Ok(Ok(listed)) => self.reconcile(listed),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "cannot list the restarted MCP server's tools")
                }
                Err(_) => tracing::warn!("listing the restarted MCP server's tools timed out"),
            }
            state.live = Some(live);
        }
        state
            .live
            .as_ref()
            .map(|live| (live.service.peer().clone(), live.generation))
            .ok_or_else(|| McpError::Initialize("no session".to_owned()))
    }

    /// Drops the session of `generation` (its transport closed), killing what is left of
    /// the process; counts a crash.
    async fn forget(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if let Some(current) = state.live.as_mut()
            && current.generation == generation
        {
            tracing::warn!(pid = ?current.group, "the MCP server went away");
            stop(current, self.spec.kill_grace).await;
            state.live = None;
            self.crashes.fetch_add(1, Ordering::Relaxed);
        }
    }
}
