//! Concurrency limits (docs/guardrails.md, "Concurrency limits"): the pure parts.
//!
//! - [`RunningSlots`]: the executions of one agent id that hold a running slot (assigned, not
//!   yet terminal or back to `pending`) against the agent's `max_running` and its limits per
//!   label value ([`RunningLimits`]). The agent group asks it before each offer; pending
//!   executions beyond a limit stay in its queue, in order.
//! - [`ToolLimits`]: `max_concurrent_steps` per tool id, from the policy's
//!   `concurrency.tools`; the dispatcher holds remote jobs of a tool at its limit in its queue.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::ids::{ExecutionId, ToolId};
use crate::policy::rules::Glob;

/// The labels of an execution as the agent group keeps them (`None`: it has none).
pub type Labels = Option<LabelSet>;

/// An execution's labels in one shared allocation, sorted by key. The agent group keeps the
/// labels of every pending, running and blocked execution of its agent; a `BTreeMap` allocates
/// a whole node (544 bytes) even for one label, a third of the kernel's memory per blocked
/// execution (docs/benchmarks.md, T5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSet(Arc<[(Box<str>, Box<str>)]>);

impl LabelSet {
    /// Copies `labels`.
    pub fn new(labels: &BTreeMap<String, String>) -> Self {
        Self(
            labels
                .iter()
                .map(|(key, value)| (key.as_str().into(), value.as_str().into()))
                .collect(),
        )
    }

    /// Returns the value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let pairs = &self.0;
        pairs
            .binary_search_by(|(candidate, _)| candidate.as_ref().cmp(key))
            .ok()
            .map(|index| pairs[index].1.as_ref())
    }
}

impl From<BTreeMap<String, String>> for LabelSet {
    fn from(labels: BTreeMap<String, String>) -> Self {
        Self::new(&labels)
    }
}

/// One `concurrency.labels` entry: at most `max_running` executions of the agent hold a running
/// slot per distinct value of `label`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelLimit {
    /// Label key.
    pub label: String,
    /// Most running executions per value of the label.
    pub max_running: u32,
}

/// The running limits of one agent id (`concurrency.max_running` and `concurrency.labels`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningLimits {
    /// Most running executions of the agent; `None` is unlimited.
    pub max_running: Option<u32>,
    /// Limits per label value, one entry per label key.
    pub labels: Vec<LabelLimit>,
}

/// How one limited label key of an agent is used, for the gauges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelUse {
    /// Label key.
    pub label: String,
    /// Its `max_running` per value.
    pub limit: u32,
    /// Executions with the label holding a slot (offers in flight included), all values.
    pub in_use: usize,
}

/// The running slots of one agent id.
#[derive(Debug, Default)]
pub struct RunningSlots {
    /// `max_running` in force; `None` is unlimited.
    limit: Option<u32>,
    /// Limits per label value in force.
    label_limits: Vec<LabelLimit>,
    /// Executions assigned and not yet terminal or reset, with their labels.
    holding: HashMap<ExecutionId, Labels>,
    /// Executions being offered, with their labels (they count against the label limits).
    offers: HashMap<ExecutionId, Labels>,
    /// Executions whose session ended while their offer was still being answered: the
    /// assignment that answers it must not take a slot (the end came first).
    ended_in_offer: HashSet<ExecutionId>,
    /// Slots in use per (limited label key, value): holding and offered executions.
    usage: HashMap<(String, String), usize>,
}

impl RunningSlots {
    /// Sets `max_running` (`None`: unlimited).
    pub fn set_limit(&mut self, limit: Option<u32>) {
        self.limit = limit;
    }

    /// Sets every running limit: `max_running` and the limits per label value (the label
    /// counts are rebuilt from the executions holding or being offered a slot).
    pub fn set_limits(&mut self, limits: RunningLimits) {
        self.limit = limits.max_running;
        if limits.labels != self.label_limits {
            self.label_limits = limits.labels;
            self.usage.clear();
            let counted: Vec<Labels> = self
                .holding
                .values()
                .chain(self.offers.values())
                .cloned()
                .collect();
            for labels in &counted {
                self.count(labels, true);
            }
        }
    }

    /// Returns `max_running` in force.
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// Returns whether limits per label value are in force.
    pub fn has_label_limits(&self) -> bool {
        !self.label_limits.is_empty()
    }

    /// Adds executions found running or blocked in the store (a group starting).
    pub fn load(&mut self, running: impl IntoIterator<Item = (ExecutionId, Labels)>) {
        for (execution_id, labels) in running {
            self.hold(execution_id, labels);
        }
    }

    /// Returns whether one more offer may start while `offering` offers are in flight (each
    /// offer holds a slot until it is answered), as far as `max_running` goes.
    pub fn admits(&self, offering: usize) -> bool {
        self.limit
            .is_none_or(|limit| self.holding.len() + offering < limit as usize)
    }

