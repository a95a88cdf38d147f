//! Hooks and webhooks as HTTP clients of configured URLs (issue 38, items 7 and 8): a redirect
//! is never followed (a 307 would re-post the signed body to another host and trust its
//! answer), a hook answer over the answer limit is a failed call that stores nothing, and a
//! failed call's `hook.decided.reason` names the URL's origin only, never its query token.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{StatusCode as HttpStatus, header::LOCATION};
use axum::response::IntoResponse;
use keel::hook_caller::HttpHookCaller;
use keel::webhooks::{WebhookOptions, WebhookService};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Options, TestKernel, eventually, running_execution};

const ANSWER_LIMIT: usize = 64 * 1024;

/// A loopback server: `/redirect` answers 307 to `target`, `/huge` a modify over the answer
/// limit, `/small` a modify within it; every request is counted per path.
#[derive(Clone, Default)]
struct Server {
    hits: Arc<Mutex<Vec<String>>>,
    target: Arc<Mutex<String>>,
}

impl Server {
    async fn start() -> (Self, String) {
        let server = Self::default();
        let app = axum::Router::new()
            .route("/{name}", axum::routing::post(serve))
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

    fn hits(&self, name: &str) -> usize {
        let hits = self.hits.lock().expect("lock");
        hits.iter().filter(|hit| *hit == name).count()
    }
}

async fn serve(
    axum::extract::State(server): axum::extract::State<Server>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> axum::response::Response {
    server.hits.lock().expect("lock").push(name.clone());
    match name.as_str() {
        "redirect" => {
            let target = server.target.lock().expect("lock").clone();
            (HttpStatus::TEMPORARY_REDIRECT, [(LOCATION, target)]).into_response()
        }
        "huge" => axum::Json(json!({"decision": "modify",
            "arguments": {"pad": "x".repeat(4 * ANSWER_LIMIT)}}))
        .into_response(),
        "small" => {
            axum::Json(json!({"decision": "modify", "arguments": {"pad": "ok"}})).into_response()
        }
        // What a host a redirect points to would answer: it must never be asked.
        _ => axum::Json(json!({"decision": "pass"})).into_response(),
    }
}

fn hook(id: &str, agent: &str, url: &str) -> String {
    format!(
        "  - id: {id}\n    point: pre_tool\n    url: \"{url}\"\n    timeout: 2s\n    \
         failure: fail_closed\n    agent_ids: [{agent}]\n"
    )
}

async fn kernel_with(policy: &str) -> TestKernel {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, policy).expect("write policy");
    let loaded = keel::policy::load_path(&path).expect("policy loads");
    let caller = Arc::new(
        HttpHookCaller::new()
            .expect("caller")
            .with_answer_limit(ANSWER_LIMIT),
    );
    TestKernel::start_with(Options {
        configure: Some(Arc::new(move |config| {
            config.policy = loaded.engine.clone();
            config.hooks = loaded.hooks.clone();
            config.hook_caller = Some(caller.clone());
        })),
        ..Options::default()
    })
    .await
}

/// Invokes a tool as a fresh execution of `agent`; returns the intent's answer and the
/// payload of its `hook.decided`.
async fn call(kernel: &TestKernel, agent: &str) -> (Value, Value) {
    let (_stream, run) = running_execution(kernel, agent).await;
    let (status, answer) = run
        .intent(
            kernel,
            json!({"type": "invoke_tool", "tool_id": "fs.read", "remote": true, "arguments": {"path": "/a"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let events = kernel.events(&run.execution_id).await;
    let decided = events
        .iter()
        .find(|event| event["type"] == "hook.decided")
        .map(|event| event["payload"].clone())
        .expect("a hook.decided event");
    let size: usize = events.iter().map(|event| event.to_string().len()).sum();
    assert!(
        size < ANSWER_LIMIT,
        "nothing large was stored ({size} bytes)"
    );
    (answer, decided)
}

#[tokio::test]
async fn hooks_follow_no_redirect_read_bounded_answers_and_never_show_a_url_query() {
    let (server, base) = Server::start().await;
    *server.target.lock().expect("lock") = format!("{base}/elsewhere");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address")
    };
    let policy = format!(
        "rules:\n  - id: allow\n    priority: 1\n    when: {{}}\n    then: {{decision: allow}}\nhooks:\n{}{}{}{}",
        hook("via-redirect", "redirected", &format!("{base}/redirect")),
        hook("too-big", "flooded", &format!("{base}/huge")),
        hook(
            "down",
            "unreachable",
            &format!("http://{closed}/h?token=sekrit-123")
        ),
        hook("fine", "served", &format!("{base}/small?token=sekrit-123")),
    );
    let kernel = kernel_with(&policy).await;

    let (answer, decided) = call(&kernel, "redirected").await;
    assert_eq!(answer["accepted"], false, "{answer}");
    assert_eq!(decided["decision"], "error", "{decided}");
    assert!(
        decided["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("answered 307"),
        "{decided}"
    );
    assert_eq!(server.hits("redirect"), 1);
    assert_eq!(server.hits("elsewhere"), 0, "the redirect was not followed");

    let (answer, decided) = call(&kernel, "flooded").await;
    assert_eq!(answer["accepted"], false, "{answer}");
    assert!(
        decided["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("answer exceeds 64KiB"),
        "{decided}"
    );

    let (answer, decided) = call(&kernel, "unreachable").await;
    assert_eq!(answer["accepted"], false, "{answer}");
    let reason = decided["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&format!("http://{closed}")), "{reason}");
    assert!(
        !reason.contains("sekrit") && !reason.contains("/h"),
        "{reason}"
    );

    // A hook that answers within the limit still modifies the call.
    let (answer, decided) = call(&kernel, "served").await;
    assert_eq!(answer["accepted"], true, "{answer}");
    assert_eq!(decided["decision"], "modify", "{decided}");
    assert_eq!(server.hits("small"), 1);
    kernel.shutdown().await;
}

#[tokio::test]
async fn webhook_deliveries_follow_no_redirect() {
    let kernel = TestKernel::start().await;
    let (server, base) = Server::start().await;
    *server.target.lock().expect("lock") = format!("{base}/elsewhere");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("webhooks.yaml");
    crate::webhooks::write_subscription(
        &file,
        "moved",
        &format!("{base}/redirect"),
        "execution.created",
    );
    let service = WebhookService::start(
        kernel.kernel.clone(),
        file,
        WebhookOptions {
            poll: Duration::from_millis(50),
        },
    )
    .await
    .expect("webhooks load");
    kernel.create("agent", json!({})).await;
    // Refused deliveries are retried (10-40 ms backoff): several attempts, none redirected.
    eventually("the delivery is attempted and retried", || async {
        (server.hits("redirect") >= 3).then_some(())
    })
    .await;
    assert_eq!(server.hits("elsewhere"), 0, "the redirect was not followed");
    let metrics = kernel.kernel.encode_metrics();
    assert!(
        metrics.contains("keel_webhook_deliveries_total{subscription=\"moved\",result=\"failed\"}"),
        "{metrics}"
    );
    service.stop().await;
    kernel.shutdown().await;
}
