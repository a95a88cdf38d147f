//! What `GET /v0/cluster` and the console show of the cluster: the kernels of the lease
//! manager's last view (at most a tick old), the partitions each one holds, and which kernel
//! owns an execution. Read from memory: no statement per request.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Ownership;
use crate::store::partition_of;

/// The cluster as this kernel sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterView {
    /// `cluster` (a one-kernel database answers `single` and nothing else).
    pub mode: &'static str,
    /// This kernel's `--node-id`.
    pub node_id: String,
    /// The partition count P of the database.
    pub partitions: u32,
    /// Partitions with no live owner in the last view (moving between kernels).
    pub unowned: u32,
    /// The kernels of the last view, by id.
    pub kernels: Vec<KernelView>,
}

/// One kernel of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelView {
    /// Its `--node-id`.
    pub id: String,
    /// Its `--advertise-url`.
    pub url: String,
    /// Its heartbeat is younger than the lease.
    pub live: bool,
    /// Partitions it holds with a running lease.
    pub partitions_owned: u32,
    /// It is the kernel answering.
    pub this: bool,
}

/// Builds the view of `ownership` for the kernel `node_id`.
pub fn view(ownership: &Ownership, node_id: &str) -> ClusterView {
    let partitions = ownership.partitions();
    let mut owned: BTreeMap<String, u32> = BTreeMap::new();
    let mut unowned = 0;
    for partition in 0..partitions {
        match ownership.route(partition) {
            Some(route) => *owned.entry(route.node).or_default() += 1,
            None => unowned += 1,
        }
    }
    let kernels = ownership
        .members()
        .into_iter()
        .map(|node| KernelView {
            partitions_owned: owned.get(&node.id).copied().unwrap_or(0),
            this: node.id == node_id,
            id: node.id,
            url: node.url,
            live: node.live,
        })
        .collect();
    ClusterView {
        mode: "cluster",
        node_id: node_id.to_owned(),
        partitions,
        unowned,
        kernels,
    }
}

/// The kernel that owns the execution `id` in the last view, if any.
pub fn owner_of(ownership: &Ownership, node_id: &str, id: &str) -> Option<String> {
    let partition = partition_of(id, ownership.partitions());
    if ownership.epoch(partition).is_some() {
        return Some(node_id.to_owned());
    }
    ownership.route(partition).map(|route| route.node)
}
