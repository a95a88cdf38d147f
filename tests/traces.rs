//! OpenTelemetry export end to end: a `keel dev --otel-endpoint` child process sends its spans
//! over OTLP/HTTP (protobuf) to a receiver in this test, which decodes them with
//! opentelemetry-proto. A request carrying a W3C `traceparent` joins that trace, and its span
//! names the route and carries the execution and agent ids; the spans of one whole execution
//! (messages, policy, commits, steps, pushes, store transactions) form one tree under its
//! create request, and its pushes carry its trace context. Without an endpoint nothing of a
//! trace is recorded or pushed.
//!
//! The kernel runs on a fresh SQLite file, or with `KEEL_TEST_BACKEND=postgres` on a fresh
//! PostgreSQL database (whose commits go through the store writer's groups).

#[path = "api/backend.rs"]
#[allow(dead_code)]
mod backend;

use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

#[path = "traces/llm.rs"]
mod llm;

const WAIT: Duration = Duration::from_secs(20);

/// Starts an OTLP/HTTP receiver on a free port; every exported span arrives on the channel.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Span>) {
    let (spans, received) = mpsc::unbounded_channel();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let spans = spans.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            let _ = spans.send(span);
                        }
                    }
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
        .map(|value| match value {
            AnyValue::StringValue(text) => text.clone(),
            AnyValue::IntValue(number) => number.to_string(),
            other => format!("{other:?}"),
        })
}

/// A `keel dev` child process.
struct Kernel {
    /// Killed on drop.
    _child: tokio::process::Child,
    address: String,
    _data: tempfile::TempDir,
    _store: backend::TestStore,
}

impl Kernel {
    /// Starts `keel dev`, exporting to `endpoint` when given.
    async fn start(endpoint: Option<&str>) -> Self {
        Self::start_with(endpoint, &[]).await
    }

