//! Starting a cluster for a test: kernels `k1`, `k2`, `k3` on one database, and the waits that
//! say it is balanced, in the database (`partitions`, `nodes`) and in every kernel's own view.
//! A test that then sends requests through the kernels waits for both: a kernel routes by its
//! own view, which may trail the database by a tick (a request would get 503 meanwhile).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::harness::{Database, Kernel, poll, views_settled};

/// Partitions of a cluster database by default.
pub const P: usize = 64;

/// Returns the live owners when every partition has one, with the count per owner.
pub async fn fully_owned(database: &Database) -> Option<BTreeMap<String, usize>> {
    let owners = database.live_owners().await;
    if owners.len() != P {
        return None;
    }
    let mut counts = BTreeMap::new();
    for (_, owner, _) in owners {
        *counts.entry(owner).or_insert(0) += 1;
    }
    Some(counts)
}

/// Returns the partitions held live by the kernels named in `nodes`, spread evenly.
pub async fn owned_evenly_by(
    database: &Database,
    nodes: &[&str],
) -> Option<BTreeMap<String, usize>> {
    let counts = fully_owned(database).await?;
    let ideal = P as f64 / nodes.len() as f64;
    let even = counts.len() == nodes.len()
        && nodes.iter().all(|node| {
            counts
                .get(*node)
                .is_some_and(|held| (*held as f64 - ideal).abs() <= 3.0)
        });
    even.then_some(counts)
}

/// Starts `k1`, `k2`, `k3` with plain `--cluster`, without waiting for the partitions.
pub async fn three_kernels(database: &Database, dir: &Path) -> Vec<Kernel> {
    let mut kernels = Vec::new();
    for node in ["k1", "k2", "k3"] {
        kernels.push(Kernel::start(node, &database.url, &dir.join(node)).await);
    }
    kernels
}

/// Starts `k1`, `k2`, `k3` with `flags` (which name `--cluster`), each with its own data
/// directory under `dir`, and waits until they are [`settled`].
pub async fn three_settled(database: &Database, dir: &Path, flags: &[&str]) -> Vec<Kernel> {
    let mut kernels = Vec::new();
    for node in ["k1", "k2", "k3"] {
        let kernel = Kernel::start_with(node, &database.url, &dir.join(node), flags)
            .await
            .unwrap_or_else(|log| panic!("{node} did not start:\n{log}"));
        kernels.push(kernel);
    }
    settled(database, &kernels).await;
    kernels
}

/// Waits (10 s each) until the database shows the partitions spread evenly over exactly
/// `kernels`, and every one of them shows that in its own view; panics with their logs if not.
pub async fn settled<K: std::borrow::Borrow<Kernel>>(database: &Database, kernels: &[K]) {
    let kernels: Vec<&Kernel> = kernels.iter().map(Borrow::borrow).collect();
    let nodes: Vec<&str> = kernels
        .iter()
        .map(|kernel| kernel.node_id.as_str())
        .collect();
    let balanced = poll(Duration::from_secs(10), || {
        owned_evenly_by(database, &nodes)
    })
    .await;
    let urls: Vec<&str> = kernels.iter().map(|kernel| kernel.url.as_str()).collect();
    let failed = if balanced.is_none() {
        "the database does not show"
    } else if !views_settled(&urls).await {
        "not every kernel's own view shows"
    } else {
        return;
    };
    panic!(
        "{failed} the partitions spread over {nodes:?} within 10 s; partitions {:?}; logs:\n{}",
        database.partitions().await,
        kernels
            .iter()
            .map(|kernel| kernel.log())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}
