//! The lease manager task of [`super::Cluster`]: each [`TICK`] it self-fences, renews, reads
//! the kernels and partitions and releases or acquires per the assignment ([`plan`]).

use super::*;

/// Stops acting on the partitions whose self-fence time has passed, and says so.
pub(super) fn self_fence(ownership: &Ownership, node_id: &str) {
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
pub(super) async fn fence_timer(
    ownership: Arc<Ownership>,
    node_id: String,
    stop: CancellationToken,
) {
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
pub(super) struct LeaseManager {
    pub(super) membership: Arc<Membership>,
    pub(super) ownership: Arc<Ownership>,
    pub(super) node_id: String,
    /// Another process registered with this node id; this one acts on nothing any more.
    pub(super) superseded: bool,
    /// The last tick failed (logged once per outage).
    pub(super) failing: bool,
    /// Send a membership notification after releasing partitions.
    pub(super) announce: bool,
    /// Woken by the others' membership notifications: tick now.
    pub(super) wake: Arc<tokio::sync::Notify>,
}

impl LeaseManager {
    pub(super) async fn run(mut self, stop: CancellationToken) {
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