    /// [`Kernel::start`] with more flags.
    async fn start_with(endpoint: Option<&str>, extra: &[&str]) -> Self {
        let data = tempfile::tempdir().unwrap();
        let store = backend::TestStore::fresh().await;
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
        command
            .args(["dev", "--port", "0", "--log-level", "info"])
            .args(extra)
            .arg("--data-dir")
            .arg(data.path())
            .arg("--db-url")
            .arg(&store.url)
            .env_clear()
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(endpoint) = endpoint {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
        }
        let mut child = command.spawn().unwrap();
        let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
        let address = tokio::time::timeout(WAIT, async {
            while let Ok(Some(line)) = log.next_line().await {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    return rest.split_whitespace().next().map(str::to_owned);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .expect("keel dev reports its address");
        tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
        Self {
            _child: child,
            address,
            _data: data,
            _store: store,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Creates an execution with `body` under a client `traceparent`; returns the answer.
    async fn create_traced(&self, traceparent: &str, body: serde_json::Value) -> serde_json::Value {
        reqwest::Client::new()
            .post(self.url("/v0/executions"))
            .header("traceparent", traceparent)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        let response = reqwest::Client::new()
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        response.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        reqwest::get(self.url(path))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until `count` execution actors were passivated.
    async fn passivated(&self, count: u32) {
        tokio::time::timeout(WAIT, async {
            loop {
                let metrics = reqwest::get(self.url("/metrics"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                let passivated = metrics
                    .lines()
                    .find(|line| line.starts_with("keel_execution_passivations_total"))
                    .and_then(|line| line.split_whitespace().last()?.parse::<f64>().ok());
                if passivated.is_some_and(|passivated| passivated >= f64::from(count)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the execution is passivated");
    }

    /// Opens an SSE stream (the connection is registered once the head arrives).
    async fn stream(&self, path: &str) -> Stream {
        let response = reqwest::get(self.url(path)).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        Stream {
            body: Box::pin(response.bytes_stream()),
            pending: String::new(),
        }
    }
}

/// A minimal SSE reader: `event:` and one `data:` line per message.
struct Stream {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Bytes>> + Send>>,
    pending: String,
}

impl Stream {
    /// Returns the data of the next message named `event`, skipping others.
    async fn next_of(&mut self, event: &str) -> serde_json::Value {
        use futures::StreamExt as _;
        tokio::time::timeout(WAIT, async {
            loop {
                while let Some(end) = self.pending.find("\n\n") {
                    let message: String = self.pending.drain(..end + 2).collect();
                    let mut name = "";
                    let mut data = "";
                    for line in message.lines() {
                        if let Some(value) = line.strip_prefix("event:") {
                            name = value.trim();
                        } else if let Some(value) = line.strip_prefix("data:") {
                            data = value.trim();
                        }
                    }
                    if name == event {
                        return serde_json::from_str(data).expect("JSON data");
                    }
                }
                let chunk = self.body.next().await.expect("stream open").unwrap();
                self.pending.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{event} in time"))
    }
}

#[tokio::test]
async fn a_client_traceparent_is_joined_and_spans_are_exported_over_otlp_http() {
    let (endpoint, mut spans) = receiver().await;
    let kernel = Kernel::start(Some(&endpoint)).await;
    let address = &kernel.address;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let created = kernel
        .create_traced(
            &format!("00-{trace_id}-{parent_id}-01"),
            serde_json::json!({"agent_id": "traced-agent"}),
        )
        .await;
    let execution_id = created["id"].as_str().unwrap().to_owned();
    let untraced = reqwest::get(format!("http://{address}/v0/executions/{execution_id}"))
        .await
        .unwrap();
    assert_eq!(untraced.status(), 200);

    let mut create = None;
    let mut get = None;
    tokio::time::timeout(WAIT, async {
        while create.is_none() || get.is_none() {
            let span = spans.recv().await.expect("receiver open");
            match span.name.as_str() {
                "POST /v0/executions" => create = Some(span),
                "GET /v0/executions/{id}" => get = Some(span),
                _ => {}
            }
        }
    })
    .await
    .expect("both request spans exported");
    let (create, get) = (create.unwrap(), get.unwrap());
    assert_eq!(
        hex(&create.trace_id),
        trace_id,
        "the client's trace is joined"
    );
    assert_eq!(hex(&create.parent_span_id), parent_id);
    assert_eq!(
        attribute(&create, "agent.id").as_deref(),
        Some("traced-agent")
    );
    assert_eq!(
        attribute(&create, "execution.id").as_deref(),
        Some(execution_id.as_str())
    );
    assert_eq!(
        attribute(&create, "http.response.status_code").as_deref(),
        Some("201")
    );
    // A request without traceparent starts a trace of its own.
    assert_ne!(hex(&get.trace_id), trace_id);
    assert!(get.parent_span_id.is_empty(), "a root span");
    drop(kernel);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Receives spans until `done` says the collection is complete.
async fn collect(
    spans: &mut mpsc::UnboundedReceiver<Span>,
    mut done: impl FnMut(&[Span]) -> bool,
) -> Vec<Span> {
    let mut all = Vec::new();
    tokio::time::timeout(WAIT, async {
        while !done(&all) {
            all.push(spans.recv().await.expect("receiver open"));
        }
    })
    .await
    .unwrap_or_else(|_| {
        let names: Vec<&str> = all.iter().map(|span| span.name.as_str()).collect();
        panic!("spans in time; got {names:?}")
    });
    all
}

/// Names of the spans of the execution actor's messages seen in the whole-execution test.
const MESSAGES: [&str; 5] = [
    "assign",
    "intent",
    "step result",
    "runner result",
    "job claim",
];

/// How many `commit` spans of the trace a `store commit` span links to.
fn commits_linked(spans: &[Span], trace_id: &str) -> usize {
    let linked: Vec<&[u8]> = spans
        .iter()
        .filter(|span| span.name == "store commit")
        .flat_map(|span| span.links.iter())
        .map(|link| link.span_id.as_slice())
        .collect();
    spans
        .iter()
        .filter(|span| span.name == "commit" && hex(&span.trace_id) == trace_id)
        .filter(|span| linked.contains(&span.span_id.as_slice()))
        .count()
}

/// The spans named `name` whose `key` attribute is `value`.
fn named<'a>(spans: &'a [Span], name: &str, key: &str, value: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|span| span.name == name && attribute(span, key).as_deref() == Some(value))
        .collect()
}

/// The only span named `name` with `key` = `value`.
fn one<'a>(spans: &'a [Span], name: &str, key: &str, value: &str) -> &'a Span {
    let found = named(spans, name, key, value);
    assert_eq!(found.len(), 1, "one {name} with {key}={value}");
    found[0]
}

fn children<'a>(spans: &'a [Span], parent: &Span, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|span| span.name == name && span.parent_span_id == parent.span_id)
        .collect()
}

#[tokio::test]
async fn one_execution_is_one_span_tree_and_its_pushes_carry_its_trace() {
    let (endpoint, mut spans) = receiver().await;
    let kernel = Kernel::start(Some(&endpoint)).await;
    let mut agent = kernel
        .stream("/v0/agents/stream?agent_id=traced&consumer_id=traced-1")
        .await;
    let mut runner = kernel
        .stream("/v0/runners/stream?runner_id=r1&consumer_id=r1-1&capabilities=remote.tool")
        .await;

    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let created = kernel
        .create_traced(
            &format!("00-{trace_id}-b7ad6b7169203331-01"),
            serde_json::json!({"agent_id": "traced", "input": {"q": 1}}),
        )
        .await;
    let execution_id = created["id"].as_str().unwrap().to_owned();
    let assigned = agent.next_of("execution.assigned").await;
    let session_id = assigned["session_id"].as_str().unwrap().to_owned();
    let execution_traceparent = assigned["traceparent"]
        .as_str()
        .expect("traceparent pushed");
    assert!(
        execution_traceparent.starts_with(&format!("00-{trace_id}-")),
        "{execution_traceparent}"
    );
    let intent = |intent: serde_json::Value| serde_json::json!({"execution_id": execution_id, "session_id": session_id, "intent": intent});

    // A local step: the agent runs it and reports the result.
    let local = kernel
        .post(
            "/v0/agents/intent",
            &intent(serde_json::json!({"type": "invoke_tool", "tool_id": "local.tool", "arguments": {}})),
        )
        .await;
    let local_step = local["step_id"].as_str().unwrap().to_owned();
    kernel
        .post(
            "/v0/agents/step-result",
            &serde_json::json!({"execution_id": execution_id, "session_id": session_id,
                "step_id": local_step, "success": true, "data": {"ok": 1}}),
        )
        .await;
    let result = agent.next_of("tool.result").await;
    assert_eq!(result["step_id"], *local_step);
    assert_eq!(result["traceparent"], *execution_traceparent);
    // A remote step: the runner gets the job with the step's trace context.
    let remote = kernel
        .post(
            "/v0/agents/intent",
            &intent(serde_json::json!({"type": "invoke_tool", "tool_id": "remote.tool", "arguments": {}, "remote": true})),
        )
        .await;
    let remote_step = remote["step_id"].as_str().unwrap().to_owned();
    let job = runner.next_of("job.assigned").await;
    let job_traceparent = job["traceparent"].as_str().expect("traceparent on the job");
    kernel
        .post(
            "/v0/runners/r1/results",
            &serde_json::json!({"job_id": job["id"], "execution_id": execution_id,
                "step_id": remote_step, "success": true, "data": {"ok": 2}, "consumer_id": "r1-1"}),
        )
        .await;
    let result = agent.next_of("tool.result").await;
    assert_eq!(result["step_id"], *remote_step);
    assert_eq!(result["traceparent"], *execution_traceparent);
    kernel
        .post(
            "/v0/agents/intent",
            &intent(serde_json::json!({"type": "complete", "output": {"done": true}})),
        )
        .await;
    // The trace context survives in the log (a rebuilt actor continues the same trace).
    let events = kernel
        .get(&format!("/v0/executions/{execution_id}/events"))
        .await;
    assert_eq!(
        events["events"][0]["payload"]["traceparent"],
        *execution_traceparent
    );

    let spans = collect(&mut spans, |spans| {
        named(spans, "intent", "intent.type", "complete").len() == 1
            && spans
                .iter()
                .filter(|span| span.name == "POST /v0/agents/intent")
                .count()
                == 3
            && named(spans, "step", "step.id", &remote_step).len() == 1
            && named(spans, "push job.assigned", "push.event", "job.assigned").len() == 1
            && named(spans, "push tool.result", "push.event", "tool.result").len() == 2
            && named(spans, "runner result", "execution.id", &execution_id).len() == 1
            && spans.iter().any(|span| span.name == "POST /v0/executions")
            && commits_linked(spans, trace_id) >= 7
    })
    .await;
    let create = spans
        .iter()
        .find(|span| span.name == "POST /v0/executions")
        .unwrap();
    assert_eq!(hex(&create.trace_id), trace_id);
    assert_eq!(
        execution_traceparent,
        format!("00-{trace_id}-{}-01", hex(&create.span_id)),
        "the execution's context is its create request's span"
    );
    // Every message the execution handled is a child of the create span, in the client's trace.
    let messages: Vec<&Span> = spans
        .iter()
        .filter(|span| MESSAGES.contains(&span.name.as_str()))
        .collect();
    assert_eq!(
        messages.len(),
        7,
        "assign, 3 intents, 2 results, a job claim"
    );
    for message in &messages {
        assert_eq!(hex(&message.trace_id), trace_id, "{}", message.name);
        assert_eq!(message.parent_span_id, create.span_id);
        assert_eq!(
            attribute(message, "execution.id").as_deref(),
            Some(execution_id.as_str())
        );
    }
    let assign = one(&spans, "assign", "execution.id", &execution_id);
    let assigned_push = one(
        &spans,
        "push execution.assigned",
        "push.event",
        "execution.assigned",
    );
    assert_eq!(assigned_push.parent_span_id, assign.span_id);
    assert_eq!(
        attribute(assigned_push, "consumer.id").as_deref(),
        Some("traced-1")
    );

    // Intents: the policy's decision and the commit are children; each step is a child of the
    // intent that created it and lasts until its result.
    let invokes = named(&spans, "intent", "intent.type", "invoke_tool");
    assert_eq!(invokes.len(), 2);
    for (invoke, step_id, tool_id) in [
        (
            one(&spans, "intent", "tool.id", "local.tool"),
            &local_step,
            "local.tool",
        ),
        (
            one(&spans, "intent", "tool.id", "remote.tool"),
            &remote_step,
            "remote.tool",
        ),
    ] {
        assert_eq!(
            attribute(invoke, "intent.decision").as_deref(),
            Some("accepted")
        );
        let policy = children(&spans, invoke, "policy");
        assert_eq!(policy.len(), 1, "one policy check per invoke_tool");
        assert_eq!(
            attribute(policy[0], "policy.decision").as_deref(),
            Some("allow")
        );
        assert_eq!(
            attribute(invoke, "policy.decision").as_deref(),
            Some("allow")
        );
        let commits = children(&spans, invoke, "commit");
        assert_eq!(commits.len(), 1);
        assert!(
            attribute(commits[0], "commit.events")
                .unwrap()
                .parse::<i64>()
                .unwrap()
                >= 1
        );
        let step = one(&spans, "step", "step.id", step_id);
        assert_eq!(step.parent_span_id, invoke.span_id);
        assert_eq!(attribute(step, "tool.id").as_deref(), Some(tool_id));
        assert_eq!(attribute(step, "step.status").as_deref(), Some("succeeded"));
        assert!(attribute(step, "step.duration_ms").is_some());
        assert!(step.end_time_unix_nano >= step.start_time_unix_nano);
    }
    let local_result = one(&spans, "step result", "execution.id", &execution_id);
    assert_eq!(
        attribute(local_result, "step.id").as_deref(),
        Some(local_step.as_str())
    );
    let local_span = one(&spans, "step", "step.id", &local_step);
    assert!(
        local_span.end_time_unix_nano >= local_result.start_time_unix_nano,
        "a step ends with its result"
    );

    // The remote step: dispatched and the job pushed under the step's span, which the runner
    // receives to continue.
    let remote_span = one(&spans, "step", "step.id", &remote_step);
    assert_eq!(
        job_traceparent,
        format!("00-{trace_id}-{}-01", hex(&remote_span.span_id))
    );
    assert!(
        remote_span
            .events
            .iter()
            .any(|event| event.name == "step dispatched"),
        "{:?}",
        remote_span.events
    );
    let job_push = one(&spans, "push job.assigned", "push.event", "job.assigned");
    assert_eq!(job_push.parent_span_id, remote_span.span_id);
    let runner_result = one(&spans, "runner result", "execution.id", &execution_id);
    assert_eq!(children(&spans, runner_result, "push tool.result").len(), 1);
    assert_eq!(children(&spans, local_result, "push tool.result").len(), 1);
    let complete = one(&spans, "intent", "intent.type", "complete");
    assert_eq!(children(&spans, complete, "commit").len(), 1);
    // Each intent links to the request that carried it (a trace of its own: agents send no
    // traceparent).
    let intent_requests: Vec<&[u8]> = spans
        .iter()
        .filter(|span| span.name == "POST /v0/agents/intent")
        .map(|span| span.span_id.as_slice())
        .collect();
    for intent in named(&spans, "intent", "execution.id", &execution_id) {
        assert!(
            intent
                .links
                .iter()
                .any(|link| intent_requests.contains(&link.span_id.as_slice())),
            "{:?}",
            intent.links
        );
    }

    // Store transactions are spans of their own, with their batch size, linked to the commits
    // they carried: create, assign, two intents, a step result, the runner result, complete
    // (the job claim records nothing: the remote step was dispatched with its creation).
    let transactions: Vec<&Span> = spans
        .iter()
        .filter(|span| span.name == "store commit")
        .collect();
    assert!(
        transactions
            .iter()
            .all(|span| span.parent_span_id.is_empty())
    );
    assert!(transactions.iter().all(|span| {
        attribute(span, "batch.size").is_some_and(|size| size.parse::<i64>().unwrap() >= 1)
    }));
    assert_eq!(commits_linked(&spans, trace_id), 7);
    assert!(
        spans
            .iter()
            .all(|span| span.name != "Actor" && span.name != "execution"),
        "actor-lifetime spans are not exported"
    );
    let create_commit = children(&spans, create, "commit");
    assert_eq!(
        create_commit.len(),
        1,
        "the creation's commit is in its request"
    );
    drop(kernel);
}

#[tokio::test]
async fn without_an_endpoint_nothing_of_a_trace_is_recorded_or_pushed() {
    let kernel = Kernel::start(None).await;
    let mut agent = kernel
        .stream("/v0/agents/stream?agent_id=plain&consumer_id=plain-1")
        .await;
    let created = kernel
        .create_traced(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            serde_json::json!({"agent_id": "plain"}),
        )
        .await;
    let assigned = agent.next_of("execution.assigned").await;
    assert!(assigned.get("traceparent").is_none(), "{assigned}");
    let events = kernel
        .get(&format!(
            "/v0/executions/{}/events",
            created["id"].as_str().unwrap()
        ))
        .await;
    assert!(
        events["events"][0]["payload"].get("traceparent").is_none(),
        "{events}"
    );
    drop(kernel);
}

#[tokio::test]
async fn a_passivated_execution_continues_its_trace_when_rebuilt() {
    let (endpoint, mut spans) = receiver().await;
    let kernel = Kernel::start_with(Some(&endpoint), &["--passivate-after", "100ms"]).await;
    let trace_id = "5b8efff798038103d269b633813fc60c";
    let created = kernel
        .create_traced(
            &format!("00-{trace_id}-eee19b7ec3c1b174-01"),
            serde_json::json!({"agent_id": "later"}),
        )
        .await;
    let execution_id = created["id"].as_str().unwrap().to_owned();
    // No consumer: the pending execution's actor is stopped, its state left in the store.
    kernel.passivated(1).await;
    let mut agent = kernel
        .stream("/v0/agents/stream?agent_id=later&consumer_id=later-1")
        .await;
    let assigned = agent.next_of("execution.assigned").await;
    assert_eq!(assigned["execution_id"], *execution_id);
    let spans = collect(&mut spans, |spans| {
        spans.iter().any(|span| span.name == "POST /v0/executions")
            && named(spans, "assign", "execution.id", &execution_id).len() == 1
    })
    .await;
    let create = spans
        .iter()
        .find(|span| span.name == "POST /v0/executions")
        .unwrap();
    assert_eq!(
        assigned["traceparent"],
        format!("00-{trace_id}-{}-01", hex(&create.span_id)),
        "the context rebuilt from execution.created"
    );
    let assign = one(&spans, "assign", "execution.id", &execution_id);
    assert_eq!(hex(&assign.trace_id), trace_id);
    assert_eq!(assign.parent_span_id, create.span_id);
    drop(kernel);
}

#[tokio::test]
async fn a_step_outliving_its_actor_gets_a_closing_span_with_its_whole_duration() {
    let (endpoint, mut spans) = receiver().await;
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        "rules:\n  - id: gate\n    priority: 1\n    when:\n      tool_ids: [\"gated.*\"]\n    then:\n      decision: require_approval\n      reason: a human decides\ndefault:\n  decision: allow\n",
    )
    .unwrap();
    let policy_path = policy.path().to_str().unwrap().to_owned();
    let kernel = Kernel::start_with(
        Some(&endpoint),
        &["--passivate-after", "100ms", "--policy", &policy_path],
    )
    .await;
    let mut agent = kernel
        .stream("/v0/agents/stream?agent_id=gated&consumer_id=gated-1")
        .await;
    let created = kernel
        .post("/v0/executions", &serde_json::json!({"agent_id": "gated"}))
        .await;
    let execution_id = created["id"].as_str().unwrap().to_owned();
    let assigned = agent.next_of("execution.assigned").await;
    let session_id = assigned["session_id"].as_str().unwrap().to_owned();
    let gated = kernel
        .post(
            "/v0/agents/intent",
            &serde_json::json!({"execution_id": execution_id, "session_id": session_id,
                "intent": {"type": "invoke_tool", "tool_id": "gated.deploy", "arguments": {}}}),
        )
        .await;
    assert_eq!(gated["pending_approval"], true, "{gated}");
    let step_id = gated["step_id"].as_str().unwrap().to_owned();
    // Blocked on the approval, the actor is passivated: the step's span ends with it.
    kernel.passivated(1).await;
    kernel
        .post(
            &format!("/v0/executions/{execution_id}/signal"),
            &serde_json::json!({"signal_type": "step.approve",
                "payload": {"step_id": step_id, "approved": true}}),
        )
        .await;
    let resolved = agent.next_of("approval.resolved").await;
    assert_eq!(resolved["traceparent"], assigned["traceparent"]);
    kernel
        .post(
            "/v0/agents/step-result",
            &serde_json::json!({"execution_id": execution_id, "session_id": session_id,
                "step_id": step_id, "success": true, "data": {}}),
        )
        .await;

    let spans = collect(&mut spans, |spans| {
        named(spans, "step", "step.id", &step_id).len() == 2
            && named(spans, "step result", "step.id", &step_id).len() == 1
    })
    .await;
    let steps = named(&spans, "step", "step.id", &step_id);
    let unfinished = steps
        .iter()
        .find(|span| attribute(span, "step.status").as_deref() == Some("unfinished"))
        .expect("the span the passivated actor held, marked");
    let invoke = one(&spans, "intent", "tool.id", "gated.deploy");
    assert_eq!(unfinished.parent_span_id, invoke.span_id);
    assert_eq!(
        attribute(invoke, "intent.decision").as_deref(),
        Some("pending_approval")
    );
    assert_eq!(
        attribute(invoke, "policy.decision").as_deref(),
        Some("require_approval")
    );
    let closing = steps
        .iter()
        .find(|span| attribute(span, "step.status").as_deref() == Some("succeeded"))
        .expect("a closing span when the step ends");
    let result = one(&spans, "step result", "step.id", &step_id);
    assert_eq!(closing.parent_span_id, result.span_id);
    let whole: i64 = attribute(closing, "step.duration_ms")
        .unwrap()
        .parse()
        .unwrap();
    let held_ms = i64::try_from(
        (unfinished.end_time_unix_nano - unfinished.start_time_unix_nano) / 1_000_000,
    )
    .unwrap();
    assert!(
        whole >= held_ms && whole >= 100,
        "the duration covers the whole step ({whole} ms, held {held_ms} ms)"
    );
    drop(kernel);
}
