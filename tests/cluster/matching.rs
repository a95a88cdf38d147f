//! Agents connected to any kernel (docs/architecture.md, "Cluster", matching): a consumer's
//! stream on one kernel is bridged to the others, so the owner of an execution assigns it to
//! consumers wherever they are connected, round-robin, and their intents reach the owner from
//! any kernel.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::harness::{Database, Kernel};
use super::{BUDGET, get_retrying, post};

/// Messages of an SSE stream: `(event, data)`.
pub(super) type Messages = mpsc::UnboundedReceiver<(String, serde_json::Value)>;

/// Opens the SSE stream at `url` (200 expected): its messages, from a task reading it whose
/// abort closes the stream.
pub(super) async fn sse(http: &reqwest::Client, url: &str) -> (Messages, JoinHandle<()>) {
    let response = http.get(url).send().await.expect("open the stream");
    assert_eq!(response.status().as_u16(), 200, "stream {url}");
    let (sender, receiver) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut events = response.bytes_stream().eventsource();
        while let Some(Ok(event)) = events.next().await {
            let data = serde_json::from_str(&event.data).unwrap_or_default();
            if sender.send((event.event, data)).is_err() {
                return;
            }
        }
    });
    (receiver, reader)
}

/// An agent stream: `(event, data)` of every message, from a task reading it.
pub(super) async fn agent_stream(
    http: &reqwest::Client,
    url: &str,
    agent: &str,
    consumer: &str,
) -> Messages {
    let url = format!("{url}/v0/agents/stream?agent_id={agent}&consumer_id={consumer}");
    sse(http, &url).await.0
}

/// A runner connection's stream offering `tools` (comma-separated), and its reader task.
pub(super) async fn runner_stream(
    http: &reqwest::Client,
    url: &str,
    runner: &str,
    consumer: &str,
    tools: &str,
) -> (Messages, JoinHandle<()>) {
    let url = format!(
        "{url}/v0/runners/stream?runner_id={runner}&consumer_id={consumer}&capabilities={tools}"
    );
    sse(http, &url).await
}

/// The next `execution.assigned` on `stream` within `limit`.
pub(super) async fn next_assigned(
    stream: &mut Messages,
    limit: Duration,
) -> Option<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let (event, data) = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .ok()??;
        if event == "execution.assigned" {
            return Some(data);
        }
    }
}

