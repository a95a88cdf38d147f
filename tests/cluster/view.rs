//! `GET /v0/cluster` and the console's cluster facts on three real kernels: every kernel lists
//! the three with the partitions the database gives each, knows which one it is, and names an
//! execution's owning kernel on the execution's page.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Database, poll};
use crate::{BUDGET, owned_evenly_by, owner_of, three_settled};

/// The partitions per kernel a `/v0/cluster` answer reports, when it lists `expected` live
/// kernels, marks only `me` as `this` and has no unowned partition.
fn counts_of(view: &Value, me: &str) -> Option<BTreeMap<String, usize>> {
    let kernels = view["kernels"].as_array()?;
    let mut counts = BTreeMap::new();
    for kernel in kernels {
        let id = kernel["id"].as_str()?;
        if kernel["live"] != json!(true) || (kernel["this"] == json!(true)) != (id == me) {
            return None;
        }
        counts.insert(
            id.to_owned(),
            usize::try_from(kernel["partitions_owned"].as_u64()?).ok()?,
        );
    }
    (view["mode"] == "cluster" && view["node_id"] == me && view["unowned"] == 0).then_some(counts)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_kernel_lists_the_cluster_and_names_an_executions_owner() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let kernels = three_settled(&database, dir.path(), &["--cluster"]).await;
        let counts = owned_evenly_by(&database, &["k1", "k2", "k3"])
            .await
            .expect("the partitions stay spread over the three kernels");
        let http = reqwest::Client::new();
        for kernel in &kernels {
            // Each kernel's view is at most a lease tick behind the database.
            let url = format!("{}/v0/cluster", kernel.url);
            let seen = poll(Duration::from_secs(3), || {
                let (http, url, me, counts) = (
                    http.clone(),
                    url.clone(),
                    kernel.node_id.clone(),
                    counts.clone(),
                );
                async move {
                    let view: Value = http.get(&url).send().await.ok()?.json().await.ok()?;
                    (counts_of(&view, &me)? == counts).then_some(())
                }
            })
            .await;
            let last: Value = http
                .get(&url)
                .send()
                .await
                .expect("view")
                .json()
                .await
                .expect("json");
            assert!(
                seen.is_some(),
                "{}'s view {last} never matched {counts:?}",
                kernel.node_id
            );
        }

        // An execution created through k1, looked at through the others' consoles.
        let created: Value = http
            .post(format!("{}/v0/executions", kernels[0].url))
            .json(&json!({"agent_id": "viewer", "input": {}}))
            .send()
            .await
            .expect("create")
            .json()
            .await
            .expect("creation body");
        let id = created["id"].as_str().expect("execution id").to_owned();
        let owner = owner_of(&database, &id).await;
        for kernel in &kernels[1..] {
            let page = http
                .get(format!("{}/console/view/executions/{id}", kernel.url))
                .send()
                .await
                .expect("execution view")
                .text()
                .await
                .expect("view text");
            assert!(
                page.contains(&format!("data-owner=\"{owner}\"")),
                "{} names {owner} as the owner: {page}",
                kernel.node_id
            );
            let status = http
                .get(format!("{}/console/view/status", kernel.url))
                .send()
                .await
                .expect("status view")
                .text()
                .await
                .expect("view text");
            for (node, held) in &counts {
                assert!(
                    status.contains(&format!("data-kernel=\"{node}\""))
                        && status.contains(&format!("data-partitions=\"{held}\"")),
                    "{}'s status page lists {node} with {held} partitions: {status}",
                    kernel.node_id
                );
            }
        }
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

/// The status of `GET /v0/ready` of `url`.
async fn ready(http: &reqwest::Client, url: &str) -> u16 {
    http.get(format!("{url}/v0/ready"))
        .send()
        .await
        .map_or(0, |response| response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_kernel_is_ready_while_a_live_member_even_without_partitions() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let http = reqwest::Client::new();
        let first = crate::harness::Kernel::start("k1", &database.url, &dir.path().join("a")).await;
        poll(Duration::from_secs(10), || {
            owned_evenly_by(&database, &["k1"])
        })
        .await
        .expect("k1 holds every partition");
        assert_eq!(ready(&http, &first.url).await, 200);
        // A second process with the same node id supersedes the first: the store still
        // answers the first, but it is no longer a member and acts on nothing, so it is not
        // ready (a load balancer stops sending it requests). The second is ready as soon as
        // it is a member, before or after it holds partitions.
        let second =
            crate::harness::Kernel::start("k1", &database.url, &dir.path().join("b")).await;
        let superseded = poll(Duration::from_secs(5), || async {
            (ready(&http, &first.url).await == 503).then_some(())
        })
        .await;
        assert!(superseded.is_some(), "log:\n{}", first.log());
        let member = poll(Duration::from_secs(5), || async {
            (ready(&http, &second.url).await == 200).then_some(())
        })
        .await;
        assert!(member.is_some(), "log:\n{}", second.log());
        let (status, _, body) = crate::get(&http, &format!("{}/v0/ready", first.url)).await;
        assert_eq!(status, 503);
        assert_eq!(body["code"], "SERVICE_UNAVAILABLE", "{body}");
        second.terminate().await;
        first.kill().await;
    })
    .await
    .expect("test within its budget");
}
