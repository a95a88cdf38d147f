//! Many requests with a bounded number in flight: `C` workers creating executions (until a
//! count or a deadline) or signalling a list of executions, recording latency, counts and
//! errors as they go.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::RESUME_SIGNAL;
use super::http::Http;
use super::latency::Latency;
use super::report::Errors;

/// What a fan-out records.
pub struct Counters {
    /// Requests that succeeded.
    pub done: AtomicU64,
    /// Their latency.
    pub latency: Latency,
    /// Requests that failed (shared with the rest of the scenario).
    pub errors: Arc<Errors>,
}

impl Counters {
    /// Returns zeroed counters recording errors into `errors`.
    pub fn new(errors: &Arc<Errors>) -> Arc<Self> {
        Arc::new(Self {
            done: AtomicU64::new(0),
            latency: Latency::new(),
            errors: errors.clone(),
        })
    }
}

/// How many executions to create and until when.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Create at most this many.
    pub limit: u64,
    /// Stop starting new creations at this instant.
    pub deadline: Option<tokio::time::Instant>,
}

/// Creates executions of `agent_id` with `concurrency` requests in flight within `budget`;
/// returns the ids created when `keep_ids`, else nothing.
pub async fn create_many(
    http: &Http,
    agent_id: &str,
    budget: Budget,
    concurrency: usize,
    counters: &Arc<Counters>,
    keep_ids: bool,
) -> Vec<String> {
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (http, agent_id, next, counters) = (
            http.clone(),
            agent_id.to_owned(),
            next.clone(),
            counters.clone(),
        );
        workers.spawn(async move {
            let mut ids = Vec::new();
            loop {
                if budget
                    .deadline
                    .is_some_and(|deadline| tokio::time::Instant::now() >= deadline)
                {
                    break;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= budget.limit {
                    break;
                }
                let started = Instant::now();
                match http.create(&agent_id, index).await {
                    Ok(id) => {
                        counters.latency.record(started.elapsed());
                        counters.done.fetch_add(1, Ordering::Relaxed);
                        if keep_ids {
                            ids.push(id);
                        }
                    }
                    Err(error) => counters.errors.record(format!("create: {error}")),
                }
            }
            ids
        });
    }
    let mut created = Vec::new();
    while let Some(joined) = workers.join_next().await {
        if let Ok(ids) = joined {
            created.extend(ids);
        }
    }
    created
}

/// Sends the bench's resume signal to every execution of `ids`, `concurrency` at a time.
pub async fn signal_all(
    http: &Http,
    ids: Arc<Vec<String>>,
    concurrency: usize,
    counters: &Arc<Counters>,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (http, ids, next, counters) =
            (http.clone(), ids.clone(), next.clone(), counters.clone());
        workers.spawn(async move {
            while let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                let started = Instant::now();
                match http.signal(id, RESUME_SIGNAL).await {
                    Ok(()) => {
                        counters.latency.record(started.elapsed());
                        counters.done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => counters.errors.record(format!("signal {id}: {error}")),
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
}