    /// Returns the first label key whose value in `labels` is at its limit, if any: an
    /// execution with these labels may not take a slot now.
    pub fn full_label(&self, labels: &Labels) -> Option<&str> {
        let labels = labels.as_ref()?;
        self.label_limits
            .iter()
            .find(|limit| {
                labels.get(&limit.label).is_some_and(|value| {
                    let key = (limit.label.clone(), value.to_owned());
                    self.usage.get(&key).copied().unwrap_or(0) >= limit.max_running as usize
                })
            })
            .map(|limit| limit.label.as_str())
    }

    /// An offer of `execution_id` starts: it counts against its label values until answered.
    pub fn offer_started(&mut self, execution_id: ExecutionId, labels: Labels) {
        self.count(&labels, true);
        if let Some(previous) = self.offers.insert(execution_id, labels) {
            self.count(&previous, false);
        }
    }

    /// An offer was answered with an assignment: the execution keeps its slot, unless its
    /// session already ended while the offer was answered.
    pub fn assigned(&mut self, execution_id: ExecutionId) {
        let labels = self.offers.remove(&execution_id).flatten();
        crate::shrink::relax(&mut self.offers);
        if self.ended_in_offer.remove(&execution_id) {
            crate::shrink::relax_set(&mut self.ended_in_offer);
            self.count(&labels, false);
        } else if let Some(previous) = self.holding.insert(execution_id, labels) {
            self.count(&previous, false);
        }
    }

    /// An execution holds a session after a restart (or found in the store): it takes a slot
    /// unless it holds one already (`labels` `None` keeps the ones known).
    pub fn hold(&mut self, execution_id: ExecutionId, labels: Labels) {
        if self.ended_in_offer.remove(&execution_id) || self.holding.contains_key(&execution_id) {
            return;
        }
        self.count(&labels, true);
        self.holding.insert(execution_id, labels);
    }

    /// An offer ended without an assignment: its label values free.
    pub fn offer_dropped(&mut self, execution_id: &ExecutionId) {
        if self.ended_in_offer.remove(execution_id) {
            crate::shrink::relax_set(&mut self.ended_in_offer);
        }
        if let Some(labels) = self.offers.remove(execution_id) {
            crate::shrink::relax(&mut self.offers);
            self.count(&labels, false);
        }
    }

    /// An execution's session ended (terminal, or reset to `pending`); `offering` tells
    /// whether its offer is still in flight. Returns whether a slot was freed.
    pub fn release(&mut self, execution_id: &ExecutionId, offering: bool) -> bool {
        if offering {
            self.ended_in_offer.insert(execution_id.clone());
        }
        match self.holding.remove(execution_id) {
            Some(labels) => {
                crate::shrink::relax(&mut self.holding);
                self.count(&labels, false);
                true
            }
            None => false,
        }
    }

    /// Returns the number of executions holding a slot.
    pub fn in_use(&self) -> usize {
        self.holding.len()
    }

    /// Returns how each limited label key is used (all its values together).
    pub fn label_use(&self) -> Vec<LabelUse> {
        self.label_limits
            .iter()
            .map(|limit| LabelUse {
                label: limit.label.clone(),
                limit: limit.max_running,
                in_use: self
                    .usage
                    .iter()
                    .filter(|((label, _), _)| label == &limit.label)
                    .map(|(_, used)| used)
                    .sum(),
            })
            .collect()
    }

    /// Adds (`up`) or removes one use of each limited label value in `labels`.
    fn count(&mut self, labels: &Labels, up: bool) {
        let Some(labels) = labels else {
            return;
        };
        for limit in &self.label_limits {
            let Some(value) = labels.get(&limit.label) else {
                continue;
            };
            let key = (limit.label.clone(), value.to_owned());
            if up {
                *self.usage.entry(key).or_default() += 1;
            } else if let Some(used) = self.usage.get_mut(&key) {
                *used = used.saturating_sub(1);
                if *used == 0 {
                    self.usage.remove(&key);
                }
            }
        }
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

#[cfg(test)]
mod label_set_tests {
    use std::collections::BTreeMap;

    use super::LabelSet;

    #[test]
    fn a_label_set_answers_every_key_of_its_map_and_no_other() {
        let map: BTreeMap<String, String> = [("tenant", "acme"), ("env", "prod"), ("b", "")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        let set = LabelSet::new(&map);
        for (key, value) in &map {
            assert_eq!(set.get(key), Some(value.as_str()), "{key}");
        }
        for missing in ["", "a", "tenants", "zz"] {
            assert_eq!(set.get(missing), None, "{missing}");
        }
        assert_eq!(LabelSet::new(&BTreeMap::new()).get("tenant"), None);
        assert_eq!(set, LabelSet::from(map));
    }
}
