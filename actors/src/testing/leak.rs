//! The leak check: at the end of an actor test, every actor the test started — and every actor
//! those started in turn — must have stopped.
//!
//! Two things are checked, within a bounded wait:
//! - every actor of the tracked supervision trees is `Stopped`. Trees close when an actor
//!   terminates, so they are read *before* the actors are stopped;
//! - the runtime runs no more tasks than when the check was created. Every actor is a tokio
//!   task, so this also finds actors spawned without a link to a supervisor (which no tree
//!   shows), and tasks or timers that outlive their actor. Anything the test itself starts
//!   after the check is created must be tracked or dropped before [`LeakCheck::finish`].
//!
//! A test that forgets to call `finish` panics when the check is dropped, so every test that
//! takes one ends with the check.

use std::time::Duration;

use ractor::{ActorCell, ActorStatus};

/// How long stopped actors get to finish their `post_stop`.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The actors started by one test.
pub struct LeakCheck {
    roots: Vec<(String, ActorCell)>,
    baseline: Option<usize>,
    finished: bool,
}

impl Default for LeakCheck {
    fn default() -> Self {
        Self::new()
    }
}

impl LeakCheck {
    /// Returns an empty check; the tasks running now are the baseline.
    pub fn new() -> Self {
        Self {
            roots: Vec::new(),
            baseline: alive_tasks(),
            finished: false,
        }
    }

    /// Tracks an actor (and, at the end, everything it supervises) under `name`.
    pub fn track(&mut self, name: impl Into<String>, actor: ActorCell) {
        self.roots.push((name.into(), actor));
    }

    /// Spawns `actor` with `args` and tracks it under `name`.
    pub async fn spawn<A: ractor::Actor>(
        &mut self,
        name: &str,
        actor: A,
        args: A::Arguments,
    ) -> ractor::ActorRef<A::Msg> {
        match ractor::Actor::spawn(None, actor, args).await {
            Ok((actor, _)) => {
                self.track(name, actor.get_cell());
                actor
            }
            Err(error) => panic!("{name} did not start: {error}"),
        }
    }

    /// Stops every tracked actor (the last tracked first, as the actor under test is usually
    /// tracked after its neighbours) and panics, naming them, if any actor of their trees is
    /// still running after a bounded wait.
    pub async fn finish(mut self) {
        self.finished = true;
        let roots = std::mem::take(&mut self.roots);
        let mut seen = Vec::new();
        for (name, root) in &roots {
            walk(name, root, &mut seen);
        }
        for (_, root) in roots.iter().rev() {
            if root.get_status() != ActorStatus::Stopped {
                let _ = root
                    .stop_and_wait(Some("test finished".into()), Some(STOP_WAIT))
                    .await;
            }
        }
        assert_stopped(&seen, self.baseline, STOP_WAIT).await;
    }
}

impl Drop for LeakCheck {
    fn drop(&mut self) {
        if !self.finished && !self.roots.is_empty() && !std::thread::panicking() {
            let names: Vec<&str> = self.roots.iter().map(|(name, _)| name.as_str()).collect();
            panic!("LeakCheck dropped without finish(): {names:?} may still run");
        }
    }
}

/// Collects `root` and every actor below it, with a path naming where each was found.
pub(crate) fn walk(name: &str, root: &ActorCell, seen: &mut Vec<(String, ActorCell)>) {
    let label = root
        .get_name()
        .map_or_else(|| name.to_owned(), |own| format!("{name}/{own}"));
    for child in root.get_children() {
        let child_label = format!("{label}/{}", child.get_id());
        walk(&child_label, &child, seen);
    }
    seen.push((label, root.clone()));
}

/// Returns the number of tasks alive on the current runtime, if there is one.
pub(crate) fn alive_tasks() -> Option<usize> {
    tokio::runtime::Handle::try_current()
        .ok()
        .map(|runtime| runtime.metrics().num_alive_tasks())
}

/// Waits up to `wait` for every actor of `seen` to be stopped and the runtime's tasks to be
/// back to `baseline`; panics naming what still runs.
pub(crate) async fn assert_stopped(
    seen: &[(String, ActorCell)],
    baseline: Option<usize>,
    wait: Duration,
) {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let running: Vec<&str> = seen
            .iter()
            .filter(|(_, actor)| actor.get_status() != ActorStatus::Stopped)
            .map(|(label, _)| label.as_str())
            .collect();
        let tasks = alive_tasks().unwrap_or(0);
        let extra_tasks = baseline.map_or(0, |baseline| tasks.saturating_sub(baseline));
        if running.is_empty() && extra_tasks == 0 {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            if !running.is_empty() {
                panic!(
                    "leak check: {} actor(s) still running at the end of the test: {running:?}",
                    running.len()
                );
            }
            panic!(
                "leak check: {extra_tasks} task(s) more than when the test started are still \
                 running (an actor spawned without a supervisor, or a task or timer that \
                 outlived its actor)"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use ractor::{Actor, ActorProcessingErr, ActorRef};

    use super::LeakCheck;

    /// Starts a child, linked or not; stops it in `post_stop` only if told to.
    struct Parent {
        linked: bool,
        stops_child: bool,
    }

    struct Child;

    impl Actor for Child {
        type Msg = ();
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    impl Actor for Parent {
        type Msg = ();
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, myself: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
            if self.linked {
                Actor::spawn_linked(None, Child, (), myself.get_cell()).await?;
            } else {
                Actor::spawn(None, Child, ()).await?;
            }
            Ok(())
        }

        async fn post_stop(
            &self,
            myself: ActorRef<()>,
            _: &mut (),
        ) -> Result<(), ActorProcessingErr> {
            if self.stops_child {
                myself.stop_children_and_wait(None, None).await;
            }
            Ok(())
        }
    }

    fn parent(linked: bool, stops_child: bool) -> Parent {
        Parent {
            linked,
            stops_child,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_actor_whose_linked_children_stop_with_it_passes() {
        for stops_child in [true, false] {
            let mut actors = LeakCheck::new();
            actors.spawn("parent", parent(true, stops_child), ()).await;
            actors.finish().await;
        }
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "1 task(s) more than when the test started")]
    async fn an_actor_spawned_without_a_supervisor_and_left_running_is_a_leak() {
        let mut actors = LeakCheck::new();
        actors.spawn("parent", parent(false, false), ()).await;
        actors.finish().await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "1 actor(s) still running")]
    async fn a_tracked_actor_that_does_not_stop_is_a_leak() {
        let actors = LeakCheck::new();
        let (stuck, _) = Actor::spawn(None, Child, ()).await.expect("spawned");
        // Tracked as a child of nothing that `finish` stops: a cell it cannot stop is reported.
        let mut seen = Vec::new();
        super::walk("stuck", &stuck.get_cell(), &mut seen);
        super::assert_stopped(&seen, None, std::time::Duration::from_secs(1)).await;
        actors.finish().await;
    }

    #[tokio::test]
    #[should_panic(expected = "dropped without finish")]
    async fn a_check_dropped_without_finish_fails_the_test() {
        let mut actors = LeakCheck::new();
        actors.spawn("parent", parent(true, true), ()).await;
        drop(actors);
    }
}
