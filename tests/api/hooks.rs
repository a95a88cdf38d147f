//! The hook chain (docs/hooks.md): `pre_tool` and `post_tool` hooks from a policy file, called
//! over HTTP on a loopback server: pass, modify and abort at each point, modified arguments
//! checked by the argument predicates again, timeouts in both failure modes, and every call
//! recorded as `hook.decided` before what it decided.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use keel::hook_caller::HttpHookCaller;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Assignment, Options, TestKernel, TestRunner, running_execution};

/// What the hook server answers on one route.
#[derive(Clone, Debug)]
pub(crate) enum Behaviour {
    Answer(Value),
    Sleep(Duration),
}

#[derive(Clone, Default)]
pub(crate) struct HookServer {
    behaviour: Arc<Mutex<std::collections::HashMap<String, Behaviour>>>,
    requests: Arc<Mutex<Vec<(String, Value)>>>,
}

impl HookServer {
    pub(crate) async fn start() -> (Self, String) {
        let server = Self::default();
        let app = axum::Router::new()
            .route("/{name}", axum::routing::post(answer))
            .with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (server, format!("http://{address}"))
    }

    pub(crate) fn set(&self, name: &str, behaviour: Behaviour) {
        self.behaviour
            .lock()
            .expect("lock")
            .insert(name.to_owned(), behaviour);
    }

    pub(crate) fn requests(&self, name: &str) -> Vec<Value> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|(route, _)| route == name)
            .map(|(_, body)| body.clone())
            .collect()
    }
}

async fn answer(
    State(server): State<HookServer>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    server
        .requests
        .lock()
        .expect("lock")
        .push((name.clone(), body));
    let behaviour = server
        .behaviour
        .lock()
        .expect("lock")
        .get(&name)
        .cloned()
        .unwrap_or(Behaviour::Answer(json!({"decision": "pass"})));
    match behaviour {
        Behaviour::Answer(value) => Json(value),
        Behaviour::Sleep(delay) => {
            tokio::time::sleep(delay).await;
            Json(json!({"decision": "pass"}))
        }
    }
}

/// A policy with an argument predicate and one hook at each point.
fn policy(base: &str, failure: &str) -> String {
    format!(
        r#"
rules:
  - id: no-etc
    priority: 1
    when:
      tool_id: "fs.*"
      arguments:
        - field: path
          pattern: '^/etc'
    then: {{decision: deny, reason: "nothing under /etc"}}
  - id: allow-rest
    priority: 100
    when: {{}}
    then: {{decision: allow}}
hooks:
  - id: guard
    point: pre_tool
    url: {base}/pre
    timeout: 300ms
    failure: {failure}
  - id: scrub
    point: post_tool
    url: {base}/post
    timeout: 300ms
"#
    )
}

pub(crate) async fn kernel_with_hooks(base: &str, failure: &str) -> TestKernel {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, policy(base, failure)).expect("write policy");
    let loaded = keel::policy::load_path(&path).expect("policy loads");
    let caller = Arc::new(HttpHookCaller::new().expect("caller"));
    let configured = caller.clone();
    let kernel = TestKernel::start_with(Options {
        configure: Some(Arc::new(move |config| {
            config.policy = loaded.engine.clone();
            config.hooks = loaded.hooks.clone();
            config.hook_caller = Some(configured.clone());
        })),
        ..Options::default()
    })
    .await;
    caller.register(&kernel.kernel);
    kernel
}

/// The events of `execution` from the first `hook.decided` on, as `(type, payload)`.
async fn from_first_hook(kernel: &TestKernel, execution: &str) -> Vec<(String, Value)> {
    let events = kernel.events(execution).await;
    let start = events
        .iter()
        .rposition(|event| event["type"] == "hook.decided")
        .map(|last| {
            events[..=last]
                .iter()
                .rposition(|event| event["type"] != "hook.decided")
                .map_or(0, |index| index + 1)
        })
        .unwrap_or(events.len());
    events[start..]
        .iter()
        .map(|event| {
            (
                event["type"].as_str().unwrap_or("").to_owned(),
                event["payload"].clone(),
            )
        })
        .collect()
}

fn invoke(tool: &str, arguments: Value) -> Value {
    json!({"type": "invoke_tool", "tool_id": tool, "arguments": arguments})
}

