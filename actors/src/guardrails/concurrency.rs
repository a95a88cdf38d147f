//! Concurrency limits (docs/guardrails.md, "Concurrency limits"): the pure parts.
//!
//! - [`RunningSlots`]: the executions of one agent id that hold a running slot (assigned, not
//!   yet terminal or back to `pending`) against the agent's `max_running`. The agent group asks
//!   it before each offer; pending executions beyond the limit stay in its queue, in order.
//! - [`ToolLimits`]: `max_concurrent_steps` per tool id, from the policy's
//!   `concurrency.tools`; the dispatcher holds remote jobs of a tool at its limit in its queue.

use std::collections::HashSet;

use crate::ids::{ExecutionId, ToolId};
use crate::policy::rules::Glob;

/// The running slots of one agent id.
#[derive(Debug, Default)]
pub struct RunningSlots {
    /// `max_running` in force; `None` is unlimited.
    limit: Option<u32>,
    /// Executions assigned and not yet terminal or reset.
    holding: HashSet<ExecutionId>,
    /// Executions whose session ended while their offer was still being answered: the
    /// assignment that answers it must not take a slot (the end came first).
    ended_in_offer: HashSet<ExecutionId>,
}

impl RunningSlots {
    /// Sets `max_running` (`None`: unlimited).
    pub fn set_limit(&mut self, limit: Option<u32>) {
        self.limit = limit;
    }

    /// Returns `max_running` in force.
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// Adds executions found running or blocked in the store (a group starting).
    pub fn load(&mut self, running: impl IntoIterator<Item = ExecutionId>) {
        self.holding.extend(running);
    }

    /// Returns whether one more offer may start while `offering` offers are in flight (each
    /// offer holds a slot until it is answered).
    pub fn admits(&self, offering: usize) -> bool {
        self.limit
            .is_none_or(|limit| self.holding.len() + offering < limit as usize)
    }

    /// An execution was assigned (its offer answered) or holds a session after a restart:
    /// it takes a slot, unless its session already ended while the offer was answered.
    pub fn hold(&mut self, execution_id: ExecutionId) {
        if !self.ended_in_offer.remove(&execution_id) {
            self.holding.insert(execution_id);
        }
    }

    /// An offer ended without an assignment.
    pub fn offer_dropped(&mut self, execution_id: &ExecutionId) {
        self.ended_in_offer.remove(execution_id);
    }

    /// An execution's session ended (terminal, or reset to `pending`); `offering` tells
    /// whether its offer is still in flight. Returns whether a slot was freed.
    pub fn release(&mut self, execution_id: &ExecutionId, offering: bool) -> bool {
        if offering {
            self.ended_in_offer.insert(execution_id.clone());
        }
        self.holding.remove(execution_id)
    }

    /// Returns the number of executions holding a slot.
    pub fn in_use(&self) -> usize {
        self.holding.len()
    }
}

/// One `concurrency.tools` entry: the tool ids it applies to and their limit.
#[derive(Clone, Debug)]
pub struct ToolLimit {
    /// Tool-id globs (each matching tool id has a limit of its own).
    pub tools: Vec<Glob>,
    /// Most steps of one tool id in a runner's hands at once.
    pub max_concurrent_steps: u32,
}

impl PartialEq for ToolLimit {
    fn eq(&self, other: &Self) -> bool {
        self.max_concurrent_steps == other.max_concurrent_steps
            && self
                .tools
                .iter()
                .map(Glob::as_str)
                .eq(other.tools.iter().map(Glob::as_str))
    }
}

/// The tool limits of a policy: the first entry that matches a tool id gives its limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolLimits(pub Vec<ToolLimit>);

impl ToolLimits {
    /// Returns the limit of `tool_id`, if an entry matches it.
    pub fn limit(&self, tool_id: &ToolId) -> Option<u32> {
        self.0
            .iter()
            .find(|entry| {
                entry
                    .tools
                    .iter()
                    .any(|glob| glob.is_match(tool_id.as_str()))
            })
            .map(|entry| entry.max_concurrent_steps)
    }

    /// Returns whether there are no limits.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
