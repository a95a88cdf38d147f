//! Cluster mode (`keel serve --cluster`): several kernels on one PostgreSQL database, each
//! owning a share of its partitions (docs/architecture.md, "Cluster").
//!
//! [`Cluster::start`] registers the kernel in the `nodes` table and runs the lease manager, a
//! task that every [`TICK`]:
//! 1. drops the partitions whose lease it could not renew in time (self-fencing: a partition
//!    is acted on only until `last successful renewal + LEASE - MARGIN`, measured from before
//!    the renewal was sent, so the kernel stops before the database can see the lease lapse);
//! 2. stamps its heartbeat and renews all its partitions in one statement;
//! 3. reads the kernels and partitions (P + N rows: constant, whatever the number of
//!    executions), computes the assignment ([`assign`]) over the live kernels, releases the
//!    partitions assigned elsewhere and acquires with a compare-and-set (epoch + 1) the free
//!    or expired ones assigned to it.
//!
//! Every time that decides anything is the database's `now()`; the kernel's clock only
//! measures its own intervals (its self-fence).

pub mod assign;
pub mod bridge;
pub mod forward;
pub mod handover;
mod lease;
pub mod notify;
pub mod publish;
pub mod view;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::ClusterSettings;
use crate::store::StoreError;
use crate::store::postgres::{Membership, NodeRow, PartitionRow};

/// How long an acquired or renewed lease lasts, on the database's clock.
pub const LEASE: Duration = Duration::from_secs(5);

/// Period of the lease manager.
pub const TICK: Duration = Duration::from_secs(1);

/// A partition is given up locally this long before its lease could lapse.
pub const MARGIN: Duration = Duration::from_secs(1);

/// Bound of each membership statement: a statement that hangs must not hold up the next
/// tick's self-fence check.
const STATEMENT_TIMEOUT: Duration = Duration::from_millis(900);

/// A partition this kernel holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The epoch it was acquired at; writes are fenced on it.
    pub epoch: i64,
    /// The kernel acts on it until then (self-fence).
    valid_until: Instant,
}

/// The partitions this kernel holds, shared by the lease manager and whoever must know whether
/// it may act on a partition.
#[derive(Debug)]
pub struct Ownership {
    held: Mutex<BTreeMap<u32, Held>>,
    partitions: u32,
    /// Per partition, the kernel the last view showed holding it (id, advertised URL), if its
    /// lease ran and its heartbeat was fresh.
    routes: Mutex<Vec<Option<Route>>>,
    /// The kernels of the last view (for `GET /v0/cluster` and the console).
    members: Mutex<Vec<NodeRow>>,
    /// Partitions acquired (each an epoch change), for `/metrics`.
    acquisitions: AtomicU64,
    /// Partitions lost (not renewed in time, taken, or given up), for `/metrics`.
    losses: AtomicU64,
    /// Commits refused by the fence, for `/metrics`.
    refusals: AtomicU64,
    /// Acquisitions and losses, for the handover task and the execution streams.
    changes: handover::Changes,
    /// LISTEN/NOTIFY wake-ups (inert with `--no-notify`).
    wakeups: Arc<notify::Wakeups>,
    /// When the last tick found this kernel's own membership row (this incarnation, heartbeat
    /// just stamped); `None` before the first and once superseded.
    member_seen: Mutex<Option<Instant>>,
}

/// Where a partition's owner is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Its `--node-id`.
    pub node: String,
    /// Its `--advertise-url`.
    pub url: String,
}

