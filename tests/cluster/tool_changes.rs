//! A `keel runner --mcp`'s pending tool changes through any kernel (docs/mcp.md, "Pinning"):
//! the runner reports them to the kernel it is connected to, which copies the report to every
//! live kernel, and so is an operator's acceptance. Without the copies another kernel shows
//! no pending change and refuses the acceptance (404), and the runner never learns of it.

use std::time::Duration;

use super::harness::{Database, Kernel, poll};
use super::{BUDGET, get, owned_evenly_by, post};

/// The runner's report of its whole pending list to `kernel`; returns what it answered.
async fn report(http: &reqwest::Client, kernel: &Kernel) -> serde_json::Value {
    let (status, _, body) = post(
        http,
        &format!("{}/v0/runners/r-mcp/tool-changes", kernel.url),
        serde_json::json!({"changes": [{
            "tool_id": "mcp_search",
            "change": "changed",
            "pinned": "sha256:old",
            "listed": "sha256:new",
        }]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_tool_changes_are_shown_and_accepted_through_any_kernel() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let k1 = Kernel::start("k1", &database.url, &dir.path().join("k1")).await;
        let k2 = Kernel::start("k2", &database.url, &dir.path().join("k2")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1", "k2"])
        })
        .await
        .expect("two kernels balance within 10 s");
        assert!(
            super::harness::views_settled(&[&k1.url, &k2.url]).await,
            "the kernels' views never showed both"
        );
        let http = reqwest::Client::new();

        // The runner reports to k1; nothing was accepted yet.
        assert_eq!(report(&http, &k1).await["accepted"], serde_json::json!([]));
        // k2 shows the pending change.
        let (status, _, shown) = get(&http, &format!("{}/v0/runners/r-mcp", k2.url)).await;
        assert_eq!(status, 200, "{shown}");
        assert_eq!(
            shown["pending_tool_changes"][0]["tool_id"], "mcp_search",
            "{shown}"
        );
        assert_eq!(
            shown["pending_tool_changes"][0]["listed"], "sha256:new",
            "{shown}"
        );
        // An operator accepts it through k2.
        let (status, _, accepted) = post(
            &http,
            &format!("{}/v0/runners/r-mcp/tool-changes/accept", k2.url),
            serde_json::json!({}),
        )
        .await;
        assert_eq!(status, 200, "{accepted}");
        assert_eq!(
            accepted["accepted"][0]["tool_id"], "mcp_search",
            "{accepted}"
        );
        // The runner's next report to k1 learns the acceptance (it then pins the digest).
        let learned = report(&http, &k1).await;
        assert_eq!(learned["accepted"][0]["listed"], "sha256:new", "{learned}");
        // Both kernels show it accepted, none pending.
        for kernel in [&k1, &k2] {
            let (_, _, shown) = get(&http, &format!("{}/v0/runners/r-mcp", kernel.url)).await;
            assert_eq!(
                shown["pending_tool_changes"],
                serde_json::json!([]),
                "{shown}"
            );
            assert_eq!(shown["accepted_tool_changes"][0]["tool_id"], "mcp_search");
        }
        k1.terminate().await;
        k2.terminate().await;
    })
    .await
    .expect("test within its budget");
}
