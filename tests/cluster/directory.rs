//! A runner's published tools on every kernel (docs/architecture.md, "Cluster", matching):
//! the kernel receiving a publication copies it to every live kernel, partitions held or not
//! yet, and a kernel that joins after the publication gets the tools from the runner's bridge.
//! Without either, an agent whose stream is on such a kernel finds no tool in its directory
//! (the rebuno SDK reads it once, at the agent's start) and its execution fails.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;

use super::harness::{Database, Kernel, poll};
use super::{BUDGET, get, owned_evenly_by, post};

/// The runners a kernel's directory lists for the tool `tool`.
async fn listed(http: &reqwest::Client, kernel: &Kernel, tool: &str) -> Vec<String> {
    let (status, _, body) = get(http, &format!("{}/v0/tools?prefix={tool}", kernel.url)).await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["id"] == tool)
        .filter_map(|entry| entry["runner_id"].as_str().map(str::to_owned))
        .collect()
}

/// Publishes `tool` for `runner` at `kernel`; the answer must be 204.
async fn publish(http: &reqwest::Client, kernel: &Kernel, runner: &str, tool: &str) {
    let (status, _, body) = post(
        http,
        &format!("{}/v0/runners/{runner}/tools", kernel.url),
        serde_json::json!({"tools": [{
            "id": tool,
            "description": "Multiply two integers.",
            "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
        }]}),
    )
    .await;
    assert_eq!(status, 204, "{body}");
}

/// The partitions `kernel` sees `node` holding, when it sees `node` live.
async fn held_by(http: &reqwest::Client, kernel: &Kernel, node: &str) -> Option<u64> {
    let (_, _, view) = get(http, &format!("{}/v0/cluster", kernel.url)).await;
    view["kernels"]
        .as_array()?
        .iter()
        .find(|entry| entry["id"] == node && entry["live"] == true)
        .and_then(|entry| entry["partitions_owned"].as_u64())
}

fn logs(kernels: &[&Kernel]) -> String {
    kernels
        .iter()
        .map(|kernel| kernel.log())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_that_joins_after_a_runner_published_lists_its_tools() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let k1 = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1"])
        })
        .await
        .expect("k1 holds every partition within 10 s");
        let http = reqwest::Client::new();

        // As the SDK does: publish, then open the stream; k2 does not exist yet.
        publish(&http, &k1, "r-joined", "calc_mul").await;
        let stream = http
            .get(format!(
                "{}/v0/runners/stream?runner_id=r-joined&consumer_id=c1&capabilities=calc_mul",
                k1.url
            ))
            .send()
            .await
            .expect("runner stream");
        assert_eq!(stream.status().as_u16(), 200);
        let reader = tokio::spawn(async move {
            let mut events = stream.bytes_stream().eventsource();
            while let Some(Ok(_)) = events.next().await {}
        });

        let k2 = Kernel::start("k2", &database.url, &dir.path().join("k2")).await;
        let found = poll(Duration::from_secs(10), || async {
            let runners = listed(&http, &k2, "calc_mul").await;
            (!runners.is_empty()).then_some(runners)
        })
        .await;
        let Some(runners) = found else {
            panic!(
                "k2 never listed the runner's tool; logs:\n{}",
                logs(&[&k1, &k2])
            );
        };
        assert_eq!(runners, ["r-joined"]);
        assert_eq!(listed(&http, &k1, "calc_mul").await, ["r-joined"]);
        reader.abort();
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publication_reaches_a_live_kernel_that_holds_no_partition_yet() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let k1 = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1"])
        })
        .await
        .expect("k1 holds every partition within 10 s");
        let http = reqwest::Client::new();
        // A joining kernel is live in k1's view about a tick before k1 sees it holding
        // anything; a publication to k1 in that window must still reach it. The window is
        // caught by polling; should it be missed, the next joining kernel gives another.
        let mut joined = Vec::new();
        for (attempt, node) in ["k2", "k3", "k4", "k5", "k6", "k7"].into_iter().enumerate() {
            let kernel = Kernel::start(node, &database.url, &dir.path().join(node)).await;
            let seen = poll(Duration::from_secs(10), || held_by(&http, &k1, node)).await;
            assert!(seen.is_some(), "k1 never saw {node} live");
            let runner = format!("r-{attempt}");
            let in_window = seen == Some(0);
            if in_window {
                publish(&http, &k1, &runner, "calc_mul").await;
            }
            let still_empty = held_by(&http, &k1, node).await == Some(0);
            joined.push(kernel);
            if !(in_window && still_empty) {
                continue;
            }
            let kernel = joined.last().expect("just pushed");
            let found = poll(Duration::from_secs(5), || async {
                let runners = listed(&http, kernel, "calc_mul").await;
                runners.contains(&runner).then_some(())
            })
            .await;
            assert!(
                found.is_some(),
                "{node} (live, no partition yet) never got the publication; logs:\n{}",
                logs(&[&k1, kernel])
            );
            return;
        }
        panic!("no joining kernel was seen live with no partition before it acquired some");
    })
    .await
    .expect("test within its budget");
}
