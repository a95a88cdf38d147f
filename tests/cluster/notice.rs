//! A creation's "nobody to run it" notice in cluster mode (docs/api.md): a consumer of the
//! agent connected to any kernel counts, not only those of the kernel receiving the creation.
//! Each kernel sees every consumer through the bridge the consumer's kernel opens to it.

use std::time::Duration;

use super::harness::{Database, Kernel, poll, views_settled};
use super::matching::{agent_stream, next_assigned};
use super::{BUDGET, owned_evenly_by, post};

/// Creates an execution of `agent` at `kernel`; returns its id and notice.
async fn create(
    http: &reqwest::Client,
    kernel: &Kernel,
    agent: &str,
) -> (String, serde_json::Value) {
    let (status, _, body) = post(
        http,
        &format!("{}/v0/executions", kernel.url),
        serde_json::json!({"agent_id": agent, "input": {}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (
        body["id"].as_str().expect("id").to_owned(),
        body["notice"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_on_another_kernel_means_no_notice() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        let b = Kernel::start("k2", &database.url, &dir.path().join("k2")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1", "k2"])
        })
        .await
        .expect("two kernels balance within 10 s");
        assert!(
            views_settled(&[&a.url, &b.url]).await,
            "views never settled"
        );
        let http = reqwest::Client::new();

        // Nobody anywhere: B says so.
        let (_, notice) = create(&http, &b, "nobody-agent").await;
        assert!(
            notice
                .as_str()
                .is_some_and(|text| text.contains("no consumer of agent nobody-agent")),
            "{notice}"
        );

        // The agent connects to A; B learns of it through A's bridge (within a round).
        let mut stream = agent_stream(&http, &a.url, "noticed-agent", "c1").await;
        let listed = poll(Duration::from_secs(5), || async {
            let text = http
                .get(format!("{}/v0/agents", b.url))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.contains("noticed-agent").then_some(())
        })
        .await;
        assert!(listed.is_some(), "B never saw the agent connected to A");
        let (id, notice) = create(&http, &b, "noticed-agent").await;
        assert!(
            notice.is_null(),
            "a notice although the agent is on A: {notice}"
        );
        // And the agent on A gets it.
        let assigned = next_assigned(&mut stream, Duration::from_secs(10))
            .await
            .expect("the agent on A is assigned the execution");
        assert_eq!(assigned["execution_id"], id.as_str(), "{assigned}");
        a.terminate().await;
        b.terminate().await;
    })
    .await
    .expect("test within its budget");
}