pub(super) async fn create(
    http: &reqwest::Client,
    kernel: &Kernel,
    agent: &str,
    n: usize,
) -> String {
    let (status, _, body) = post(
        http,
        &format!("{}/v0/executions", kernel.url),
        serde_json::json!({"agent_id": agent, "input": {"n": n}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_on_one_kernel_runs_an_execution_owned_by_another_with_intents_sent_to_a_third() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let kernels = super::three_settled(&database, dir.path(), &["--cluster"]).await;
        let http = reqwest::Client::new();
        let (a, b, c) = (&kernels[0], &kernels[1], &kernels[2]);

        // The agent's stream is on A; the execution is created by (and owned by) B.
        let mut on_a = agent_stream(&http, &a.url, "bridged", "c1").await;
        let id = create(&http, b, "bridged", 0).await;
        let created = Instant::now();
        let assigned = next_assigned(&mut on_a, Duration::from_secs(10)).await;
        let Some(assigned) = assigned else {
            panic!(
                "no execution.assigned on A within 10 s; logs:\n{}",
                kernels.iter().map(Kernel::log).collect::<Vec<_>>().join("\n---\n")
            );
        };
        println!("assigned through the bridge {:?} after the creation", created.elapsed());
        assert_eq!(assigned["execution_id"], id.as_str(), "{assigned}");
        let session = assigned["session_id"].as_str().expect("session").to_owned();

        // Intents go to C, which owns neither the stream nor the execution.
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/agents/intent", c.url),
            serde_json::json!({
                "execution_id": id,
                "session_id": session,
                "intent": {"type": "complete", "output": {"done": true}}
            }),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["accepted"], true, "{body}");
        let (_, _, execution) =
            get_retrying(&http, &format!("{}/v0/executions/{id}", a.url)).await;
        assert_eq!(execution["status"], "completed", "{execution}");

        // A second consumer on C: executions created on every kernel are spread round-robin
        // over both consumers, each assigned exactly once.
        let mut on_c = agent_stream(&http, &c.url, "bridged", "c2").await;
        // Let C's bridges open (a round is a second) so both consumers are known everywhere.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut ids = Vec::new();
        for (n, kernel) in kernels.iter().cycle().take(6).enumerate() {
            ids.push(create(&http, kernel, "bridged", n + 1).await);
        }
        let mut by_consumer: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while by_consumer.values().map(Vec::len).sum::<usize>() < ids.len()
            && Instant::now() < deadline
        {
            tokio::select! {
                Some(data) = next_assigned(&mut on_a, Duration::from_millis(200)) => {
                    by_consumer.entry("c1").or_default().push(data["execution_id"].as_str().unwrap_or_default().to_owned());
                }
                Some(data) = next_assigned(&mut on_c, Duration::from_millis(200)) => {
                    by_consumer.entry("c2").or_default().push(data["execution_id"].as_str().unwrap_or_default().to_owned());
                }
                else => {}
            }
        }
        let mut seen: Vec<String> = by_consumer.values().flatten().cloned().collect();
        seen.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!(seen, expected, "each execution assigned once: {by_consumer:?}");
        assert!(
            by_consumer.get("c1").is_some_and(|got| !got.is_empty())
                && by_consumer.get("c2").is_some_and(|got| !got.is_empty()),
            "both consumers get work: {by_consumer:?}"
        );
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

/// Every tool call allowed.
pub(super) const ALLOW_ALL: &str =
    "rules:\n  - id: allow-all\n    priority: 1\n    when: {}\n    then:\n      decision: allow\n";

/// The next message named `name` on `stream` within `limit`.
pub(super) async fn next_named(
    stream: &mut Messages,
    name: &str,
    limit: Duration,
) -> Option<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let (event, data) = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .ok()??;
        if event == name {
            return Some(data);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_on_one_kernel_serves_a_remote_step_of_an_execution_owned_by_another() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, ALLOW_ALL).expect("policy written");
        let policy = policy.to_str().expect("utf-8 path").to_owned();
        let flags = ["--cluster", "--policy", policy.as_str()];
        let kernels = super::three_settled(&database, dir.path(), &flags).await;
        let http = reqwest::Client::new();
        let (a, b, c) = (&kernels[0], &kernels[1], &kernels[2]);

        // The agent on A, the runner on C, the execution owned by B.
        let mut agent = agent_stream(&http, &a.url, "tooled", "agent-1").await;
        let (mut runner, _reader) = runner_stream(&http, &c.url, "r1", "r1-c", "remote.echo").await;
        let id = create(&http, b, "tooled", 0).await;
        let assigned = next_assigned(&mut agent, Duration::from_secs(10))
            .await
            .expect("assigned to the agent on A");
        let session = assigned["session_id"].as_str().expect("session").to_owned();
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/agents/intent", a.url),
            serde_json::json!({
                "execution_id": id,
                "session_id": session,
                "intent": {"type": "invoke_tool", "tool_id": "remote.echo",
                           "arguments": {"say": "hi"}, "remote": true}
            }),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["accepted"], true, "{body}");
        let step = body["step_id"].as_str().expect("step").to_owned();
        let Some(job) = next_named(&mut runner, "job.assigned", Duration::from_secs(10)).await
        else {
            panic!(
                "no job.assigned on C within 10 s; logs:\n{}",
                kernels
                    .iter()
                    .map(Kernel::log)
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
        };
        assert_eq!(job["execution_id"], id.as_str(), "{job}");
        assert_eq!(job["step_id"], step.as_str(), "{job}");
        // The result goes to A, which owns neither the execution nor the runner's stream.
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/runners/r1/results", a.url),
            serde_json::json!({
                "job_id": job["id"], "execution_id": id, "step_id": step,
                "success": true, "data": {"echo": "hi"}, "consumer_id": "r1-c"
            }),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let result = next_named(&mut agent, "tool.result", Duration::from_secs(10))
            .await
            .expect("tool.result reaches the agent on A");
        assert_eq!(result["step_id"], step.as_str(), "{result}");
        assert_eq!(result["status"], "succeeded", "{result}");
        assert_eq!(result["result"]["echo"], "hi", "{result}");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_and_the_disconnect_grace_work_across_kernels() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let flags = ["--cluster", "--agent-timeout", "2s"];
        let kernels = super::three_settled(&database, dir.path(), &flags).await;
        let http = reqwest::Client::new();
        let (a, b, c) = (&kernels[0], &kernels[1], &kernels[2]);

        // A cancel sent to C reaches the agent on A for an execution owned by B.
        let url = format!(
            "{}/v0/agents/stream?agent_id=graceful&consumer_id=c1",
            a.url
        );
        let (mut on_a, reader) = sse(&http, &url).await;
        let cancelled = create(&http, b, "graceful", 0).await;
        let assigned = next_assigned(&mut on_a, Duration::from_secs(10))
            .await
            .expect("assigned on A");
        assert_eq!(assigned["execution_id"], cancelled.as_str());
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/executions/{cancelled}/cancel", c.url),
            serde_json::json!({}),
        )
        .await;
        assert!(status < 300, "{status} {body}");
        let notice = next_named(&mut on_a, "execution.cancelled", Duration::from_secs(5))
            .await
            .expect("execution.cancelled reaches the agent on A");
        assert_eq!(notice["execution_id"], cancelled.as_str(), "{notice}");

        // The agent on A takes another execution of B, then goes away; another consumer is on
        // C. After the grace (2 s) B resets the execution and assigns it to the one on C.
        let moved = create(&http, b, "graceful", 1).await;
        let first = next_assigned(&mut on_a, Duration::from_secs(10))
            .await
            .expect("assigned on A");
        assert_eq!(first["execution_id"], moved.as_str());
        let old_session = first["session_id"].as_str().expect("session").to_owned();
        let mut on_c = agent_stream(&http, &c.url, "graceful", "c2").await;
        reader.abort();
        drop(on_a);
        let gone = Instant::now();
        let again = next_assigned(&mut on_c, Duration::from_secs(15))
            .await
            .expect("reassigned to the consumer on C after the grace");
        println!("reassigned {:?} after the disconnect", gone.elapsed());
        assert_eq!(again["execution_id"], moved.as_str(), "{again}");
        assert_ne!(again["session_id"], old_session.as_str());
        assert!(
            gone.elapsed() >= Duration::from_secs(2),
            "not before the grace ended"
        );
        // The superseded session is refused and changes nothing.
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/agents/intent", a.url),
            serde_json::json!({
                "execution_id": moved,
                "session_id": old_session,
                "intent": {"type": "complete", "output": {}}
            }),
        )
        .await;
        assert_eq!(status, 401, "{body}");
        let (_, _, execution) =
            get_retrying(&http, &format!("{}/v0/executions/{moved}", c.url)).await;
        assert_eq!(execution["status"], "running", "{execution}");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
