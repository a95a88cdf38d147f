//! [`Keyed`]: the bookkeeping every supervisor of keyed children shares — which child serves
//! which key, the restart budget of each key, the supervision reports — and [`Directory`], the
//! published key → actor map other actors read to find a live child without asking its
//! supervisor.
//!
//! The execution supervisor (key: execution id), the agent supervisor (agent id) and the
//! dispatcher (runner connection) each own one `Keyed`; what they do with a failure (rebuild
//! from the store, restart, give the job back) stays theirs.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use ractor::{Actor, ActorCell, ActorId, ActorRef, ActorStatus, Message, SpawnErr};

use super::{ActorKind, RestartBudget, SupervisionEvent, Verdict};
use crate::kernel::context::{read, write};
use crate::metrics::Metrics;

/// A shared key → live actor map, written only by the supervisor that owns the children.
pub struct Directory<K, M: Message>(Arc<RwLock<HashMap<K, ActorRef<M>>>>);

impl<K, M: Message> Clone for Directory<K, M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K: Eq + Hash + Clone, M: Message> Default for Directory<K, M> {
    fn default() -> Self {
        Self(Arc::new(RwLock::new(HashMap::new())))
    }
}

impl<K: Eq + Hash + Clone, M: Message> Directory<K, M> {
    /// Returns the live actor of `key`.
    pub fn get(&self, key: &K) -> Option<ActorRef<M>> {
        read(&self.0).get(key).cloned()
    }

    /// Returns every live actor.
    pub fn actors(&self) -> Vec<ActorRef<M>> {
        read(&self.0).values().cloned().collect()
    }

    /// Returns the number of live actors.
    pub fn len(&self) -> usize {
        read(&self.0).len()
    }

    /// Returns whether no actor is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Publishes `actor` as the live actor of `key`. Only the owning supervisor (and test
    /// harnesses standing in for it) call this.
    pub fn insert(&self, key: K, actor: ActorRef<M>) {
        write(&self.0).insert(key, actor);
    }

    /// Removes `key` if `actor` is still the one published for it (a newer actor that already
    /// replaced it stays).
    fn remove_if(&self, key: &K, actor: ActorId) {
        let mut map = write(&self.0);
        if map.get(key).is_some_and(|live| live.get_id() == actor) {
            map.remove(key);
            crate::shrink::relax(&mut map);
        }
    }

    fn clear(&self) {
        *write(&self.0) = HashMap::new();
    }
}

/// The children of one supervisor, by key.
pub struct Keyed<K, M: Message> {
    kind: ActorKind,
    metrics: Arc<Metrics>,
    directory: Option<Directory<K, M>>,
    /// Every child not yet seen to end, live or not, with the key it serves.
    keys: HashMap<ActorId, K>,
    /// The child messages for a key go to.
    live: HashMap<K, ActorRef<M>>,
    budgets: HashMap<K, RestartBudget>,
    /// The id logged and counted for a key.
    label: fn(&K) -> String,
}

impl<K, M> Keyed<K, M>
where
    K: Eq + Hash + Clone + std::fmt::Display,
    M: Message,
{
    /// Returns an empty set of children of `kind`, reported under their key.
    pub fn new(kind: ActorKind, metrics: Arc<Metrics>) -> Self {
        Self::labelled(kind, metrics, K::to_string)
    }
}

