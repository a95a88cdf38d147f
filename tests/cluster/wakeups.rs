//! Wake-ups between kernels (issue 32 design point 6, check 6's latency): an agent and a feed
//! reader on kernel A, executions created on (and owned by) kernel B. Every execution reaches
//! the agent as `execution.assigned` once and the feed on A as `execution.created` once, with
//! LISTEN/NOTIFY and with `--no-notify` (polling alone). The delays are printed, not asserted
//! (docs/benchmarks.md has the numbers).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use tokio::sync::mpsc;

use super::harness::{Database, Kernel, poll};
use super::{BUDGET, owned_evenly_by, post};

/// Executions measured per mode.
const SAMPLES: usize = 20;

/// `(event name, data)` of every message of the SSE stream at `url`, from a task.
async fn sse(
    http: &reqwest::Client,
    url: String,
) -> mpsc::UnboundedReceiver<(String, serde_json::Value, Instant)> {
    let response = http.get(url).send().await.expect("stream");
    assert_eq!(response.status().as_u16(), 200);
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut events = response.bytes_stream().eventsource();
        while let Some(Ok(event)) = events.next().await {
            let data = serde_json::from_str(&event.data).unwrap_or_default();
            if sender.send((event.event, data, Instant::now())).is_err() {
                return;
            }
        }
    });
    receiver
}

/// Waits (bounded) for the message of `stream` that `matches`; returns when it arrived.
async fn arrival(
    stream: &mut mpsc::UnboundedReceiver<(String, serde_json::Value, Instant)>,
    seen: &mut BTreeMap<String, usize>,
    matches: impl Fn(&str, &serde_json::Value) -> Option<String>,
    wanted: &str,
) -> Option<Instant> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (event, data, at) = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .ok()??;
        if let Some(id) = matches(&event, &data) {
            *seen.entry(id.clone()).or_default() += 1;
            if id == wanted {
                return Some(at);
            }
        }
    }
}

fn percentile(sorted: &[Duration], share: f64) -> Duration {
    let index = ((sorted.len() as f64 * share).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// Runs three kernels with `flags` and measures `SAMPLES` executions; returns the delays of
/// `execution.assigned` to the agent on A and of `execution.created` on A's feed.
async fn measure(
    database: &Database,
    dir: &std::path::Path,
    flags: &[&str],
    agent_id: &str,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut kernels = Vec::new();
    for node in ["k1", "k2", "k3"] {
        let kernel = Kernel::start_with(node, &database.url, &dir.join(node), flags)
            .await
            .unwrap_or_else(|log| panic!("{node} did not start:\n{log}"));
        kernels.push(kernel);
    }
    poll(Duration::from_secs(10), || {
        owned_evenly_by(database, &["k1", "k2", "k3"])
    })
    .await
    .expect("three kernels balance within 10 s");
    let http = reqwest::Client::new();
    let (a, b) = (&kernels[0], &kernels[1]);
    let mut agent = sse(
        &http,
        format!(
            "{}/v0/agents/stream?agent_id={agent_id}&consumer_id=c1",
            a.url
        ),
    )
    .await;
    let mut feed = sse(&http, format!("{}/v0/events/stream", a.url)).await;
    let assigned = |event: &str, data: &serde_json::Value| {
        (event == "execution.assigned")
            .then(|| data["execution_id"].as_str().unwrap_or_default().to_owned())
    };
    let created = |_: &str, data: &serde_json::Value| {
        (data["type"] == "execution.created")
            .then(|| data["execution_id"].as_str().unwrap_or_default().to_owned())
    };
    let (mut assigned_seen, mut created_seen) = (BTreeMap::new(), BTreeMap::new());
    let mut ids = Vec::new();
    let (mut to_agent, mut to_feed) = (Vec::new(), Vec::new());
    // The first one waits for A's bridge to B to open; it is not measured.
    for n in 0..=SAMPLES {
        let sent = Instant::now();
        let (status, _, body) = post(
            &http,
            &format!("{}/v0/executions", b.url),
            serde_json::json!({"agent_id": agent_id, "input": {"n": n}}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().expect("id").to_owned();
        let limit = if n == 0 { 3 } else { 1 };
        let mut at_agent = None;
        for _ in 0..limit {
            at_agent = arrival(&mut agent, &mut assigned_seen, assigned, &id).await;
            if at_agent.is_some() {
                break;
            }
        }
        let at_agent = at_agent.unwrap_or_else(|| {
            panic!(
                "{id} not assigned on A; logs:\n{}",
                kernels
                    .iter()
                    .map(Kernel::log)
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            )
        });
        let at_feed = arrival(&mut feed, &mut created_seen, created, &id)
            .await
            .unwrap_or_else(|| panic!("{id} not in A's feed within 5 s"));
        if n > 0 {
            to_agent.push(at_agent - sent);
            to_feed.push(at_feed - sent);
        }
        ids.push(id);
    }
    // Each execution reached each reader exactly once.
    for id in &ids {
        assert_eq!(
            assigned_seen.get(id),
            Some(&1),
            "{id} assigned once: {assigned_seen:?}"
        );
        assert_eq!(
            created_seen.get(id),
            Some(&1),
            "{id} in the feed once: {created_seen:?}"
        );
    }
    for kernel in kernels {
        kernel.terminate().await;
    }
    (to_agent, to_feed)
}

#[tokio::test(flavor = "multi_thread")]
async fn assignments_and_feed_events_reach_another_kernel_once_with_and_without_notify() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        for (mode, flags) in [
            ("notify", vec!["--cluster"]),
            ("no-notify", vec!["--cluster", "--no-notify"]),
        ] {
            let (mut to_agent, mut to_feed) = measure(&database, &dir.path().join(mode), &flags, &format!("timed-{mode}")).await;
            to_agent.sort();
            to_feed.sort();
            println!(
                "{mode}: execution.assigned on A p50 {:?} p99 {:?}; execution.created in A's feed p50 {:?} p99 {:?} ({SAMPLES} executions created on B, from the request)",
                percentile(&to_agent, 0.5),
                percentile(&to_agent, 0.99),
                percentile(&to_feed, 0.5),
                percentile(&to_feed, 0.99),
            );
        }
    })
    .await
    .expect("test within its budget");
}