impl Ownership {
    /// No partition held yet, out of `partitions`.
    pub fn new(partitions: u32) -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            partitions,
            routes: Mutex::new(vec![None; partitions as usize]),
            members: Mutex::new(Vec::new()),
            acquisitions: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            changes: handover::Changes::default(),
            wakeups: Arc::default(),
            member_seen: Mutex::new(None),
        }
    }

    /// The cluster's OpenMetrics families of this kernel (without `# EOF`).
    pub fn encode_metrics(&self, forwarded: u64) -> String {
        let families = [
            (
                "keel_cluster_partitions_owned",
                "gauge",
                "Partitions this kernel holds now.",
                self.owned().len() as u64,
            ),
            (
                "keel_cluster_partition_acquisitions",
                "counter",
                "Partitions this kernel acquired (each one an epoch change).",
                self.acquisitions.load(Ordering::Relaxed),
            ),
            (
                "keel_cluster_partition_losses",
                "counter",
                "Partitions this kernel stopped holding (lease not renewed in time, taken, released).",
                self.losses.load(Ordering::Relaxed),
            ),
            (
                "keel_cluster_fence_refusals",
                "counter",
                "Commits refused because this kernel did not hold the execution's partition.",
                self.refusals.load(Ordering::Relaxed),
            ),
            (
                "keel_cluster_forwarded_requests",
                "counter",
                "Requests forwarded to the kernel owning their execution.",
                forwarded,
            ),
        ];
        let mut text = String::new();
        for (name, kind, help, value) in families {
            let sample = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            text.push_str(&format!(
                "# TYPE {name} {kind}\n# HELP {name} {help}\n{sample} {value}\n"
            ));
        }
        text
    }

    /// The owner of `partition` as the last view showed it.
    pub fn route(&self, partition: u32) -> Option<Route> {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(partition as usize)
            .cloned()
            .flatten()
    }

    /// The kernels the last view showed (live or not).
    pub fn members(&self) -> Vec<NodeRow> {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the owners of the last view.
    fn set_routes(&self, nodes: &[NodeRow], partitions: &[PartitionRow]) {
        nodes.clone_into(&mut self.members.lock().unwrap_or_else(PoisonError::into_inner));
        let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        for route in routes.iter_mut() {
            *route = None;
        }
        for row in partitions {
            let owner = nodes.iter().find(|node| {
                node.live
                    && Some(&node.id) == row.owner.as_ref()
                    && Some(node.incarnation) == row.owner_incarnation
            });
            if let (true, Some(owner), Some(slot)) =
                (row.leased, owner, routes.get_mut(row.id as usize))
            {
                *slot = Some(Route {
                    node: owner.id.clone(),
                    url: owner.url.clone(),
                });
            }
        }
    }

    /// Whether this kernel is a live member: a tick less than a lease ago found its own row
    /// (this incarnation, heartbeat stamped). `/v0/ready` of a cluster kernel asks it, whether
    /// or not the kernel holds partitions yet (docs/deploying.md, "Running several kernels").
    pub fn is_live_member(&self) -> bool {
        self.member_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|seen| seen.elapsed() < LEASE)
    }

    fn set_member_seen(&self, seen: Option<Instant>) {
        *self
            .member_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = seen;
    }

    /// The partition count P.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Returns the epoch of `partition` when this kernel may act on it now.
    pub fn epoch(&self, partition: u32) -> Option<i64> {
        let held = self.lock();
        held.get(&partition)
            .filter(|held| held.valid_until > Instant::now())
            .map(|held| held.epoch)
    }

    /// The partitions this kernel may act on now, with their epochs.
    pub fn owned(&self) -> Vec<(u32, i64)> {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter(|(_, held)| held.valid_until > now)
            .map(|(id, held)| (*id, held.epoch))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The earliest time a held partition's self-fence falls, if any is held.
    fn next_fence(&self) -> Option<Instant> {
        self.lock().values().map(|held| held.valid_until).min()
    }

    /// Drops the partitions whose self-fence time has passed; returns them.
    fn expire(&self, now: Instant) -> Vec<u32> {
        let mut held = self.lock();
        let lapsed: Vec<u32> = held
            .iter()
            .filter(|(_, held)| held.valid_until <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in &lapsed {
            held.remove(id);
        }
        drop(held);
        self.losses
            .fetch_add(lapsed.len() as u64, Ordering::Relaxed);
        self.changes.record(handover::Change::Lost(lapsed.clone()));
        lapsed
    }

    /// Records a renewal of the partitions in `renewed` (sent before `sent`); drops those of
    /// `asked` the database did not renew and returns them.
    fn renewed(&self, asked: &[u32], renewed: &[(u32, i64)], sent: Instant) -> Vec<u32> {
        let mut held = self.lock();
        let valid_until = sent + LEASE - MARGIN;
        let mut lost = Vec::new();
        for id in asked {
            match renewed.iter().find(|(renewed_id, _)| renewed_id == id) {
                Some((_, epoch)) => {
                    held.insert(
                        *id,
                        Held {
                            epoch: *epoch,
                            valid_until,
                        },
                    );
                }
                None => {
                    held.remove(id);
                    lost.push(*id);
                }
            }
        }
        drop(held);
        self.losses.fetch_add(lost.len() as u64, Ordering::Relaxed);
        self.changes.record(handover::Change::Lost(lost.clone()));
        lost
    }

    /// Records partitions acquired by a statement sent at `sent`.
    fn acquired(&self, acquired: &[(u32, i64)], sent: Instant) {
        let mut held = self.lock();
        self.acquisitions
            .fetch_add(acquired.len() as u64, Ordering::Relaxed);
        for (id, epoch) in acquired {
            held.insert(
                *id,
                Held {
                    epoch: *epoch,
                    valid_until: sent + LEASE - MARGIN,
                },
            );
        }
        drop(held);
        self.changes.record(handover::Change::Acquired(
            acquired.iter().map(|(id, _)| *id).collect(),
        ));
    }

    /// Stops acting on `partitions`.
    fn drop_partitions(&self, partitions: &[u32]) {
        let mut held = self.lock();
        let mut dropped = Vec::new();
        for id in partitions {
            if held.remove(id).is_some() {
                self.losses.fetch_add(1, Ordering::Relaxed);
                dropped.push(*id);
            }
        }
        drop(held);
        self.changes.record(handover::Change::Lost(dropped));
    }

    /// Stops acting on every partition; returns how many were held.
    fn drop_all(&self) -> usize {
        let mut held = self.lock();
        let dropped: Vec<u32> = held.keys().copied().collect();
        held.clear();
        drop(held);
        self.changes.record(handover::Change::Lost(dropped.clone()));
        dropped.len()
    }
}

impl crate::store::PartitionFence for Ownership {
    fn partitions(&self) -> u32 {
        self.partitions
    }

    fn epoch(&self, partition: u32) -> Option<i64> {
        Ownership::epoch(self, partition)
    }

    fn refused(&self, _partition: u32) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
    }

    fn committed(&self) {
        self.wakeups.committed();
    }

    fn commit_wakeups(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.wakeups.remote_commits()
    }
}

