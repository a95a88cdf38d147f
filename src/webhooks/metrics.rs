//! Metrics of webhook deliveries, registered with the kernel's registry (so `/metrics` shows
//! them): `keel_webhook_deliveries_total{subscription,result}` (`ok`, `failed`: every attempt),
//! `keel_webhook_lag_positions{subscription}` (newest position minus the acknowledged one),
//! `keel_webhook_lag_seconds{subscription}` (age of the oldest event not delivered yet, 0 when
//! caught up) and `keel_webhook_buffered_events{subscription}` (events held in memory).

use std::sync::atomic::AtomicU64;

use keel_actors::kernel::Kernel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// Label of per-subscription metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubscriptionLabel {
    /// Subscription id.
    pub subscription: String,
}

/// Labels of delivery attempts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    /// Subscription id.
    pub subscription: String,
    /// `ok` or `failed`.
    pub result: String,
}

/// The webhook metrics.
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    /// Delivery attempts by outcome.
    pub deliveries: Family<DeliveryLabels, Counter>,
    /// Newest position minus the acknowledged position.
    pub lag_positions: Family<SubscriptionLabel, Gauge>,
    /// Age in seconds of the oldest undelivered event.
    pub lag_seconds: Family<SubscriptionLabel, Gauge<f64, AtomicU64>>,
    /// Events read from the log and not delivered yet.
    pub buffered: Family<SubscriptionLabel, Gauge>,
}

impl WebhookMetrics {
    /// Creates the metrics and registers them with `kernel`'s registry.
    pub fn register(kernel: &Kernel) -> Self {
        let metrics = Self::default();
        let registry = kernel.metrics();
        registry.register(
            "webhook_deliveries",
            "Webhook delivery attempts, by subscription and result (ok, failed)",
            metrics.deliveries.clone(),
        );
        registry.register(
            "webhook_lag_positions",
            "Newest event position minus the subscription's acknowledged position",
            metrics.lag_positions.clone(),
        );
        registry.register(
            "webhook_lag_seconds",
            "Age of the oldest event the subscription has not delivered yet (0 when caught up)",
            metrics.lag_seconds.clone(),
        );
        registry.register(
            "webhook_buffered_events",
            "Events a subscription holds in memory (at most one page of the log)",
            metrics.buffered.clone(),
        );
        metrics
    }

    /// Counts one attempt.
    pub fn attempt(&self, subscription: &str, ok: bool) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                subscription: keel_actors::metrics::labels::escape(subscription),
                result: if ok { "ok" } else { "failed" }.to_owned(),
            })
            .inc();
    }

    /// Returns the label of one subscription.
    pub fn label(subscription: &str) -> SubscriptionLabel {
        SubscriptionLabel {
            subscription: keel_actors::metrics::labels::escape(subscription),
        }
    }
}
