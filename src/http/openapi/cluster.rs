//! The document's entry for `GET /v0/cluster`.

#![allow(dead_code)] // The functions and types only carry the attributes.

use serde::Serialize;
use utoipa::ToSchema;

use super::answers::Unauthorized;

/// The cluster as the answering kernel sees it (its lease manager's last view, at most a
/// second old). A one-kernel database answers `{"mode": "single"}` only.
#[derive(Serialize, ToSchema)]
pub struct Cluster {
    /// `single` or `cluster`.
    #[schema(example = "cluster")]
    pub mode: String,
    /// The answering kernel's `--node-id` (cluster mode).
    pub node_id: Option<String>,
    /// The partition count of the database (cluster mode).
    pub partitions: Option<u32>,
    /// Partitions without a live owner right now (moving between kernels).
    pub unowned: Option<u32>,
    /// The kernels registered in the database, by id (cluster mode).
    pub kernels: Option<Vec<ClusterKernel>>,
}

/// One kernel of the cluster.
#[derive(Serialize, ToSchema)]
pub struct ClusterKernel {
    /// Its `--node-id`.
    pub id: String,
    /// Its `--advertise-url`.
    pub url: String,
    /// Its heartbeat is younger than the lease (5 s).
    pub live: bool,
    /// Partitions it holds with a running lease.
    pub partitions_owned: u32,
    /// It is the kernel that answered.
    pub this: bool,
}

#[utoipa::path(get, path = "/v0/cluster", tag = "operators",
    responses(
        (status = 200, description = "The kernels and their partitions, or `{\"mode\": \"single\"}`", body = Cluster),
        Unauthorized,
    ))]
fn cluster() {}
