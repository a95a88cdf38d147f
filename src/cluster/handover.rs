//! What a kernel does when its partitions change (docs/architecture.md, "Cluster"): on
//! acquiring partitions it loads their open executions (work in flight gets its actor, waiting
//! executions their deadline), so timers and deadlines run on the new owner without a request;
//! on losing partitions it stops their resident actors (without a write) and the execution
//! streams it serves for them end, so clients reconnect through the new owner.
//!
//! The lease manager records each change in [`Changes`]; one task ([`Handover::start`])
//! applies them to the actor tree in order.

use std::sync::{Arc, Mutex, PoisonError};

use keel_actors::ids::ExecutionId;
use keel_actors::kernel::Kernel;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::Ownership;
use crate::store::partition_of;

/// A change of the partitions this kernel holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Acquired (each at a new epoch).
    Acquired(Vec<u32>),
    /// No longer acted on (lease not renewed in time, taken, released, or left).
    Lost(Vec<u32>),
}

/// Where the lease manager records changes: a queue for the handover task and a counter of
/// losses that open execution streams watch.
#[derive(Debug)]
pub struct Changes {
    queue: Mutex<Option<mpsc::UnboundedSender<Change>>>,
    losses: watch::Sender<u64>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            queue: Mutex::new(None),
            losses: watch::Sender::new(0),
        }
    }
}

impl Changes {
    /// Records a change (nothing when `partitions` is empty).
    pub fn record(&self, change: Change) {
        let (Change::Acquired(partitions) | Change::Lost(partitions)) = &change;
        if partitions.is_empty() {
            return;
        }
        if matches!(change, Change::Lost(_)) {
            self.losses.send_modify(|count| *count += 1);
        }
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queue.as_ref() {
            let _ = queue.send(change);
        }
    }

    /// Takes the queue of changes from now on (one consumer: the handover task).
    fn take(&self) -> mpsc::UnboundedReceiver<Change> {
        let (sender, receiver) = mpsc::unbounded_channel();
        *self.queue.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        receiver
    }

    /// A receiver that sees every loss of a partition from now on.
    pub fn watch_losses(&self) -> watch::Receiver<u64> {
        self.losses.subscribe()
    }
}

/// The task applying partition changes to the actor tree.
pub struct Handover {
    task: JoinHandle<()>,
}

/// Ends an execution stream when its execution's partition leaves this kernel (or changes
/// epoch): the client's reconnect reaches the new owner through forwarding.
pub struct StreamFence {
    ownership: Arc<Ownership>,
    partition: u32,
    epoch: Option<i64>,
    losses: watch::Receiver<u64>,
}

impl StreamFence {
    /// Watches the partition of `id` as this kernel holds it now.
    pub fn new(ownership: Arc<Ownership>, id: &ExecutionId) -> Self {
        let partition = partition_of(id.as_str(), ownership.partitions());
        let losses = ownership.changes.watch_losses();
        let epoch = ownership.epoch(partition);
        Self {
            ownership,
            partition,
            epoch,
            losses,
        }
    }

    /// Whether this kernel still holds the partition at the epoch it had (false as soon as
    /// its self-fence time passed, before the lease manager notices).
    pub fn holds(&self) -> bool {
        self.epoch.is_some() && self.ownership.epoch(self.partition) == self.epoch
    }

    /// Resolves once this kernel no longer holds the partition at the epoch it had.
    pub async fn lost(&mut self) {
        loop {
            if !self.holds() {
                return;
            }
            if self.losses.changed().await.is_err() {
                return;
            }
        }
    }
}

impl Handover {
    /// Takes the changes recorded from now on and applies them to `kernel` in order. Start it
    /// before the lease manager's first tick, or right after the kernel started: changes
    /// recorded earlier are also in [`Ownership::owned`], which it loads first.
    pub fn start(kernel: Kernel, ownership: Arc<Ownership>) -> Self {
        let mut queue = ownership.changes.take();
        // What the lease manager acquired before the queue existed.
        let held: Vec<u32> = ownership.owned().iter().map(|(id, _)| *id).collect();
        let task = tokio::spawn(async move {
            acquired(&kernel, &held).await;
            while let Some(change) = queue.recv().await {
                match change {
                    Change::Acquired(partitions) => acquired(&kernel, &partitions).await,
                    Change::Lost(partitions) => lost(&kernel, &ownership, partitions).await,
                }
            }
        });
        Self { task }
    }

    /// Stops applying changes (at shutdown, before the actor tree stops).
    pub fn stop(self) {
        self.task.abort();
    }
}

/// Loads the open executions of `partitions`.
async fn acquired(kernel: &Kernel, partitions: &[u32]) {
    if partitions.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    match kernel.recover_partitions(partitions).await {
        Ok(executions) => info!(
            partitions = ?partitions,
            executions,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded the open executions of acquired partitions"
        ),
        Err(error) => warn!(
            partitions = ?partitions,
            error = %error,
            "loading the open executions of acquired partitions failed; each is loaded when a request concerns it"
        ),
    }
}

/// Stops the resident actors of `partitions`.
async fn lost(kernel: &Kernel, ownership: &Ownership, partitions: Vec<u32>) {
    let count = ownership.partitions();
    let matches: keel_actors::execution::ReleaseFilter =
        Arc::new(move |id: &ExecutionId| partitions.contains(&partition_of(id.as_str(), count)));
    match kernel.release_executions(matches).await {
        Ok(stopped) => info!(
            stopped,
            "stopped the resident executions of lost partitions; their streams end"
        ),
        Err(error) => warn!(error = %error, "stopping the executions of lost partitions failed"),
    }
}
