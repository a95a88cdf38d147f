//! Cluster mode: the status under which this kernel counts each live execution in
//! `keel_live_executions`, so that when a partition moves away its executions leave the gauges
//! exactly as they were counted (by then another kernel may have changed their status), and an
//! execution counted again after the partition comes back is not counted twice.
//!
//! Off in the one-kernel mode, where every execution stays with the kernel: the callers'
//! `from` is then trusted and nothing is kept per execution.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::ids::ExecutionId;
use crate::status::ExecutionStatus;

/// Per live execution, the status it is counted under (when on).
#[derive(Debug, Default)]
pub(super) struct LiveTally {
    on: AtomicBool,
    counted: Mutex<HashMap<ExecutionId, ExecutionStatus>>,
}

impl LiveTally {
    /// Keeps the status of each counted execution from now on.
    pub(super) fn turn_on(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    /// Records `id` moving to `to`; returns the status it was counted under before (`from`,
    /// the caller's word, when off).
    pub(super) fn moved(
        &self,
        id: &ExecutionId,
        from: Option<ExecutionStatus>,
        to: ExecutionStatus,
    ) -> Option<ExecutionStatus> {
        if !self.on.load(Ordering::Relaxed) {
            return from;
        }
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        if to.is_terminal() {
            let before = counted.remove(id);
            crate::shrink::relax(&mut *counted);
            before
        } else {
            counted.insert(id.clone(), to)
        }
    }

    /// Forgets the executions `matches` selects; returns the statuses they were counted under.
    pub(super) fn forget(&self, matches: &dyn Fn(&ExecutionId) -> bool) -> Vec<ExecutionStatus> {
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        let mut gone = Vec::new();
        counted.retain(|id, status| {
            let keep = !matches(id);
            if !keep {
                gone.push(*status);
            }
            keep
        });
        crate::shrink::relax(&mut *counted);
        gone
    }
}
