//! `keel runner --mcp`: the runner's jobs are `tools/call` requests to one MCP server. The
//! server is started over stdio (the command after `--`) in a process group of its own with
//! only the allowed environment, initialised with the official Rust MCP SDK (`rmcp`), and its
//! tools are published as Keel tools (`<prefix><name>`, with the server's input schemas). A job
//! becomes one `tools/call`; the result is mapped by [`super::mcp_result`]. Dropping a call
//! (the kernel cancelled the job, or its time is up) sends `notifications/cancelled`; if the
//! server then does not answer a `ping` within the kill grace, it is taken for stuck in the
//! cancelled call and its process group is killed. A server that exits (or was killed) is
//! started again by the next job, after a backoff that grows with consecutive crashes; the
//! jobs it was running fail as retryable.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use rmcp::ClientHandler;
use rmcp::model::{CallToolRequestParams, ClientRequest, PingRequest};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, Notify};

use super::mcp_pins::{self, Pins};
use super::mcp_result;
use super::protocol::Outcome;

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
    pub http: Option<super::mcp_http::HttpTarget>,
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
    /// Digest of its definition ([`mcp_pins::digest`]).
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
    /// Why listed tools are withdrawn, by Keel tool id.
    withdrawn: RwLock<HashMap<String, String>>,
    /// The pinned definitions.
    pins: std::sync::Mutex<Pins>,
    /// Signalled when the published tools changed (they are to be published again).
    pub republish: Notify,
    /// Signalled by the server's `notifications/tools/list_changed`.
    list_changed: Arc<Notify>,
}

/// Receives the server's notifications.
struct Handler {
    list_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.list_changed.notify_one();
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
        let list_changed = Arc::new(Notify::new());
        let mut live = tokio::time::timeout(STARTUP_TIMEOUT, connect(&spec, &list_changed))
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
            pins: std::sync::Mutex::new(pins),
            republish: Notify::new(),
            list_changed,
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

    /// Checks a listing against the pins: tools whose definition changed, and new ones, are
    /// withdrawn (unless changes are accepted); signals `republish` when the published set
    /// changed.
    fn reconcile(&self, listed: Vec<Value>) {
        let tools = publishable(listed, &self.spec.prefix, &self.spec.only);
        let named: Vec<(String, String)> = tools
            .iter()
            .map(|tool| (tool.name.clone(), tool.digest.clone()))
            .collect();
        let (allowed, withdrawn, _) = match self.pins.lock() {
            Ok(mut pins) => {
                let checked = pins.check(&named, self.spec.accept_tool_changes);
                if checked.2
                    && let Some(path) = &self.spec.pin_file
                    && let Err(error) = pins.save(path)
                {
                    tracing::error!(%error, "cannot save the MCP tool pins");
                }
                checked
            }
            Err(_) => return,
        };
        let mut reasons = HashMap::new();
        for tool in &withdrawn {
            let id = format!("{}{}", self.spec.prefix, tool.name);
            let reason = tool.describe();
            tracing::warn!(
                tool = id,
                change = reason,
                "MCP tool withdrawn: its definition is not the pinned one (restart with --accept-tool-changes to accept it)"
            );
            reasons.insert(id, reason);
        }
        let active: HashMap<String, PublishedTool> = tools
            .into_iter()
            .filter(|tool| allowed.contains(&tool.name))
            .map(|tool| (tool.id.clone(), tool))
            .collect();
        let changed = match self.active.write() {
            Ok(mut current) => {
                let changed = *current != active;
                *current = active;
                changed
            }
            Err(_) => false,
        };
        if let Ok(mut current) = self.withdrawn.write() {
            *current = reasons;
        }
        if changed {
            self.republish.notify_one();
        }
    }

    /// Lists the tools again whenever the server says they changed.
    pub async fn watch_list_changes(self: Arc<Self>) {
        loop {
            self.list_changed.notified().await;
            let peer = {
                let state = self.state.lock().await;
                state.live.as_ref().map(|live| live.service.peer().clone())
            };
            let Some(peer) = peer else { continue };
            match tokio::time::timeout(STARTUP_TIMEOUT, list_peer_tools(&peer)).await {
                Ok(Ok(listed)) => {
                    tracing::info!("the MCP server's tool list changed; checking it");
                    self.reconcile(listed);
                }
                Ok(Err(error)) => tracing::warn!(%error, "cannot list the changed MCP tools"),
                Err(_) => tracing::warn!("listing the changed MCP tools timed out"),
            }
        }
    }