/// Posts `body` to `path` as an agent whose SDK applies modifications
/// (`Keel-Capabilities: modify`).
async fn post_modify(kernel: &TestKernel, path: &str, body: Value) -> (StatusCode, Value) {
    let request = reqwest::Client::new()
        .post(kernel.url(path))
        .header("Keel-Capabilities", "replay, Modify")
        .json(&body);
    kernel.send(request).await
}

/// Submits `intent` for `run` as an agent that applies modifications.
async fn intent_modify(
    kernel: &TestKernel,
    run: &Assignment,
    intent: Value,
) -> (StatusCode, Value) {
    let body =
        json!({"execution_id": run.execution_id, "session_id": run.session_id, "intent": intent});
    post_modify(kernel, "/v0/agents/intent", body).await
}

/// Reports a successful local result for `run` as an agent that applies modifications.
async fn result_modify(
    kernel: &TestKernel,
    run: &Assignment,
    step: &str,
    data: Value,
) -> (StatusCode, Value) {
    let body = json!({"execution_id": run.execution_id, "session_id": run.session_id,
        "step_id": step, "success": true, "data": data});
    post_modify(kernel, "/v0/agents/step-result", body).await
}

#[tokio::test]
async fn pre_tool_hooks_pass_modify_and_abort_and_modified_arguments_are_checked_again() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_hooks(&base, "fail_closed").await;
    let (_agent, run) = running_execution(&kernel, "writer").await;

    // Pass: the call goes on unchanged; the hook saw the call.
    let (status, body) = run
        .intent(&kernel, invoke("fs.read", json!({"path": "/tmp/a"})))
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let step = body["step_id"].as_str().expect("step").to_owned();
    let seen = hooks.requests("pre");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["point"], "pre_tool");
    assert_eq!(seen[0]["hook_id"], "guard");
    assert_eq!(seen[0]["tool_id"], "fs.read");
    assert_eq!(seen[0]["agent_id"], "writer");
    assert_eq!(seen[0]["execution_id"], json!(run.execution_id));
    assert_eq!(seen[0]["arguments"], json!({"path": "/tmp/a"}));
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].0, "hook.decided");
    assert_eq!(events[0].1["decision"], "pass");
    assert_eq!(events[0].1["point"], "pre_tool");
    assert_eq!(events[0].1["hook_id"], "guard");
    assert!(events[0].1["latency_ms"].is_u64());
    assert_eq!(events[1].0, "intent.accepted");
    let (status, _) = run.step_result(&kernel, &step, true, json!("ok")).await;
    assert_eq!(status, StatusCode::OK);

    // Modify (an agent that applies it): the modified arguments are recorded, become the
    // step's and come back in the answer, so the local tool runs with them.
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "modify", "arguments": {"path": "/tmp/safe"}})),
    );
    let (status, body) =
        intent_modify(&kernel, &run, invoke("fs.read", json!({"path": "/tmp/b"}))).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    assert_eq!(body["arguments"], json!({"path": "/tmp/safe"}), "{body}");
    let step = body["step_id"].as_str().expect("step").to_owned();
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].1["decision"], "modify");
    let created = events
        .iter()
        .find(|(kind, _)| kind == "step.created")
        .expect("step.created");
    assert_eq!(created.1["arguments"], json!({"path": "/tmp/safe"}));
    let (status, _) = run.step_result(&kernel, &step, true, json!("ok")).await;
    assert_eq!(status, StatusCode::OK);

    // Modify into arguments the predicates refuse: denied by the rule, with those arguments.
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "modify", "arguments": {"path": "/etc/shadow"}})),
    );
    let (status, body) =
        intent_modify(&kernel, &run, invoke("fs.read", json!({"path": "/tmp/c"}))).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(false)),
        "{body}"
    );
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].1["decision"], "modify");
    assert_eq!(events[1].0, "intent.denied");
    assert_eq!(events[1].1["rule_id"], "no-etc");
    assert_eq!(events[1].1["arguments"], json!({"path": "/etc/shadow"}));

    // Abort: denied, and the denial names the hook.
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "abort", "reason": "not today"})),
    );
    let (status, body) = run
        .intent(&kernel, invoke("web.fetch", json!({"url": "x"})))
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(false)),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap_or("").contains("not today"),
        "{body}"
    );
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].1["decision"], "abort");
    assert_eq!(events[0].1["reason"], "not today");
    assert_eq!(events[1].0, "intent.denied");
    assert_eq!(events[1].1["rule_id"], "hook:guard");
    assert_eq!(events[1].1["reason"], "not today");
    assert_eq!(events.len(), 2, "nothing else was recorded: {events:?}");
    let metrics = kernel.kernel.encode_metrics();
    assert!(
        metrics.contains("keel_hook_calls_total{hook=\"guard\",decision=\"abort\"} 1"),
        "{metrics}"
    );
    kernel.shutdown().await;
}