impl<K, M> Keyed<K, M>
where
    K: Eq + Hash + Clone,
    M: Message,
{
    /// Returns an empty set of children of `kind`, reported under `label(key)`.
    pub fn labelled(kind: ActorKind, metrics: Arc<Metrics>, label: fn(&K) -> String) -> Self {
        Self {
            kind,
            metrics,
            directory: None,
            keys: HashMap::new(),
            live: HashMap::new(),
            budgets: HashMap::new(),
            label,
        }
    }

    /// Keeps `directory` equal to the live children.
    pub fn publishing(mut self, directory: Directory<K, M>) -> Self {
        self.directory = Some(directory);
        self
    }

    /// Returns the live child of `key`, if it is still running.
    pub fn get(&self, key: &K) -> Option<&ActorRef<M>> {
        self.live.get(key).filter(|actor| is_running(actor))
    }

    /// Returns the keys of the live children.
    pub fn keys(&self) -> Vec<K> {
        self.live.keys().cloned().collect()
    }

    /// Returns whether `key` has a live child (running or not yet seen to end).
    pub fn contains(&self, key: &K) -> bool {
        self.live.contains_key(key)
    }

    /// Returns whether `actor` is the live child of the key it serves (not one taken out of
    /// service or replaced).
    pub fn serves(&self, actor: ActorId) -> bool {
        self.keys
            .get(&actor)
            .and_then(|key| self.live.get(key))
            .is_some_and(|live| live.get_id() == actor)
    }

    /// Starts `actor` linked to `supervisor` as the child of `key` and reports it. A previous
    /// child of the key stays tracked until it ends but no longer receives messages. A child
    /// that stopped inside its own start (nothing to do) is returned but not made live.
    pub async fn spawn<A>(
        &mut self,
        supervisor: &ActorCell,
        key: K,
        actor: A,
        args: A::Arguments,
    ) -> Result<ActorRef<M>, SpawnErr>
    where
        A: Actor<Msg = M>,
    {
        let (child, _) = Actor::spawn_linked(None, actor, args, supervisor.clone()).await?;
        self.keys.insert(child.get_id(), key.clone());
        if is_running(&child) {
            self.admit(key.clone(), child.clone());
        }
        super::report(
            &self.metrics,
            self.kind,
            Some(&(self.label)(&key)),
            &SupervisionEvent::Started,
        );
        Ok(child)
    }

    /// Makes an already tracked child the live one of `key` again (it was taken out with
    /// [`Keyed::take`]).
    pub fn admit(&mut self, key: K, child: ActorRef<M>) {
        if let Some(directory) = &self.directory {
            directory.insert(key.clone(), child.clone());
        }
        self.live.insert(key, child);
    }

    /// Takes the live child of `key` out of service (no messages reach it through the
    /// directory) while it finishes; it stays tracked until it ends.
    pub fn take(&mut self, key: &K) -> Option<ActorRef<M>> {
        let child = self.live.remove(key)?;
        crate::shrink::relax(&mut self.live);
        if let Some(directory) = &self.directory {
            directory.remove_if(key, child.get_id());
        }
        Some(child)
    }

    /// Forgets a child that ended normally; returns the key it served.
    pub fn terminated(&mut self, child: &ActorCell) -> Option<K> {
        self.forget(child.get_id())
    }

    /// Forgets a child that failed, counts the failure against its key's restart budget and
    /// reports the verdict; returns the key and the verdict.
    pub fn failed(&mut self, child: &ActorCell, error: String) -> Option<(K, Verdict)> {
        let key = self.forget(child.get_id())?;
        let budget = self.budgets.entry(key.clone()).or_default();
        let verdict = super::judge_failure(
            &self.metrics,
            self.kind,
            Some(&(self.label)(&key)),
            budget,
            error,
        );
        if super::restart_policy(self.kind).restart == super::RestartType::Temporary {
            // Nothing is ever restarted: no budget to keep.
            self.budgets.remove(&key);
        }
        Some((key, verdict))
    }

    /// Forgets every child (the supervisor stopped them all).
    pub fn clear(&mut self) {
        self.keys.clear();
        self.live.clear();
        if let Some(directory) = &self.directory {
            directory.clear();
        }
    }

    fn forget(&mut self, actor: ActorId) -> Option<K> {
        let key = self.keys.remove(&actor)?;
        crate::shrink::relax(&mut self.keys);
        if self
            .live
            .get(&key)
            .is_some_and(|live| live.get_id() == actor)
        {
            self.live.remove(&key);
            crate::shrink::relax(&mut self.live);
        }
        if let Some(directory) = &self.directory {
            directory.remove_if(&key, actor);
        }
        Some(key)
    }
}

/// Returns whether an actor still takes messages.
pub fn is_running<M: Message>(actor: &ActorRef<M>) -> bool {
    matches!(
        actor.get_status(),
        ActorStatus::Running | ActorStatus::Starting | ActorStatus::Upgrading
    )
}

#[cfg(test)]
#[path = "keyed_tests.rs"]
mod tests;