/// A running cluster membership: the lease manager task and the partitions it holds.
#[derive(Debug)]
pub struct Cluster {
    ownership: Arc<Ownership>,
    membership: Arc<Membership>,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    node_id: String,
    /// Send membership notifications (`--no-notify` off).
    announce: bool,
}

impl Cluster {
    /// Registers this kernel in the cluster on the database at `db_url` and starts its lease
    /// manager. The store must already have been opened in cluster mode (it creates the
    /// partition rows).
    pub async fn start(
        settings: &ClusterSettings,
        db_url: &str,
        ownership: Arc<Ownership>,
    ) -> Result<Self, StoreError> {
        let membership = Arc::new(
            Membership::join(
                db_url,
                &settings.node_id,
                &settings.advertise_url,
                LEASE,
                STATEMENT_TIMEOUT.max(Duration::from_secs(2)),
            )
            .await?,
        );
        info!(
            node = %settings.node_id,
            incarnation = membership.incarnation(),
            advertise_url = %settings.advertise_url,
            partitions = settings.partitions,
            "joined the cluster"
        );
        let stop = CancellationToken::new();
        let wakeups = ownership.wakeups.clone();
        if settings.notify {
            wakeups.start(db_url, membership.clone(), &settings.node_id, &stop);
            // The others rebalance now rather than at their next tick.
            let _ = membership.notify(notify::MEMBERSHIP).await;
        }
        let manager = lease::LeaseManager {
            membership: membership.clone(),
            ownership: ownership.clone(),
            node_id: settings.node_id.clone(),
            superseded: false,
            failing: false,
            announce: settings.notify,
            wake: wakeups.membership(),
        };
        let task = tokio::spawn(manager.run(stop.clone()));
        tokio::spawn(lease::fence_timer(
            ownership.clone(),
            settings.node_id.clone(),
            stop.clone(),
        ));
        Ok(Self {
            ownership,
            membership,
            stop,
            task: Mutex::new(Some(task)),
            node_id: settings.node_id.clone(),
            announce: settings.notify,
        })
    }

    /// The partitions this kernel holds.
    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// Leaves the cluster: stops the lease manager, stops acting on every partition and
    /// releases them (epochs kept, leases expired now) and marks this kernel gone, so the
    /// others take its partitions on their next tick. Call it after the actor tree stopped.
    pub async fn leave(&self) {
        self.stop.cancel();
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let held = self.ownership.drop_all();
        let started = Instant::now();
        let announce = self.announce.then_some(notify::MEMBERSHIP);
        match self.membership.leave(announce).await {
            Ok(()) => info!(
                node = %self.node_id,
                released = held,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "left the cluster"
            ),
            Err(error) => warn!(
                node = %self.node_id,
                error = %error,
                "leaving the cluster failed; the others take its partitions when the leases expire"
            ),
        }
    }
}