/// A policy allowing everything with a `pre_tool` and a `post_tool` hook, both with
/// `local_modify` set to `local` (absent: the default).
fn local_policy(base: &str, local: Option<&str>) -> String {
    let local = local.map_or(String::new(), |mode| format!("    local_modify: {mode}\n"));
    format!(
        "rules:\n  - id: allow-all\n    priority: 1\n    when: {{}}\n    then: {{decision: allow}}\n\
         hooks:\n  - id: sandbox\n    point: pre_tool\n    url: {base}/pre\n    timeout: 300ms\n{local}\
         \x20 - id: redact\n    point: post_tool\n    url: {base}/post\n    timeout: 300ms\n{local}"
    )
}

#[tokio::test]
async fn a_modify_of_a_local_tool_the_agent_cannot_apply_is_refused_by_default() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_policy(&local_policy(&base, None), Options::default()).await;
    let (_agent, run) = running_execution(&kernel, "writer").await;
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "modify", "arguments": {"path": "/sandbox/a"}})),
    );

    // An agent without `Keel-Capabilities: modify` would run the tool with its own arguments:
    // the call is denied, naming the hook and why, and no step claims arguments it never had.
    let (status, body) = run
        .intent(&kernel, invoke("fs.read", json!({"path": "/etc/a"})))
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(false)),
        "{body}"
    );
    let error = body["error"].as_str().unwrap_or("");
    assert!(
        error.contains("hook sandbox changed the arguments of local tool fs.read"),
        "{body}"
    );
    assert!(error.contains("Keel-Capabilities: modify"), "{body}");
    assert!(body.get("arguments").is_none(), "{body}");
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].1["decision"], "modify");
    assert_eq!(events[1].0, "intent.denied");
    assert_eq!(events[1].1["rule_id"], "hook:sandbox");
    assert_eq!(events[1].1["arguments"], json!({"path": "/etc/a"}));
    assert_eq!(events.len(), 2, "{events:?}");

    // A remote tool keeps its behaviour: the runner gets the modified arguments.
    let mut runner = TestRunner::connect(&kernel, "r1", &["fs.read"]).await;
    let remote = json!({"type": "invoke_tool", "tool_id": "fs.read", "arguments": {"path": "/etc/a"}, "remote": true});
    let (status, body) = run.intent(&kernel, remote).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    assert!(body.get("arguments").is_none(), "{body}");
    let job = runner.job().await;
    assert_eq!(job["arguments"], json!({"path": "/sandbox/a"}), "{job}");
    runner.result(&kernel, &job, true, json!("ok")).await;

    // A post_tool modify of a local result the agent already holds: the step fails with the
    // reason and the agent is told (403) instead of using what it has.
    hooks.set("pre", Behaviour::Answer(json!({"decision": "pass"})));
    hooks.set(
        "post",
        Behaviour::Answer(json!({"decision": "modify", "result": {"token": "[redacted]"}})),
    );
    let step = run.invoke(&kernel, "fs.read").await;
    let (status, body) = run
        .step_result(&kernel, &step, true, json!({"token": "secret"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["rule_id"], "hook:redact", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("changed the result of local tool"),
        "{body}"
    );
    let events = from_first_hook(&kernel, &run.execution_id).await;
    let failed = events
        .iter()
        .find(|(kind, _)| kind == "step.failed")
        .expect("step.failed");
    assert!(failed.1.get("result").is_none(), "{failed:?}");
    assert!(!format!("{events:?}").contains("secret"), "{events:?}");
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_applies_modifications_gets_the_hooks_arguments_and_result() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_policy(&local_policy(&base, None), Options::default()).await;
    let (_agent, run) = running_execution(&kernel, "writer").await;
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "modify", "arguments": {"path": "/sandbox/a"}})),
    );
    hooks.set(
        "post",
        Behaviour::Answer(json!({"decision": "modify", "result": {"token": "[redacted]"}})),
    );
    let mut intent = invoke("fs.read", json!({"path": "/etc/a"}));
    intent["idempotency_key"] = json!("read-1");
    let (status, body) = intent_modify(&kernel, &run, intent.clone()).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    assert_eq!(body["arguments"], json!({"path": "/sandbox/a"}), "{body}");
    let step = body["step_id"].as_str().expect("step").to_owned();
    // A retried intent (same key) gets the same step and the same arguments.
    let (status, again) = intent_modify(&kernel, &run, intent).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again, body);
    let (status, body) = result_modify(&kernel, &run, &step, json!({"token": "secret"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ok");
    assert_eq!(body["result"], json!({"token": "[redacted]"}), "{body}");
    let events = from_first_hook(&kernel, &run.execution_id).await;
    let completed = events
        .iter()
        .find(|(kind, _)| kind == "step.completed")
        .expect("step.completed");
    assert_eq!(completed.1["result"], json!({"token": "[redacted]"}));

    // Unchanged arguments and results: no `arguments` or `result` in the answers.
    hooks.set("pre", Behaviour::Answer(json!({"decision": "pass"})));
    hooks.set("post", Behaviour::Answer(json!({"decision": "pass"})));
    let (_, body) = intent_modify(&kernel, &run, invoke("fs.read", json!({"path": "/a"}))).await;
    assert!(body.get("arguments").is_none(), "{body}");
    let step = body["step_id"].as_str().expect("step").to_owned();
    let (status, body) = result_modify(&kernel, &run, &step, json!(1)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    kernel.shutdown().await;
}

#[tokio::test]
async fn record_only_hooks_let_a_local_call_run_as_the_agent_has_it_and_say_so() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_policy(
        &local_policy(&base, Some("record_only")),
        Options::default(),
    )
    .await;
    let (_agent, run) = running_execution(&kernel, "writer").await;
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "modify", "arguments": {"path": "/sandbox/a"}})),
    );
    hooks.set(
        "post",
        Behaviour::Answer(json!({"decision": "modify", "result": "[redacted]"})),
    );
    let (status, body) = run
        .intent(&kernel, invoke("fs.read", json!({"path": "/etc/a"})))
        .await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let step = body["step_id"].as_str().expect("step").to_owned();
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].1["decision"], "modify");
    assert!(
        events[0].1["reason"]
            .as_str()
            .unwrap_or("")
            .contains("recorded only, not applied"),
        "{events:?}"
    );
    let created = events
        .iter()
        .find(|(kind, _)| kind == "step.created")
        .expect("step.created");
    assert_eq!(
        created.1["arguments"],
        json!({"path": "/etc/a"}),
        "what the tool runs with"
    );
    let (status, body) = run.step_result(&kernel, &step, true, json!("plain")).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let events = from_first_hook(&kernel, &run.execution_id).await;
    let completed = events
        .iter()
        .find(|(kind, _)| kind == "step.completed")
        .expect("step.completed");
    assert_eq!(completed.1["result"], json!("plain"), "what the agent has");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_slow_pre_tool_hook_denies_when_fail_closed_and_passes_when_fail_open() {
    let (hooks, base) = HookServer::start().await;
    hooks.set("pre", Behaviour::Sleep(Duration::from_secs(2)));
    for (failure, accepted) in [("fail_closed", false), ("fail_open", true)] {
        let kernel = kernel_with_hooks(&base, failure).await;
        let (_agent, run) = running_execution(&kernel, "writer").await;
        let started = std::time::Instant::now();
        let (status, body) = run
            .intent(&kernel, invoke("web.fetch", json!({"url": "x"})))
            .await;
        assert!(
            started.elapsed() < Duration::from_millis(1800),
            "bounded by the hook's timeout"
        );
        assert_eq!(
            (status, &body["accepted"]),
            (StatusCode::OK, &json!(accepted)),
            "{failure}: {body}"
        );
        let events = from_first_hook(&kernel, &run.execution_id).await;
        assert_eq!(events[0].1["decision"], "error", "{events:?}");
        assert_eq!(events[0].1["failure_mode"], failure);
        assert!(
            events[0].1["reason"]
                .as_str()
                .unwrap_or("")
                .contains("300 ms"),
            "{events:?}"
        );
        let next = if accepted {
            "intent.accepted"
        } else {
            "intent.denied"
        };
        assert_eq!(events[1].0, next);
        kernel.shutdown().await;
    }
}

