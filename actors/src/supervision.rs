//! Supervision rules and reporting. One table says how each actor kind is restarted; one helper
//! logs every supervision event with stable fields and counts it, so an operator watching the
//! logs sees the tree heal.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

pub mod keyed;

pub use keyed::{Directory, Keyed};

/// The kinds of actor in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActorKind {
    /// Root supervisor.
    Kernel,
    /// Policy decisions and rate limits.
    Policy,
    /// Group-committing store writer.
    StoreWriter,
    /// Supervisor of execution actors.
    ExecutionSupervisor,
    /// One live execution.
    Execution,
    /// Supervisor of agent groups.
    AgentSupervisor,
    /// Consumers of one agent id.
    AgentGroup,
    /// Queued jobs and idle runners.
    Dispatcher,
    /// One runner connection.
    Runner,
}

impl ActorKind {
    /// Returns the stable name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Policy => "policy",
            Self::StoreWriter => "store_writer",
            Self::ExecutionSupervisor => "execution_supervisor",
            Self::Execution => "execution",
            Self::AgentSupervisor => "agent_supervisor",
            Self::AgentGroup => "agent_group",
            Self::Dispatcher => "dispatcher",
            Self::Runner => "runner",
        }
    }
}

/// How a failed actor is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartType {
    /// Always restarted (within its limit).
    Permanent,
    /// Restarted after a failure, not after a normal stop.
    Transient,
    /// Never restarted.
    Temporary,
}

/// The restart rule of one actor kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// When to restart.
    pub restart: RestartType,
    /// Restarts allowed within `window`.
    pub max_restarts: u32,
    /// Window of the limit.
    pub window: Duration,
}

/// Returns the restart rule of an actor kind: the one table of the tree.
pub fn restart_policy(kind: ActorKind) -> RestartPolicy {
    let minute = Duration::from_secs(60);
    match kind {
        ActorKind::Policy
        | ActorKind::StoreWriter
        | ActorKind::Dispatcher
        | ActorKind::AgentGroup => RestartPolicy {
            restart: RestartType::Permanent,
            max_restarts: 10,
            window: minute,
        },
        ActorKind::Execution => RestartPolicy {
            restart: RestartType::Transient,
            max_restarts: 3,
            window: minute,
        },
        ActorKind::Runner => RestartPolicy {
            restart: RestartType::Temporary,
            max_restarts: 0,
            window: minute,
        },
        ActorKind::Kernel | ActorKind::ExecutionSupervisor | ActorKind::AgentSupervisor => {
            RestartPolicy {
                restart: RestartType::Temporary,
                max_restarts: 0,
                window: minute,
            }
        }
    }
}

/// What happened to a supervised actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SupervisionEvent {
    /// The actor started.
    Started,
    /// The actor stopped normally.
    Stopped {
        /// Reason given, if any.
        reason: String,
    },
    /// The actor failed and was restarted.
    Restarted {
        /// The failure.
        error: String,
        /// Restarts within the current window, this one included.
        count: u32,
    },
    /// The actor failed and will not be restarted.
    GaveUp {
        /// The failure.
        error: String,
        /// Restarts within the current window.
        count: u32,
    },
}