    /// Runs one job's `tools/call`. Dropping the future cancels the call
    /// (`notifications/cancelled` is sent to the server).
    pub async fn call(&self, tool_id: &str, arguments: &Value) -> Outcome {
        let name = self
            .active
            .read()
            .ok()
            .and_then(|active| active.get(tool_id).map(|tool| tool.name.clone()));
        let Some(name) = name else {
            let reason = self
                .withdrawn
                .read()
                .ok()
                .and_then(|withdrawn| withdrawn.get(tool_id).cloned());
            let message = match reason {
                Some(reason) => format!(
                    "MCP tool '{tool_id}' is withdrawn: {reason}; it is not callable until the change is accepted (--accept-tool-changes)"
                ),
                None => format!("No handler registered for tool '{tool_id}'"),
            };
            return Outcome::failure(message, false);
        };
        let arguments = match arguments {
            Value::Object(fields) => Some(fields.clone()),
            Value::Null => None,
            other => {
                return Outcome::failure(
                    format!("MCP tool arguments must be a JSON object, not {other}"),
                    false,
                );
            }
        };
        let (peer, generation) = match self.peer().await {
            Ok(peer) => peer,
            Err(error) => return Outcome::failure(error.to_string(), true),
        };
        let mut params = CallToolRequestParams::new(name);
        params.arguments = arguments;
        let result = peer.call_tool(params).await;
        if result.is_ok() {
            self.crashes.store(0, Ordering::Relaxed);
        }
        match result {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(result) => mcp_result::outcome(&result, self.spec.max_output),
                Err(error) => Outcome::failure(format!("unreadable MCP result: {error}"), false),
            },
            Err(ServiceError::McpError(error)) => Outcome::failure(
                format!("MCP error {}: {}", error.code.0, error.message),
                false,
            ),
            Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                self.forget(generation).await;
                Outcome::failure(format!("the MCP server went away: {error}"), true)
            }
            Err(error) => Outcome::failure(format!("MCP call failed: {error}"), true),
        }
    }

    /// After a call was cancelled (its future dropped, which sent `notifications/cancelled`):
    /// waits the kill grace, then pings the server; one that does not answer within the grace
    /// is stuck in the cancelled call, so its process group is killed and the next job starts
    /// it again.
    pub async fn after_cancel(self: Arc<Self>) {
        let (peer, generation) = {
            let state = self.state.lock().await;
            match &state.live {
                Some(live) => (live.service.peer().clone(), live.generation),
                None => return,
            }
        };
        let grace = self.spec.kill_grace;
        tokio::time::sleep(grace).await;
        let ping = ClientRequest::PingRequest(PingRequest::default());
        let answered = matches!(
            tokio::time::timeout(grace, peer.send_request(ping)).await,
            Ok(Ok(_))
        );
        if answered {
            return;
        }
        let mut state = self.state.lock().await;
        if let Some(live) = state.live.as_mut()
            && live.generation == generation
        {
            tracing::warn!(
                pid = ?live.group,
                "the MCP server did not answer a ping after a cancelled call; killing its process group"
            );
            stop(live, grace).await;
            state.live = None;
        }
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
                tokio::time::timeout(STARTUP_TIMEOUT, connect(&self.spec, &self.list_changed))
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

/// Pause before the start that follows `crashes` crashes in a row.
fn restart_delay(crashes: u32) -> Duration {
    let doublings = crashes.saturating_sub(1).min(16);
    (RESTART_MIN * 2_u32.pow(doublings)).min(RESTART_MAX)
}

/// Starts the process and runs the MCP handshake over its stdio (or, with `--mcp-url`,
/// connects over HTTP).
async fn connect(spec: &ServerSpec, list_changed: &Arc<Notify>) -> Result<Live, McpError> {
    if let Some(target) = &spec.http {
        let handler = Handler {
            list_changed: list_changed.clone(),
        };
        let service = super::mcp_http::connect(target, handler)
            .await
            .map_err(McpError::Initialize)?;
        tracing::info!(url = %target.url, server = ?service.peer_info().and_then(|info| info.server_info.as_ref().map(|server| server.name.clone())), "MCP server initialised");
        return Ok(Live {
            service,
            child: None,
            group: None,
            generation: 0,
        });
    }
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = &spec.workdir {
        command.current_dir(dir);
    }
    let mut child = command.spawn().map_err(McpError::Spawn)?;
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        signal_group(group, Signal::SIGKILL);
        return Err(McpError::Initialize("no stdio pipes".to_owned()));
    };
    let handler = Handler {
        list_changed: list_changed.clone(),
    };
    match handler.serve((stdout, stdin)).await {
        Ok(service) => {
            tracing::info!(pid = ?group, server = ?service.peer_info().and_then(|info| info.server_info.as_ref().map(|server| server.name.clone())), "MCP server initialised");
            Ok(Live {
                service,
                child: Some(child),
                group,
                generation: 0,
            })
        }
        Err(error) => {
            signal_group(group, Signal::SIGKILL);
            let _ = child.wait().await;
            Err(McpError::Initialize(error.to_string()))
        }
    }
}

