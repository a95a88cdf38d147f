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
        let manager = LeaseManager {
            membership: membership.clone(),
            ownership: ownership.clone(),
            node_id: settings.node_id.clone(),
            superseded: false,
            failing: false,
            announce: settings.notify,
            wake: wakeups.membership(),
        };
        let task = tokio::spawn(manager.run(stop.clone()));
        tokio::spawn(fence_timer(
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

/// Stops acting on the partitions whose self-fence time has passed, and says so.
fn self_fence(ownership: &Ownership, node_id: &str) {
    let lapsed = ownership.expire(Instant::now());
    if !lapsed.is_empty() {
        warn!(
            node = %node_id,
            partitions = ?lapsed,
            "lost partitions: their leases were not renewed in time; stopped acting on them"
        );
    }
}

/// Applies the self-fence at the moment it falls, not at the next tick: a tick can be late
/// (its statements wait up to their timeout while the database is unreachable), and the
/// partition's actors and streams must stop before its lease can lapse, not only its writes.
async fn fence_timer(ownership: Arc<Ownership>, node_id: String, stop: CancellationToken) {
    loop {
        let latest = Instant::now() + TICK;
        let wake = ownership.next_fence().map_or(latest, |at| at.min(latest));
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(wake) => {}
        }
        self_fence(&ownership, &node_id);
    }
}

/// The lease manager's state.
struct LeaseManager {
    membership: Arc<Membership>,
    ownership: Arc<Ownership>,
    node_id: String,
    /// Another process registered with this node id; this one acts on nothing any more.
    superseded: bool,
    /// The last tick failed (logged once per outage).
    failing: bool,
    /// Send a membership notification after releasing partitions.
    announce: bool,
    /// Woken by the others' membership notifications: tick now.
    wake: Arc<tokio::sync::Notify>,
}

impl LeaseManager {
    async fn run(mut self, stop: CancellationToken) {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = interval.tick() => {}
                () = self.wake.notified() => interval.reset(),
            }
            if self.superseded {
                continue;
            }
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.tick() => outcome,
            };
            match outcome {
                Ok(()) if self.failing => {
                    self.failing = false;
                    info!(node = %self.node_id, "cluster membership statements succeed again");
                }
                Ok(()) => {}
                Err(error) if !self.failing => {
                    self.failing = true;
                    warn!(node = %self.node_id, error = %error, "cluster lease renewal failed; partitions are given up before their leases can lapse");
                }
                Err(_) => {}
            }
        }
    }

    /// One round: self-fence, renew, rebalance.
    async fn tick(&mut self) -> Result<(), StoreError> {
        self_fence(&self.ownership, &self.node_id);
        let held: Vec<u32> = self.ownership.owned().iter().map(|(id, _)| *id).collect();
        let sent = Instant::now();
        let renewed = self.membership.renew(&held).await?;
        let lost = self.ownership.renewed(&held, &renewed, sent);
        if !lost.is_empty() {
            warn!(
                node = %self.node_id,
                partitions = ?lost,
                "lost partitions: another kernel holds them now; stopped acting on them"
            );
        }
        let (nodes, partitions) = self.membership.view().await?;
        let me = nodes.iter().find(|node| node.id == self.node_id);
        if me.map(|node| node.incarnation) != Some(self.membership.incarnation()) {
            let dropped = self.ownership.drop_all();
            self.ownership.set_member_seen(None);
            self.superseded = true;
            error!(
                node = %self.node_id,
                dropped,
                "another kernel process started with this --node-id; this one acts on no partition any more (give every kernel its own id)"
            );
            return Ok(());
        }
        self.ownership.set_routes(&nodes, &partitions);
        if me.is_some_and(|node| node.live) {
            self.ownership.set_member_seen(Some(sent));
        }
        let plan = plan(
            &self.node_id,
            self.membership.incarnation(),
            &nodes,
            &partitions,
            &self.ownership,
        );
        if !plan.release.is_empty() {
            self.ownership.drop_partitions(&plan.release);
            self.membership.release(&plan.release).await?;
            info!(node = %self.node_id, partitions = ?plan.release, "released partitions assigned to another kernel");
            if self.announce {
                // The kernel they are assigned to takes them now rather than at its next tick.
                let _ = self.membership.notify(notify::MEMBERSHIP).await;
            }
        }
        if !plan.acquire.is_empty() {
            let sent = Instant::now();
            let acquired = self.membership.acquire(&plan.acquire).await?;
            self.ownership.acquired(&acquired, sent);
            if !acquired.is_empty() {
                info!(
                    node = %self.node_id,
                    partitions = ?acquired.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
                    owned = self.ownership.owned().len(),
                    "acquired partitions"
                );
            }
        }
        Ok(())
    }
}