#[tokio::test]
async fn post_tool_hooks_modify_the_result_the_agent_sees_or_fail_the_step() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_hooks(&base, "fail_closed").await;
    let mut runner = TestRunner::connect(&kernel, "r1", &["search"]).await;
    let (mut agent, run) = running_execution(&kernel, "writer").await;
    let remote = |query: &str| json!({"type": "invoke_tool", "tool_id": "search", "arguments": {"q": query}, "remote": true});

    // Modify: the agent gets the hook's result, and the log records it after the decision.
    hooks.set(
        "post",
        Behaviour::Answer(json!({"decision": "modify", "result": {"hits": ["[redacted]"]}})),
    );
    let (status, body) = run.intent(&kernel, remote("a")).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let job = runner.job().await;
    let (status, _) = runner
        .result(&kernel, &job, true, json!({"hits": ["secret"]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["status"], "succeeded");
    assert_eq!(pushed["result"], json!({"hits": ["[redacted]"]}));
    let seen = hooks.requests("post");
    assert_eq!(seen[0]["point"], "post_tool");
    assert_eq!(seen[0]["result"], json!({"hits": ["secret"]}));
    assert_eq!(seen[0]["arguments"], json!({"q": "a"}));
    assert_eq!(seen[0]["step_id"], job["step_id"]);
    let events = from_first_hook(&kernel, &run.execution_id).await;
    assert_eq!(events[0].1["decision"], "modify");
    assert_eq!(events[0].1["point"], "post_tool");
    let completed = events
        .iter()
        .find(|(kind, _)| kind == "step.completed")
        .expect("completed");
    assert_eq!(completed.1["result"], json!({"hits": ["[redacted]"]}));

    // Abort: the step fails with the hook's reason.
    hooks.set(
        "post",
        Behaviour::Answer(json!({"decision": "abort", "reason": "leaks a secret"})),
    );
    let (status, body) = run.intent(&kernel, remote("b")).await;
    assert_eq!(
        (status, &body["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let job = runner.job().await;
    let (status, _) = runner
        .result(&kernel, &job, true, json!({"hits": ["secret"]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["status"], "failed");
    assert_eq!(pushed["error"], "leaks a secret");
    assert!(pushed.get("result").is_none(), "{pushed}");

    // Pass: unchanged.
    hooks.set("post", Behaviour::Answer(json!({"decision": "pass"})));
    let (status, _) = run.intent(&kernel, remote("c")).await;
    assert_eq!(status, StatusCode::OK);
    let job = runner.job().await;
    runner
        .result(&kernel, &job, true, json!({"hits": []}))
        .await;
    let pushed = agent.stream.next_of("tool.result").await.data;
    assert_eq!(pushed["result"], json!({"hits": []}));
    kernel.shutdown().await;
}

/// Starts a kernel with the policy `source` (hooks called over HTTP) and `options`.
async fn kernel_with_policy(source: &str, options: Options) -> TestKernel {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, source).expect("write policy");
    let loaded = keel::policy::load_path(&path).expect("policy loads");
    let caller = Arc::new(HttpHookCaller::new().expect("caller"));
    let configured = caller.clone();
    let kernel = TestKernel::start_with(Options {
        configure: Some(Arc::new(move |config| {
            config.policy = loaded.engine.clone();
            config.hooks = loaded.hooks.clone();
            config.hook_caller = Some(configured.clone());
        })),
        ..options
    })
    .await;
    caller.register(&kernel.kernel);
    kernel
}

/// A policy allowing every tool with one `pre_create` hook.
fn creation_policy(base: &str, failure: &str, scope: &str) -> String {
    format!(
        r#"
rules:
  - id: allow-all
    priority: 1
    when: {{}}
    then: {{decision: allow}}
hooks:
  - id: admit
    point: pre_create
    url: {base}/create
    timeout: 300ms
    failure: {failure}
{scope}"#
    )
}

async fn create_with(kernel: &TestKernel, body: Value) -> (StatusCode, Value) {
    kernel.post("/v0/executions", &body).await
}

/// The number of executions of `agent_id`.
async fn count(kernel: &TestKernel, agent_id: &str) -> usize {
    let (status, body) = kernel
        .get(&format!("/v0/executions?agent_id={agent_id}&limit=200"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["executions"].as_array().map_or(0, Vec::len)
}

fn hook_calls(kernel: &TestKernel, hook: &str, decision: &str) -> String {
    let metrics = kernel.kernel.encode_metrics();
    let prefix = format!("keel_hook_calls_total{{hook=\"{hook}\",decision=\"{decision}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or("0")
        .to_owned()
}

/// Asserts a refused creation: 403 `FORBIDDEN` naming the hook, the reason in the message.
fn assert_refused(response: &(StatusCode, Value), hook: &str, reason: &str) {
    let (status, body) = response;
    assert_eq!(*status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "FORBIDDEN", "{body}");
    assert_eq!(body["rule_id"], format!("hook:{hook}"), "{body}");
    let message = body["error"].as_str().unwrap_or("");
    assert!(message.contains(reason), "{body}");
}

#[tokio::test]
async fn pre_create_hooks_pass_add_labels_or_refuse_the_creation() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_policy(
        &creation_policy(&base, "fail_closed", ""),
        Options::default(),
    )
    .await;

    // Pass: created as asked; the hook saw the creation; its decision follows execution.created.
    let (status, body) = create_with(
        &kernel,
        json!({"agent_id": "writer", "input": {"n": 1}, "labels": {"team": "ops"}, "priority": 7}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["labels"], json!({"team": "ops"}));
    let seen = hooks.requests("create");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["point"], "pre_create");
    assert_eq!(seen[0]["hook_id"], "admit");
    assert_eq!(seen[0]["agent_id"], "writer");
    assert_eq!(seen[0]["input"], json!({"n": 1}));
    assert_eq!(seen[0]["labels"], json!({"team": "ops"}));
    assert_eq!(seen[0]["priority"], 7);
    assert!(
        seen[0].get("execution_id").is_none(),
        "no execution exists yet"
    );
    let id = body["id"].as_str().expect("id").to_owned();
    let events = kernel.events(&id).await;
    assert_eq!(events[0]["type"], "execution.created");
    assert_eq!(events[0]["sequence"], 1);
    assert_eq!(events[1]["type"], "hook.decided");
    assert_eq!(events[1]["payload"]["point"], "pre_create");
    assert_eq!(events[1]["payload"]["decision"], "pass");
    assert_eq!(events[1]["payload"]["hook_id"], "admit");
    assert_eq!(events[0]["correlation_id"], events[1]["correlation_id"]);

    // Add labels: merged with the request's, on GET, in execution.created and in the list filter.
    hooks.set(
        "create",
        Behaviour::Answer(json!({"decision": "modify", "labels": {"tier": "gold"}})),
    );
    let (status, body) = create_with(
        &kernel,
        json!({"agent_id": "writer", "labels": {"team": "ops"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let merged = json!({"team": "ops", "tier": "gold"});
    assert_eq!(body["labels"], merged);
    let id = body["id"].as_str().expect("id").to_owned();
    let (_, fetched) = kernel.get(&format!("/v0/executions/{id}")).await;
    assert_eq!(fetched["labels"], merged);
    let events = kernel.events(&id).await;
    assert_eq!(events[0]["payload"]["labels"], merged);
    assert_eq!(events[1]["payload"]["decision"], "modify");
    assert_eq!(events[1]["payload"]["labels"], json!({"tier": "gold"}));
    let (_, listed) = kernel.get("/v0/executions?label=tier:gold").await;
    assert_eq!(listed["executions"][0]["id"], json!(id));
    // A creation without labels gets the hook's.
    let (_, body) = create_with(&kernel, json!({"agent_id": "writer"})).await;
    assert_eq!(body["labels"], json!({"tier": "gold"}));

    // A label already set to another value is an invalid answer: refused under fail_closed.
    let before = count(&kernel, "writer").await;
    hooks.set(
        "create",
        Behaviour::Answer(json!({"decision": "modify", "labels": {"team": "dev"}})),
    );
    let response = create_with(
        &kernel,
        json!({"agent_id": "writer", "labels": {"team": "ops"}}),
    )
    .await;
    assert_refused(&response, "admit", "already set to \"ops\"");

    // Refuse: 403 with the hook's reason, and nothing is created or recorded.
    hooks.set(
        "create",
        Behaviour::Answer(json!({"decision": "abort", "reason": "quota exhausted"})),
    );
    let response = create_with(&kernel, json!({"agent_id": "writer"})).await;
    assert_refused(&response, "admit", "quota exhausted");
    assert_eq!(count(&kernel, "writer").await, before);
    assert_eq!(hook_calls(&kernel, "admit", "abort"), "1");
    assert_eq!(hook_calls(&kernel, "admit", "error"), "1");
    assert_eq!(hook_calls(&kernel, "admit", "modify"), "2");
    assert_eq!(hook_calls(&kernel, "admit", "pass"), "1");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_slow_pre_create_hook_refuses_when_fail_closed_and_creates_when_fail_open() {
    let (hooks, base) = HookServer::start().await;
    hooks.set("create", Behaviour::Sleep(Duration::from_secs(2)));
    for failure in ["fail_closed", "fail_open"] {
        let kernel =
            kernel_with_policy(&creation_policy(&base, failure, ""), Options::default()).await;
        let started = std::time::Instant::now();
        let response = create_with(&kernel, json!({"agent_id": "writer"})).await;
        assert!(
            started.elapsed() < Duration::from_millis(1800),
            "bounded by the hook's timeout"
        );
        if failure == "fail_closed" {
            assert_refused(
                &response,
                "admit",
                "hook admit failed: no answer within 300 ms",
            );
            assert_eq!(count(&kernel, "writer").await, 0);
        } else {
            let (status, body) = &response;
            assert_eq!(*status, StatusCode::CREATED, "{body}");
            let events = kernel.events(body["id"].as_str().expect("id")).await;
            assert_eq!(events[1]["payload"]["decision"], "error", "{events:?}");
            assert_eq!(events[1]["payload"]["failure_mode"], "fail_open");
        }
        assert_eq!(hook_calls(&kernel, "admit", "error"), "1", "{failure}");
        kernel.shutdown().await;
    }
}

#[tokio::test]
async fn pre_create_hooks_apply_to_their_agents_and_are_replaced_with_the_policy() {
    let (hooks, base) = HookServer::start().await;
    hooks.set(
        "create",
        Behaviour::Answer(json!({"decision": "abort", "reason": "writers are paused"})),
    );
    let kernel = kernel_with_policy(
        &creation_policy(&base, "fail_closed", "    agent_ids: [writer]\n"),
        Options::default(),
    )
    .await;
    let response = create_with(&kernel, json!({"agent_id": "writer"})).await;
    assert_refused(&response, "admit", "writers are paused");
    let (status, body) = create_with(&kernel, json!({"agent_id": "reader"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(hooks.requests("create").len(), 1, "not called for reader");
    let events = kernel.events(body["id"].as_str().expect("id")).await;
    assert!(events.iter().all(|event| event["type"] != "hook.decided"));

    // A reload replaces the hooks: now only readers are refused.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        creation_policy(&base, "fail_closed", "    agent_ids: [reader]\n"),
    )
    .expect("write policy");
    let reloaded = keel::policy::load_path(&path).expect("policy loads");
    kernel
        .kernel
        .replace_policy(reloaded.engine, reloaded.hooks);
    let (status, body) = create_with(&kernel, json!({"agent_id": "writer"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let response = create_with(&kernel, json!({"agent_id": "reader"})).await;
    assert_refused(&response, "admit", "writers are paused");
    assert_eq!(hooks.requests("create").len(), 2);
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_idempotent_repeat_and_a_full_backlog_call_no_pre_create_hook() {
    let (hooks, base) = HookServer::start().await;
    let mut options = Options::default();
    options.settings.backlog = keel::http::creation::Backlog {
        per_agent: Some(2),
        total: None,
        retry_after_secs: 1,
        ..keel::http::creation::Backlog::default()
    };
    let kernel = kernel_with_policy(&creation_policy(&base, "fail_closed", ""), options).await;
    let keyed = |key: &str, body: &Value| {
        kernel
            .client
            .post(kernel.url("/v0/executions"))
            .header("Idempotency-Key", key)
            .json(body)
    };

    // Refused under a key: nothing is stored, so a retry with the key asks the hook again.
    hooks.set(
        "create",
        Behaviour::Answer(json!({"decision": "abort", "reason": "not yet"})),
    );
    let body = json!({"agent_id": "writer", "labels": {"team": "ops"}});
    let response = kernel.send(keyed("k1", &body)).await;
    assert_refused(&response, "admit", "not yet");
    hooks.set(
        "create",
        Behaviour::Answer(json!({"decision": "modify", "labels": {"tier": "gold"}})),
    );
    let (status, first) = kernel.send(keyed("k1", &body)).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["labels"], json!({"team": "ops", "tier": "gold"}));
    assert_eq!(hooks.requests("create").len(), 2);
    assert_eq!(hooks.requests("create")[1]["idempotency_key"], "k1");

    // A repeat answers the first execution without calling the hook, although the hook's
    // labels make the recorded labels differ from the request's.
    let (status, repeat) = kernel.send(keyed("k1", &body)).await;
    assert_eq!(status, StatusCode::OK, "{repeat}");
    assert_eq!(repeat["id"], first["id"]);
    assert_eq!(hooks.requests("create").len(), 2);
    // A different request under the key is still a conflict (the hook's label sent by the
    // client is a different request too).
    for other in [
        json!({"agent_id": "writer", "labels": {"team": "dev"}}),
        json!({"agent_id": "writer", "labels": {"team": "ops", "tier": "gold"}}),
        json!({"agent_id": "writer"}),
    ] {
        let (status, conflict) = kernel.send(keyed("k1", &other)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{other}: {conflict}");
    }
    assert_eq!(hooks.requests("create").len(), 2);
    // A creation without labels under a key, repeated: the hook's labels alone were recorded.
    let (status, bare) = kernel
        .send(keyed("k2", &json!({"agent_id": "writer"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{bare}");
    let (status, again) = kernel
        .send(keyed("k2", &json!({"agent_id": "writer"})))
        .await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &bare["id"]));
    assert_eq!(hooks.requests("create").len(), 3);

    // The backlog (2 pending) is checked before the hooks: a 429 calls none.
    let (status, body) = create_with(&kernel, json!({"agent_id": "writer"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(hooks.requests("create").len(), 3);
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_call_the_pre_tool_hooks_stop_gives_its_rate_limit_slot_back() {
    let (hooks, base) = HookServer::start().await;
    let policy = format!(
        r#"
rules:
  - id: no-etc
    priority: 1
    when:
      tool_id: "fs.*"
      arguments:
        - field: path
          pattern: '^/etc'
    then: {{decision: deny, reason: "nothing under /etc"}}
  - id: one-read
    priority: 10
    when: {{tool_id: "fs.*"}}
    then: {{decision: allow}}
    rate_limit: {{max: 1, window: 1h}}
hooks:
  - id: guard
    point: pre_tool
    url: {base}/pre
    timeout: 300ms
"#
    );
    let kernel = kernel_with_policy(&policy, Options::default()).await;
    let (_agent, run) = running_execution(&kernel, "writer").await;
    let read = |path: &str| invoke("fs.read", json!({ "path": path }));

    // Aborted by the hook, then refused by the policy after a modification: neither ran.
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "abort", "reason": "not now"})),
    );
    let (_, body) = run.intent(&kernel, read("/tmp/a")).await;
    assert_eq!(body["accepted"], json!(false), "{body}");
    hooks.set(
        "pre",
        Behaviour::Answer(json!({"decision": "modify", "arguments": {"path": "/etc/passwd"}})),
    );
    let (_, body) = intent_modify(&kernel, &run, read("/tmp/b")).await;
    assert_eq!(body["accepted"], json!(false), "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("/etc"),
        "{body}"
    );

    // So the one call of the hour is still free, and the limit holds after it.
    hooks.set("pre", Behaviour::Answer(json!({"decision": "pass"})));
    let (_, body) = run.intent(&kernel, read("/tmp/c")).await;
    assert_eq!(body["accepted"], json!(true), "{body}");
    let step = body["step_id"].as_str().expect("step").to_owned();
    let (status, _) = run.step_result(&kernel, &step, true, json!("ok")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = run.intent(&kernel, read("/tmp/d")).await;
    assert_eq!(body["accepted"], json!(false), "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("rate limit exceeded"),
        "{body}"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn pre_tool_hooks_see_for_whom_the_execution_was_created() {
    let (hooks, base) = HookServer::start().await;
    let kernel = kernel_with_hooks(&base, "fail_closed").await;
    let mut agent = crate::harness::TestAgent::connect(&kernel, "writer").await;
    let body = json!({"agent_id": "writer", "on_behalf_of": "user-1"});
    let (status, created) = kernel.post("/v0/executions", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let run = agent.assignment().await;
    let (status, answer) = run
        .intent(&kernel, invoke("fs.read", json!({"path": "/tmp/a"})))
        .await;
    assert_eq!(
        (status, &answer["accepted"]),
        (StatusCode::OK, &json!(true)),
        "{answer}"
    );
    let seen = hooks.requests("pre");
    assert_eq!(seen[0]["on_behalf_of"], "user-1");
    // A kernel without authentication has no creator to name.
    assert!(seen[0].get("created_by").is_none(), "{}", seen[0]);
    kernel.shutdown().await;
}