/// Logs a supervision event with stable fields and counts it. `id` is the execution, agent or
/// runner id the actor serves, when it has one.
pub fn report(metrics: &Metrics, kind: ActorKind, id: Option<&str>, event: &SupervisionEvent) {
    let kind_name = kind.as_str();
    let id = id.unwrap_or("");
    metrics.supervision_log.record(SupervisionRecord {
        kind,
        id: id.to_owned(),
        event: event.clone(),
    });
    match event {
        SupervisionEvent::Started => {
            tracing::debug!(actor.kind = kind_name, actor.id = id, "actor started");
            metrics.supervision_event(kind_name, "started");
        }
        SupervisionEvent::Stopped { reason } => {
            // Executions that ended or were passivated stop by design, thousands a second.
            if matches!(reason.as_str(), "terminal" | "passivated") {
                tracing::debug!(actor.kind = kind_name, actor.id = id, reason = %reason, "actor stopped");
            } else {
                tracing::info!(actor.kind = kind_name, actor.id = id, reason = %reason, "actor stopped");
            }
            metrics.supervision_event(kind_name, "stopped");
        }
        SupervisionEvent::Restarted { error, count } => {
            tracing::warn!(
                actor.kind = kind_name, actor.id = id, restart.count = count, error = %error,
                decision = "restart", "actor failed"
            );
            metrics.supervision_event(kind_name, "restarted");
        }
        SupervisionEvent::GaveUp { error, count } => {
            tracing::error!(
                actor.kind = kind_name, actor.id = id, restart.count = count, error = %error,
                decision = "give_up", "actor restart limit reached"
            );
            metrics.supervision_event(kind_name, "gave_up");
        }
    }
}

/// What a supervisor decided about a failed child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the child may be restarted (within its limit).
    pub restart: bool,
    /// Failures within the current window, this one included.
    pub count: u32,
}

/// Records a failure of an actor of `kind` in its restart budget, reports it (restart or
/// give up) and returns the verdict. The one place supervisors turn a failure into a decision.
pub fn judge_failure(
    metrics: &Metrics,
    kind: ActorKind,
    id: Option<&str>,
    budget: &mut RestartBudget,
    error: String,
) -> Verdict {
    let policy = restart_policy(kind);
    let (count, allowed) = budget.record(&policy, std::time::Instant::now());
    let restart = allowed && policy.restart != RestartType::Temporary;
    let event = if restart {
        SupervisionEvent::Restarted { error, count }
    } else {
        SupervisionEvent::GaveUp { error, count }
    };
    report(metrics, kind, id, &event);
    Verdict { restart, count }
}

/// One supervision event as the kernel recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisionRecord {
    /// Actor kind.
    pub kind: ActorKind,
    /// Execution, agent or runner id the actor serves (`""` for singletons).
    pub id: String,
    /// What happened.
    pub event: SupervisionEvent,
}

/// The most recent supervision events of a kernel (bounded), for tests and diagnostics.
#[derive(Debug, Default)]
pub struct SupervisionLog {
    records: std::sync::Mutex<VecDeque<SupervisionRecord>>,
}

impl SupervisionLog {
    /// Records kept; older ones are dropped.
    pub const CAPACITY: usize = 1024;

    fn record(&self, record: SupervisionRecord) {
        let mut records = self
            .records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if records.len() >= Self::CAPACITY {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// Returns the recorded events, oldest first.
    pub fn records(&self) -> Vec<SupervisionRecord> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

/// Sliding count of restarts, to enforce a [`RestartPolicy`] limit.
#[derive(Clone, Debug, Default)]
pub struct RestartBudget {
    restarts: VecDeque<Instant>,
}

impl RestartBudget {
    /// Records a failure at `now`; returns the number of restarts in the window (this one
    /// included) and whether a restart is still allowed.
    pub fn record(&mut self, policy: &RestartPolicy, now: Instant) -> (u32, bool) {
        while self
            .restarts
            .front()
            .is_some_and(|at| now.duration_since(*at) > policy.window)
        {
            self.restarts.pop_front();
        }
        self.restarts.push_back(now);
        let count = u32::try_from(self.restarts.len()).unwrap_or(u32::MAX);
        (count, count <= policy.max_restarts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_budget_refuses_past_the_limit_and_forgets_old_failures() {
        let policy = restart_policy(ActorKind::Execution);
        let mut budget = RestartBudget::default();
        let start = Instant::now();
        assert_eq!(budget.record(&policy, start), (1, true));
        assert_eq!(budget.record(&policy, start), (2, true));
        assert_eq!(budget.record(&policy, start), (3, true));
        assert_eq!(budget.record(&policy, start), (4, false));
        let later = start + policy.window + Duration::from_secs(1);
        assert_eq!(budget.record(&policy, later), (1, true));
    }
}
