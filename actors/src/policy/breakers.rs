//! The policy actor's circuit breakers: recording step results (and the metrics of the
//! changes they cause) and rebuilding the breakers from the store's results at startup and
//! after a reload that changed them.

use crate::guardrails::breaker::{BreakerChange, Breakers};
use crate::guardrails::metrics::CircuitLabels;
use crate::ids::ToolId;
use crate::metrics::Metrics;
use crate::policy::PolicyEngine;
use crate::store::{Store, ToolResult};
use crate::time::{self, Clock};

/// Records results of tools that have a breaker; returns the changes they caused.
pub(super) fn record(
    breakers: &mut Breakers,
    engine: &dyn PolicyEngine,
    results: &[ToolResult],
    metrics: &Metrics,
) -> Vec<BreakerChange> {
    let set = engine.breakers();
    let mut changes = Vec::new();
    for result in results {
        let Some(config) = set.config(&result.tool_id) else {
            continue;
        };
        if let Some(change) =
            breakers.record(result.tool_id.as_str(), config, result.success, result.at)
        {
            count(metrics, &change);
            log(&change);
            changes.push(change);
        }
    }
    if !changes.is_empty() {
        metrics
            .guardrails
            .circuits_open
            .set(i64::try_from(breakers.open_count()).unwrap_or(i64::MAX));
    }
    changes
}

/// Replays the results of the breakers' horizon from the store. A store that cannot answer is
/// logged and the breakers start closed.
pub(super) async fn rebuild(
    breakers: &mut Breakers,
    engine: &dyn PolicyEngine,
    store: &dyn Store,
    clock: &Clock,
    metrics: &Metrics,
) {
    let Some(horizon) = engine.breakers().horizon() else {
        metrics.guardrails.circuits_open.set(0);
        return;
    };
    let now = clock.now();
    let since = chrono::Duration::from_std(horizon)
        .ok()
        .and_then(|horizon| now.checked_sub_signed(horizon))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    match store.tool_results_since(since).await {
        Ok(results) => {
            let set = engine.breakers();
            for result in &results {
                if let Some(config) = set.config(&result.tool_id) {
                    breakers.record(result.tool_id.as_str(), config, result.success, result.at);
                }
            }
            breakers.sweep(now, |tool| {
                set.config(&ToolId::new(tool)).map(|config| config.window)
            });
            tracing::info!(
                results = results.len(),
                open = breakers.open_count(),
                since = %time::format(&since),
                "circuit breakers rebuilt from the store"
            );
        }
        Err(error) => tracing::error!(
            error = %error,
            "cannot read past step results; circuit breakers start closed"
        ),
    }
    metrics
        .guardrails
        .circuits_open
        .set(i64::try_from(breakers.open_count()).unwrap_or(i64::MAX));
}

fn count(metrics: &Metrics, change: &BreakerChange) {
    let (tool_id, state) = match change {
        BreakerChange::Opened { tool_id, .. } => (tool_id, "open"),
        BreakerChange::Closed { tool_id } => (tool_id, "closed"),
    };
    metrics
        .guardrails
        .circuit_transitions
        .get_or_create(&CircuitLabels {
            tool_id: metrics.guardrails.ids.label(tool_id),
            state: state.to_owned(),
        })
        .inc();
}

fn log(change: &BreakerChange) {
    match change {
        BreakerChange::Opened {
            tool_id,
            failures,
            until,
            probe,
        } => tracing::warn!(
            tool.id = %tool_id,
            failures,
            probe,
            until = %time::format(until),
            "circuit breaker opened"
        ),
        BreakerChange::Closed { tool_id } => {
            tracing::info!(tool.id = %tool_id, "circuit breaker closed");
        }
    }
}