/// Lists every tool of the server as JSON (`name`, `description`, `inputSchema`, …).
async fn list_tools(live: &Live) -> Result<Vec<Value>, McpError> {
    list_peer_tools(live.service.peer()).await
}

/// Lists every tool through a peer.
async fn list_peer_tools(peer: &rmcp::Peer<RoleClient>) -> Result<Vec<Value>, McpError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_LIST_PAGES {
        let params = cursor.clone().map(|cursor| {
            let mut params = rmcp::model::PaginatedRequestParams::default();
            params.cursor = Some(cursor);
            params
        });
        let page = peer
            .list_tools(params)
            .await
            .map_err(|error| McpError::List(error.to_string()))?;
        for tool in &page.tools {
            tools.push(
                serde_json::to_value(tool).map_err(|error| McpError::List(error.to_string()))?,
            );
        }
        match page.next_cursor {
            None => return Ok(tools),
            Some(next) => {
                if !seen.insert(next.clone()) {
                    return Err(McpError::List(format!(
                        "the cursor {next:?} came back twice"
                    )));
                }
                cursor = Some(next);
            }
        }
    }
    Err(McpError::List(format!("more than {MAX_LIST_PAGES} pages")))
}

/// Turns listed MCP tools into Keel tools: unusable names (empty, with a comma or whitespace)
/// and duplicates are dropped with a warning.
pub fn publishable(listed: Vec<Value>, prefix: &str, only: &[String]) -> Vec<PublishedTool> {
    let mut seen = std::collections::HashSet::new();
    let mut tools = Vec::new();
    for tool in listed {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            tracing::warn!("ignoring an MCP tool without a name");
            continue;
        };
        if !only.is_empty() && !only.iter().any(|allowed| allowed == name) {
            continue;
        }
        if name.is_empty() || name.contains(',') || name.chars().any(char::is_whitespace) {
            tracing::warn!(name, "ignoring an MCP tool whose name cannot be a tool id");
            continue;
        }
        if !seen.insert(name.to_owned()) {
            tracing::warn!(name, "ignoring a second MCP tool of the same name");
            continue;
        }
        let input_schema = tool
            .get("inputSchema")
            .filter(|schema| schema.is_object())
            .cloned()
            .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
        tools.push(PublishedTool {
            id: format!("{prefix}{name}"),
            name: name.to_owned(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            input_schema,
            digest: mcp_pins::digest(&tool),
        });
    }
    tools
}

/// The body of `POST /v0/runners/{id}/tools` for the published tools.
pub fn tools_body(tools: &[PublishedTool]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({
                "id": tool.id,
                "description": tool.description,
                "input_schema": tool.input_schema,
            })
        })
        .collect();
    json!({ "tools": tools })
}

/// Ends a session and its process: the session is closed (stdin ends), the group gets SIGTERM,
/// and SIGKILL after `grace`.
async fn stop(live: &mut Live, grace: Duration) {
    live.service.cancellation_token().cancel();
    let Some(child) = live.child.as_mut() else {
        return;
    };
    signal_group(live.group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        signal_group(live.group, Signal::SIGKILL);
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    // Whatever the server left behind in its group goes with it.
    signal_group(live.group, Signal::SIGKILL);
}

/// Sends `signal` to a process group (nothing when it is gone).
fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = killpg(group, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_half_a_second_to_thirty() {
        assert_eq!(restart_delay(1), Duration::from_millis(500));
        assert_eq!(restart_delay(2), Duration::from_secs(1));
        assert_eq!(restart_delay(4), Duration::from_secs(4));
        assert_eq!(restart_delay(10), RESTART_MAX);
        assert_eq!(restart_delay(u32::MAX), RESTART_MAX);
    }

    #[test]
    fn tools_are_prefixed_filtered_and_deduplicated() {
        let listed = vec![
            json!({ "name": "read", "description": "Reads.", "inputSchema": { "type": "object", "properties": { "p": {} } } }),
            json!({ "name": "read", "description": "again" }),
            json!({ "name": "bad name" }),
            json!({ "name": "a,b" }),
            json!({ "description": "no name" }),
            json!({ "name": "write" }),
        ];
        let tools = publishable(listed.clone(), "fs.", &[]);
        let ids: Vec<&str> = tools.iter().map(|tool| tool.id.as_str()).collect();
        assert_eq!(ids, ["fs.read", "fs.write"]);
        assert_eq!(tools[0].description, "Reads.");
        assert_eq!(
            tools[1].input_schema,
            json!({ "type": "object", "properties": {} })
        );
        let only = publishable(listed, "", &["write".to_owned()]);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].id, "write");
    }
}
