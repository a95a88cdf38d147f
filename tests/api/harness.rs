//! Test harness: a kernel on a fresh store (SQLite, or PostgreSQL with
//! `KEEL_TEST_BACKEND=postgres`: see `backend.rs`) served on `127.0.0.1:0`, an HTTP client with
//! helpers for JSON calls, a small SSE client, and scripted agent and runner helpers.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use keel::http::{AppState, ConnectionTimeouts, HttpSettings, router, serve};
use keel_actors::kernel::{Kernel, KernelConfig};
use keel_actors::policy::{Decision, PolicyDecision, PolicyEngine, PolicyInput};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::backend::TestStore;

/// How long a test waits for anything before failing.
pub const WAIT: Duration = Duration::from_secs(10);

/// Test policy: `shell_*` is denied, `approve_*` needs approval, everything else is allowed.
pub struct TestPolicy;

impl PolicyEngine for TestPolicy {
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        if input.tool_id.as_str().starts_with("shell_") {
            PolicyDecision::plain(Decision::Deny, "no-shell", "shell is forbidden")
        } else if input.tool_id.as_str().starts_with("approve_") {
            PolicyDecision::plain(
                Decision::RequireApproval,
                "needs-human",
                "a human must approve",
            )
        } else {
            PolicyDecision::plain(Decision::Allow, "allow-rest", "allowed")
        }
    }

    fn digest(&self) -> String {
        "test-policy".to_owned()
    }
}

/// A change to the kernel configuration that captures values.
pub type Configure = Arc<dyn Fn(&mut KernelConfig) + Send + Sync>;

/// Knobs of one test kernel.
pub struct Options {
    /// HTTP settings (token, limits, heartbeat).
    pub settings: HttpSettings,
    /// Changes the kernel configuration after the harness defaults (timeouts, graces).
    pub kernel: fn(&mut KernelConfig),
    /// Read deadlines of the server's connections.
    pub timeouts: ConnectionTimeouts,
    /// Changes the kernel configuration after `kernel`, with captured values (a policy with
    /// hooks on a test's ports).
    pub configure: Option<Configure>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            settings: HttpSettings {
                heartbeat: Duration::from_millis(300),
                ..HttpSettings::default()
            },
            kernel: |_| {},
            timeouts: ConnectionTimeouts::default(),
            configure: None,
        }
    }
}

/// A running kernel and a client for it.
pub struct TestKernel {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// Client without a default token.
    pub client: reqwest::Client,
    /// Token sent by the helpers, when the kernel requires one.
    pub token: Option<String>,
    /// The kernel handle (for checks that bypass HTTP).
    pub kernel: Kernel,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    /// The database (dropped with the kernel); a restarted kernel reopens `store.url`.
    pub store: TestStore,
}

/// Installs a log subscriber once, only when `RUST_LOG` is set.
fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

impl TestKernel {
    /// Starts a kernel with the default options.
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    /// Starts a kernel with `options` on a fresh store of the configured backend.
    pub async fn start_with(options: Options) -> Self {
        Self::start_on(options, TestStore::fresh().await).await
    }

