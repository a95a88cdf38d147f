//! Metrics of the LLM gateway (docs/llm.md): model calls, tokens, cost and latency per
//! provider and model. Execution ids are never label values.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Most distinct models counted under their own name per kernel; later ones count as `other`.
pub const MAX_MODEL_LABELS: usize = 200;

/// Labels of a model call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Provider name from the gateway configuration.
    pub provider: String,
    /// Model the request named (`other` past [`MAX_MODEL_LABELS`] distinct models).
    pub model: String,
    /// `ok`, `provider_error`, `unreachable`, `client_disconnected`.
    pub outcome: String,
}

/// Labels of token counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// Provider name.
    pub provider: String,
    /// Model (or `other`).
    pub model: String,
    /// `input`, `output` or `cached`.
    pub kind: String,
}

/// Labels of cost and latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    /// Provider name.
    pub provider: String,
    /// Model (or `other`).
    pub model: String,
}

/// Labels of throttling.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThrottleLabels {
    /// Provider name.
    pub provider: String,
    /// Model (or `other`).
    pub model: String,
    /// `provider_429` (the provider answered 429), `rate_limited` (no slot within
    /// `max_wait`), `breaker_open`.
    pub kind: String,
}

/// LLM gateway metrics.
#[derive(Debug)]
pub struct LlmMetrics {
    /// Model calls by provider, model and outcome.
    pub calls: Family<CallLabels, Counter>,
    /// Tokens by provider, model and kind.
    pub tokens: Family<TokenLabels, Counter>,
    /// Cost in US dollars by provider and model (calls with a configured price).
    pub cost_usd: Family<ModelLabels, Counter<f64, AtomicU64>>,
    /// Call latency in seconds, forward to end of answer.
    pub latency: Family<ModelLabels, Histogram>,
    /// Calls refused before the provider, by provider, model and reason.
    pub refused: Family<RefusalLabels, Counter>,
    /// Calls held back by a provider's limits, by provider, model and kind.
    pub throttled: Family<ThrottleLabels, Counter>,
    models: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Labels of a refused call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// Provider name from the gateway configuration.
    pub provider: String,
    /// Model the request named (`other` past [`MAX_MODEL_LABELS`] distinct models); empty when
    /// the call was refused before its request was read (`holder`, and `finished` at the door).
    pub model: String,
    /// Why the call was refused: `holder`, `finished`, `model`, `budget`, `budget_in_flight`,
    /// `throttled`, `breaker`.
    pub reason: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl LlmMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            calls: Family::default(),
            tokens: Family::default(),
            cost_usd: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            refused: Family::default(),
            throttled: Family::default(),
            models: std::sync::Mutex::default(),
        };
        registry.register(
            "llm_throttled",
            "Model calls held back by a provider's limits (its 429, no slot in time, an open breaker), by provider, model and kind",
            metrics.throttled.clone(),
        );
        registry.register(
            "llm_calls",
            "Model calls through the LLM gateway, by provider, model and outcome",
            metrics.calls.clone(),
        );
        registry.register(
            "llm_tokens",
            "Tokens of model calls through the LLM gateway, by provider, model and kind",
            metrics.tokens.clone(),
        );
        registry.register(
            "llm_cost_usd",
            "Cost in US dollars of model calls with a configured price, by provider and model",
            metrics.cost_usd.clone(),
        );
        registry.register(
            "llm_call_seconds",
            "Model call latency through the LLM gateway, forward to end of answer",
            metrics.latency.clone(),
        );
        registry.register(
            "llm_refused",
            "Model calls refused before reaching the provider, by provider, model and reason",
            metrics.refused.clone(),
        );
        metrics
    }

    /// The label value of `model`: itself while fewer than [`MAX_MODEL_LABELS`] models were
    /// seen (or it was seen before), else `other`.
    pub fn model_label(&self, model: &str) -> String {
        let mut models = self
            .models
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if models.contains(model) {
            return super::labels::escape(model);
        }
        if models.len() < MAX_MODEL_LABELS {
            models.insert(model.to_owned());
            return super::labels::escape(model);
        }
        "other".to_owned()
    }

    /// Counts one call held back by `provider`'s limits.
    pub fn throttled(&self, provider: &str, model: &str, kind: &str) {
        let model = self.model_label(model);
        self.throttled
            .get_or_create(&ThrottleLabels {
                provider: provider.to_owned(),
                model,
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one finished call.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        provider: &str,
        model: &str,
        outcome: &str,
        seconds: f64,
        tokens: [(&str, Option<u64>); 3],
        usd: Option<f64>,
    ) {
        let model = self.model_label(model);
        self.calls
            .get_or_create(&CallLabels {
                provider: provider.to_owned(),
                model: model.clone(),
                outcome: outcome.to_owned(),
            })
            .inc();
        let labels = ModelLabels {
            provider: provider.to_owned(),
            model: model.clone(),
        };
        self.latency.get_or_create(&labels).observe(seconds);
        if let Some(usd) = usd.filter(|usd| usd.is_finite() && *usd > 0.0) {
            self.cost_usd.get_or_create(&labels).inc_by(usd);
        }
        for (kind, count) in tokens {
            if let Some(count) = count.filter(|count| *count > 0) {
                self.tokens
                    .get_or_create(&TokenLabels {
                        provider: provider.to_owned(),
                        model: model.clone(),
                        kind: kind.to_owned(),
                    })
                    .inc_by(count);
            }
        }
    }

    /// Counts a call to `provider` refused before the provider. `model` is `None` when the
    /// call was refused before its request was read: a caller that does not hold the execution
    /// must not take model label values from those who do.
    pub fn refused(&self, provider: &str, model: Option<&str>, reason: &str) {
        let model = model
            .map(|model| self.model_label(model))
            .unwrap_or_default();
        self.refused
            .get_or_create(&RefusalLabels {
                provider: provider.to_owned(),
                model,
                reason: reason.to_owned(),
            })
            .inc();
    }
}