/// What one tick changes.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Held partitions now assigned to another kernel.
    release: Vec<u32>,
    /// Partitions assigned to this kernel that it can take now.
    acquire: Vec<u32>,
}

/// Decides what to release and acquire: the assignment over the live kernels (this one always
/// counts as live) against what this kernel holds and what the table shows.
fn plan(
    node_id: &str,
    incarnation: i64,
    nodes: &[NodeRow],
    partitions: &[PartitionRow],
    ownership: &Ownership,
) -> Plan {
    let live: Vec<String> = nodes
        .iter()
        .filter(|node| node.live || node.id == node_id)
        .map(|node| node.id.clone())
        .collect();
    let assignment = assign::assign(&live, ownership.partitions());
    let mine = |partition: u32| {
        assignment
            .get(partition as usize)
            .copied()
            .flatten()
            .map(|index| live[index].as_str())
            == Some(node_id)
    };
    let held = ownership.owned();
    let mut plan = Plan::default();
    for (id, _) in &held {
        if !mine(*id) {
            plan.release.push(*id);
        }
    }
    for row in partitions {
        if !mine(row.id) || held.iter().any(|(id, _)| *id == row.id) {
            continue;
        }
        let ours =
            row.owner.as_deref() == Some(node_id) && row.owner_incarnation == Some(incarnation);
        if !row.leased || ours {
            plan.acquire.push(row.id);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, live: bool) -> NodeRow {
        NodeRow {
            id: id.to_owned(),
            incarnation: 1,
            url: format!("http://{id}"),
            live,
        }
    }

    fn free(id: u32) -> PartitionRow {
        PartitionRow {
            id,
            owner: None,
            owner_incarnation: None,
            epoch: 0,
            leased: false,
        }
    }

    #[test]
    fn a_lone_kernel_takes_every_free_partition() {
        let ownership = Ownership::new(8);
        let rows: Vec<_> = (0..8).map(free).collect();
        let plan = plan("a", 1, &[node("a", true)], &rows, &ownership);
        assert_eq!(plan.acquire, (0..8).collect::<Vec<_>>());
        assert!(plan.release.is_empty());
    }

    #[test]
    fn a_leased_partition_of_another_kernel_is_not_taken() {
        let ownership = Ownership::new(1);
        let mut row = free(0);
        row.owner = Some("b".to_owned());
        row.owner_incarnation = Some(1);
        row.leased = true;
        // "b" is dead in this view (its heartbeat is old) but its lease still runs.
        let nodes = [node("a", true), node("b", false)];
        let waiting = plan("a", 1, &nodes, &[row.clone()], &ownership);
        assert!(waiting.acquire.is_empty());
        row.leased = false;
        let taking = plan("a", 1, &nodes, &[row], &ownership);
        assert_eq!(taking.acquire, vec![0]);
    }

    #[test]
    fn held_partitions_assigned_elsewhere_are_released() {
        let ownership = Ownership::new(64);
        ownership.acquired(
            &(0..64).map(|id| (id, 1)).collect::<Vec<_>>(),
            Instant::now(),
        );
        let nodes = [node("a", true), node("b", true), node("c", true)];
        let rows: Vec<_> = (0..64).map(free).collect();
        let plan = plan("a", 1, &nodes, &rows, &ownership);
        assert!((40..=44).contains(&plan.release.len()), "{plan:?}");
        assert!(plan.acquire.is_empty());
    }

    #[test]
    fn the_self_fence_drops_a_partition_before_its_lease_lapses() {
        let ownership = Ownership::new(2);
        let sent = Instant::now();
        ownership.acquired(&[(0, 3)], sent);
        assert_eq!(ownership.epoch(0), Some(3));
        assert!(
            ownership
                .expire(sent + LEASE - MARGIN - Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(ownership.expire(sent + LEASE - MARGIN), vec![0]);
        assert_eq!(ownership.epoch(0), None);
    }

    #[test]
    fn a_partition_not_renewed_is_lost() {
        let ownership = Ownership::new(2);
        let sent = Instant::now();
        ownership.acquired(&[(0, 1), (1, 1)], sent);
        let lost = ownership.renewed(&[0, 1], &[(0, 1)], Instant::now());
        assert_eq!(lost, vec![1]);
        assert_eq!(ownership.owned(), vec![(0, 1)]);
    }
}