    /// Starts a kernel with `options` on `test_store`.
    pub async fn start_on(options: Options, test_store: TestStore) -> Self {
        init_tracing();
        let store = keel::store::open(&test_store.url, &Default::default())
            .await
            .expect("store opens");
        let mut config = KernelConfig::new(store, Arc::new(TestPolicy));
        config.agent_grace = Duration::from_millis(500);
        (options.kernel)(&mut config);
        if let Some(configure) = &options.configure {
            configure(&mut config);
        }
        let kernel = keel_actors::kernel::start(config)
            .await
            .expect("kernel starts");
        let token = options.settings.bearer_token.clone();
        let shutdown = CancellationToken::new();
        let app = router(AppState::new(
            kernel.clone(),
            options.settings,
            shutdown.clone(),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("local addr");
        let signal = shutdown.clone();
        let timeouts = options.timeouts;
        let server = tokio::spawn(async move {
            serve(listener, app, timeouts, signal.cancelled_owned())
                .await
                .expect("server runs");
        });
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        Self {
            base_url: format!("http://{address}"),
            client,
            token,
            kernel,
            shutdown,
            server,
            store: test_store,
        }
    }

    /// Stops the server (open streams end) and the kernel; fails if either hangs.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.server)
            .await
            .expect("server stops in time")
            .expect("server task");
        tokio::time::timeout(WAIT, self.kernel.shutdown())
            .await
            .expect("kernel stops in time");
    }

    /// Stops this kernel as [`shutdown`](Self::shutdown) does and starts a new one with
    /// `options` on the same store: a restart mid-flight. The new kernel listens on a new
    /// port; agents and runners reconnect to its `base_url`.
    pub async fn restart(self, options: Options) -> Self {
        self.restart_after(options, Duration::ZERO).await
    }

    /// Like [`Self::restart`], with the kernel down for `down` in between (timers that come
    /// due while it is down).
    pub async fn restart_after(self, options: Options, down: Duration) -> Self {
        let Self {
            kernel,
            shutdown,
            server,
            store,
            ..
        } = self;
        shutdown.cancel();
        tokio::time::timeout(WAIT, server)
            .await
            .expect("server stops in time")
            .expect("server task");
        tokio::time::timeout(WAIT, kernel.shutdown())
            .await
            .expect("kernel stops in time");
        drop(kernel);
        tokio::time::sleep(down).await;
        Self::start_on(options, store).await
    }

    /// Returns the absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends a request built by `build` (with the token) and returns status and JSON body
    /// (`Null` for an empty body).
    pub async fn send(&self, build: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = self.authorize(build).send().await.expect("request sent");
        let status = response.status();
        let bytes = response.bytes().await.expect("body read");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| panic!("JSON body, got {:?}", String::from_utf8_lossy(&bytes)))
        };
        (status, body)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.get(self.url(path))).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.client.post(self.url(path)).json(body)).await
    }

    /// `POST path` with raw bytes as an `application/json` body.
    pub async fn post_raw(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        self.send(
            self.client
                .post(self.url(path))
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    /// Creates an execution and returns the Execution object.
    pub async fn create(&self, agent_id: &str, input: Value) -> Value {
        let (status, body) = self
            .post(
                "/v0/executions",
                &json!({ "agent_id": agent_id, "input": input }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// Returns the whole event log of an execution (paging through it).
    pub async fn events(&self, execution_id: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let after = events.len();
            let (status, body) = self
                .get(&format!(
                    "/v0/executions/{execution_id}/events?after_sequence={after}&limit=1000"
                ))
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let page = body["events"].as_array().expect("events array").clone();
            if page.is_empty() {
                return events;
            }
            events.extend(page);
        }
    }

    /// Returns the event types of an execution's log, in order.
    pub async fn event_types(&self, execution_id: &str) -> Vec<String> {
        self.events(execution_id)
            .await
            .iter()
            .map(|event| event["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Returns the execution's current status.
    pub async fn status(&self, execution_id: &str) -> String {
        let (status, body) = self.get(&format!("/v0/executions/{execution_id}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["status"].as_str().expect("status").to_owned()
    }

    /// Opens an SSE stream at `path_and_query` (with the token), expecting 200.
    pub async fn sse(&self, path_and_query: &str) -> SseClient {
        self.sse_with(path_and_query, &[]).await
    }

    /// Opens an SSE stream at `path_and_query` with extra request headers, expecting 200.
    pub async fn sse_with(&self, path_and_query: &str, headers: &[(&str, &str)]) -> SseClient {
        let mut request = self.authorize(self.client.get(self.url(path_and_query)));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("stream opens");
        assert_eq!(response.status(), StatusCode::OK, "stream {path_and_query}");
        SseClient::new(response)
    }
}

/// Asserts an error envelope: status, code and (when given) the exact message.
pub fn assert_error(
    response: &(StatusCode, Value),
    status: StatusCode,
    code: &str,
    message: Option<&str>,
) {
    let (actual_status, body) = response;
    assert_eq!(*actual_status, status, "body: {body}");
    assert_eq!(body["code"], code, "body: {body}");
    assert!(body["error"].is_string(), "body: {body}");
    if let Some(message) = message {
        assert_eq!(body["error"], message, "body: {body}");
    }
    let keys: BTreeSet<&str> = body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["code", "error"]), "body: {body}");
}

/// Polls `check` until it returns `Some`, failing after [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One SSE message as read off the wire.
#[derive(Clone, Debug, Default)]
pub struct SseMessage {
    /// `id:` value.
    pub id: Option<String>,
    /// `event:` value.
    pub event: String,
    /// Parsed `data:`.
    pub data: Value,
}

/// A minimal line-based SSE reader that also keeps the raw text (for framing checks).
pub struct SseClient {
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    body: BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    pending: String,
    /// Everything received so far.
    pub raw: String,
    /// Comment lines seen (e.g. `heartbeat`).
    pub comments: Vec<String>,
}

impl SseClient {
    pub fn new(response: reqwest::Response) -> Self {
        let headers = response.headers().clone();
        Self {
            headers,
            body: response.bytes_stream().boxed(),
            pending: String::new(),
            raw: String::new(),
            comments: Vec::new(),
        }
    }

    /// Returns the next message, `None` when the stream ended; fails after [`WAIT`].
    pub async fn next(&mut self) -> Option<SseMessage> {
        tokio::time::timeout(WAIT, self.next_message())
            .await
            .expect("SSE message in time")
    }

    /// Returns the next message of type `event`, skipping others.
    pub async fn next_of(&mut self, event: &str) -> SseMessage {
        loop {
            let message = self
                .next()
                .await
                .unwrap_or_else(|| panic!("stream ended before {event}"));
            if message.event == event {
                return message;
            }
        }
    }

    /// Returns whether the stream ends (without another message) within [`WAIT`].
    pub async fn ends(&mut self) -> bool {
        self.next().await.is_none()
    }

    /// Waits until the raw stream contains `needle`.
    pub async fn wait_raw(&mut self, needle: &str) {
        tokio::time::timeout(WAIT, async {
            while !self.raw.contains(needle) {
                if !self.read_chunk().await {
                    panic!("stream ended before {needle:?}");
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {needle:?} in time"));
    }

    async fn read_chunk(&mut self) -> bool {
        match self.body.next().await {
            Some(Ok(chunk)) => {
                let text = String::from_utf8_lossy(&chunk);
                self.raw.push_str(&text);
                self.pending.push_str(&text);
                true
            }
            _ => false,
        }
    }

    async fn next_message(&mut self) -> Option<SseMessage> {
        let mut message = SseMessage::default();
        let mut data = String::new();
        loop {
            while let Some(end) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=end).collect();
                let line = line.trim_end_matches('\n');
                if line.is_empty() {
                    if !message.event.is_empty() && !data.is_empty() {
                        message.data = serde_json::from_str(&data).expect("data is JSON");
                        return Some(message);
                    }
                    continue;
                }
                if let Some(comment) = line.strip_prefix(':') {
                    self.comments.push(comment.to_owned());
                } else if let Some(value) = line.strip_prefix("event:") {
                    message.event = value.trim_start().to_owned();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.strip_prefix(' ').unwrap_or(value));
                } else if let Some(value) = line.strip_prefix("id:") {
                    message.id = Some(value.trim_start().to_owned());
                }
            }
            if !self.read_chunk().await {
                return None;
            }
        }
    }
}

/// An assignment received by a [`TestAgent`].
#[derive(Clone, Debug)]
pub struct Assignment {
    /// Execution id.
    pub execution_id: String,
    /// Session id.
    pub session_id: String,
    /// The whole `execution.assigned` data.
    pub data: Value,
}

/// A scripted agent: one SSE connection and helpers to act on assignments.
pub struct TestAgent {
    /// Agent id.
    pub agent_id: String,
    /// Consumer id.
    pub consumer_id: String,
    /// Its push stream.
    pub stream: SseClient,
}

impl TestAgent {
    /// Connects `agent_id` with a fresh consumer id.
    pub async fn connect(kernel: &TestKernel, agent_id: &str) -> Self {
        let consumer_id = format!(
            "{agent_id}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let stream = kernel
            .sse(&format!(
                "/v0/agents/stream?agent_id={agent_id}&consumer_id={consumer_id}"
            ))
            .await;
        Self {
            agent_id: agent_id.to_owned(),
            consumer_id,
            stream,
        }
    }

    /// Drops the connection and reconnects with the same agent and consumer ids.
    pub async fn reconnect(&mut self, kernel: &TestKernel) {
        let path = format!(
            "/v0/agents/stream?agent_id={}&consumer_id={}",
            self.agent_id, self.consumer_id
        );
        self.stream = kernel.sse(&path).await;
    }

    /// Waits for the next `execution.assigned`.
    pub async fn assignment(&mut self) -> Assignment {
        let message = self.stream.next_of("execution.assigned").await;
        Assignment {
            execution_id: message.data["execution_id"]
                .as_str()
                .expect("execution_id")
                .to_owned(),
            session_id: message.data["session_id"]
                .as_str()
                .expect("session_id")
                .to_owned(),
            data: message.data,
        }
    }
}

impl Assignment {
    /// Posts an intent for this assignment.
    pub async fn intent(&self, kernel: &TestKernel, intent: Value) -> (StatusCode, Value) {
        let body = json!({ "execution_id": self.execution_id, "session_id": self.session_id, "intent": intent });
        kernel.post("/v0/agents/intent", &body).await
    }

    /// Invokes a local tool and returns its step id (the intent must be accepted).
    pub async fn invoke(&self, kernel: &TestKernel, tool_id: &str) -> String {
        let (status, body) = self
            .intent(
                kernel,
                json!({ "type": "invoke_tool", "tool_id": tool_id, "arguments": {"q": 1} }),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["accepted"], true, "{body}");
        body["step_id"].as_str().expect("step_id").to_owned()
    }

    /// Posts a step result for this assignment.
    pub async fn step_result(
        &self,
        kernel: &TestKernel,
        step_id: &str,
        success: bool,
        data: Value,
    ) -> (StatusCode, Value) {
        let body = json!({
            "execution_id": self.execution_id, "session_id": self.session_id, "step_id": step_id,
            "success": success, "data": data, "error": if success { Value::Null } else { json!("boom") },
        });
        kernel.post("/v0/agents/step-result", &body).await
    }

    /// Completes the execution with `output`.
    pub async fn complete(&self, kernel: &TestKernel, output: Value) {
        let (status, body) = self
            .intent(kernel, json!({ "type": "complete", "output": output }))
            .await;
        assert_eq!(
            (status, &body["accepted"]),
            (StatusCode::OK, &json!(true)),
            "{body}"
        );
    }
}

/// Starts a kernel, connects an agent and creates one execution assigned to it.
pub async fn running_execution(kernel: &TestKernel, agent_id: &str) -> (TestAgent, Assignment) {
    let mut agent = TestAgent::connect(kernel, agent_id).await;
    let created = kernel.create(agent_id, json!({ "prompt": "hi" })).await;
    let assignment = agent.assignment().await;
    assert_eq!(assignment.execution_id, created["id"]);
    (agent, assignment)
}

/// A scripted runner connection.
pub struct TestRunner {
    /// Runner id.
    pub runner_id: String,
    /// Consumer id.
    pub consumer_id: String,
    /// Its job stream.
    pub stream: SseClient,
}

impl TestRunner {
    /// Connects `runner_id` offering `capabilities`.
    pub async fn connect(kernel: &TestKernel, runner_id: &str, capabilities: &[&str]) -> Self {
        let consumer_id = format!(
            "{runner_id}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let path = format!(
            "/v0/runners/stream?runner_id={runner_id}&consumer_id={consumer_id}&capabilities={}",
            capabilities.join(",")
        );
        let stream = kernel.sse(&path).await;
        Self {
            runner_id: runner_id.to_owned(),
            consumer_id,
            stream,
        }
    }

    /// Waits for the next `job.assigned` and returns its data.
    pub async fn job(&mut self) -> Value {
        self.stream.next_of("job.assigned").await.data
    }

    /// Posts a result for `job`.
    pub async fn result(
        &self,
        kernel: &TestKernel,
        job: &Value,
        success: bool,
        data: Value,
    ) -> (StatusCode, Value) {
        let body = json!({
            "job_id": job["id"], "execution_id": job["execution_id"], "step_id": job["step_id"],
            "success": success, "data": data, "consumer_id": self.consumer_id,
            "error": if success { Value::Null } else { json!("tool broke") },
        });
        kernel
            .post(&format!("/v0/runners/{}/results", self.runner_id), &body)
            .await
    }
}

/// Puts in force a policy file made of `head` (Keel blocks such as `concurrency:` or
/// `circuit_breakers:`) followed by one rule allowing every call.
pub fn install_allow_all_policy(config: &mut keel_actors::kernel::KernelConfig, head: &str) {
    const RULES: &str = r#"
rules:
  - id: allow-all
    priority: 1
    when: {}
    then:
      decision: allow
"#;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, format!("{head}{RULES}")).expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}
